"""Lossless check: the same prompts at temperature 0 must give the same text on both servers.

Speculative decoding with greedy verification must not change greedy output.
Prompts are sent one at a time (batch composition cannot differ between the
two servers), EOS is respected so both stop where the model stops. A
difference is shown where it starts; on GPUs a late divergence after a long
common prefix usually means floating-point noise between kernels (verify runs
several tokens per forward), an early one a real bug.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench.loads import Load
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.prompts import Prompt
from sgl_eagle_ext.tools.bench.sweep import run_requests

SNIPPET = 60
DEFAULT_PROMPTS = 8
DEFAULT_MAX_TOKENS = 64


async def generate(
    client: cl.Client, prompts: list[Prompt], max_tokens: int, console: Console, desc: str
) -> tuple[list[cl.RequestResult], bool]:
    load = Load(max_tokens=max_tokens, temperature=0.0, ignore_eos=False)
    results, _, interrupted = await run_requests(client, prompts, 1, load, console, desc)
    return results, interrupted


@dataclass(frozen=True)
class Difference:
    index: int
    id: str
    common_prefix_chars: int
    a_chars: int
    b_chars: int
    a: str  # each side's text around where they part
    b: str
    a_tokens: int | None
    b_tokens: int | None


@dataclass(frozen=True)
class NotCompared:
    index: int
    id: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """A lossless record's fields (`asdict`)."""

    verdict: str  # IDENTICAL | DIFFERS | INCOMPLETE
    prompts: int
    compared: int
    identical: int
    differences: list[Difference]
    failed: list[NotCompared]


def compare(prompts: list[Prompt], a: list[cl.RequestResult], b: list[cl.RequestResult]) -> Verdict:
    """The two arms' greedy outputs, prompt by prompt (pure; unit-tested)."""
    diffs, failed, identical = [], [], 0
    by_a = {r.index: r for r in a}
    by_b = {r.index: r for r in b}
    for i, p in enumerate(prompts):
        ra, rb = by_a.get(i), by_b.get(i)
        if ra is None or rb is None or not ra.ok or not rb.ok:
            why = [
                f"{arm}: {r.error or 'not run'}"
                for arm, r in (("A", ra), ("B", rb))
                if r is None or not r.ok
            ]
            failed.append(NotCompared(i, p.id, "; ".join(why)))
            continue
        if ra.text == rb.text:
            identical += 1
            continue
        k = len(os.path.commonprefix((ra.text, rb.text)))
        lo = max(0, k - SNIPPET // 3)
        diffs.append(
            Difference(
                index=i,
                id=p.id,
                common_prefix_chars=k,
                a_chars=len(ra.text),
                b_chars=len(rb.text),
                a=ra.text[lo : k + SNIPPET],
                b=rb.text[lo : k + SNIPPET],
                a_tokens=ra.completion_tokens,
                b_tokens=rb.completion_tokens,
            )
        )
    compared = identical + len(diffs)
    verdict = "DIFFERS" if diffs else "INCOMPLETE" if failed else "IDENTICAL"
    return Verdict(verdict, len(prompts), compared, identical, diffs, failed)


def verdict_lines(f: Verdict, label_a: str = "A", label_b: str = "B") -> list[str]:
    head = {
        "IDENTICAL": f"lossless: IDENTICAL: {f.identical}/{f.prompts} outputs of "
        f"{label_b} match {label_a} exactly at temperature 0",
        "DIFFERS": f"lossless: DIFFERS: {len(f.differences)}/{f.compared} compared "
        f"outputs of {label_b} differ from {label_a} at temperature 0",
        "INCOMPLETE": f"lossless: INCOMPLETE: {len(f.failed)}/{f.prompts} prompt(s) "
        f"could not be compared ({f.identical} identical, "
        f"{len(f.differences)} different)",
    }[f.verdict]
    lines = [head]
    for d in f.differences:
        lines.append(f"  {d.id}: same for {d.common_prefix_chars} chars, then")
        lines.append(f"    {label_a}: {d.a!r}")
        lines.append(f"    {label_b}: {d.b!r}")
    for x in f.failed:
        lines.append(f"  {x.id}: not compared ({x.why})")
    return lines
