"""Concurrency sweep: streaming requests at each level, per-level latency and accept length.

Load model: closed loop. At level c, c workers each send one streaming chat
request at a time until the level's prompts are used up; the level lasts from
the first send to the last answer. Every level (and every arm of an A/B) sends
the same prompts in the same seeded order. Before each level the server's
prefix cache is flushed, so a level never reuses the previous level's prefill.

The accept length of a level is the delta of SGLang's own counters (generated
tokens / verify calls, Prometheus /metrics) over exactly that level; when the
server has no such counters it is the sum over the level's requests of the
per-request counts streamed in `sglext` (each is tokens / verify cycles).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import probe, stats
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.prompts import Prompt, PromptSet

DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
PER_CONCURRENCY = 5  # SGLang's advice: num-prompts >= 5 x concurrency for a steady state
SERVER_GONE = {cl.E_REFUSED, cl.E_LOST, cl.E_INCOMPLETE}
ERROR_EXAMPLES = 3
CLIENT_BUSY = 0.9  # warn when the client itself used more than this share of a core


class Interrupted(Exception):
    """Ctrl-C: what was finished has been written; the command stops."""


@dataclass
class Load:
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0

    def request_seed(self, i: int) -> int | None:
        return self.seed + i if self.temperature > 0 else None


@dataclass
class SLO:
    """Latency goals a request must meet to count toward goodput."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    source: str = ""

    @property
    def set(self) -> bool:
        return self.tpot_ms is not None or self.ttft_ms is not None

    def met(self, r: cl.RequestResult) -> bool:
        if not r.ok:
            return False
        if self.tpot_ms is not None and (r.tpot is None or r.tpot * 1e3 > self.tpot_ms):
            return False
        return not (self.ttft_ms is not None and (r.ttft is None or r.ttft * 1e3 > self.ttft_ms))

    def describe(self) -> str:
        parts = []
        if self.tpot_ms is not None:
            parts.append(f"TPOT <= {self.tpot_ms:.1f} ms")
        if self.ttft_ms is not None:
            parts.append(f"TTFT <= {self.ttft_ms:.0f} ms")
        return " and ".join(parts) + (f" ({self.source})" if self.source else "")


@dataclass
class Level:
    """One finished (or interrupted) level: raw results plus the record fields."""

    concurrency: int
    results: list[cl.RequestResult]
    duration: float
    interrupted: bool = False
    server_gone: bool = False
    fields: dict = field(default_factory=dict)


def _ms(values) -> dict:
    return stats.percentiles([v * 1e3 for v in values])


def level_metrics(
    results: list[cl.RequestResult], duration: float, load: Load, slo: SLO | None = None
) -> dict:
    """Record fields of one level from its requests (pure; unit-tested)."""
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if not r.ok)
    examples = [f"{r.error}: {r.detail}" for r in results if not r.ok][:ERROR_EXAMPLES]
    short = [
        r
        for r in ok
        if load.ignore_eos and (r.completion_tokens or 0) < (r.max_tokens or load.max_tokens)
    ]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    chunks = sum(len(r.chunk_times) for r in ok)
    itls = [g for r in ok for g in r.itls]
    spec = [r for r in ok if r.spec_verify_ct]
    verify = sum(r.spec_verify_ct for r in spec)
    out = {
        "requests": len(results),
        "completed": len(ok),
        "errors": dict(errors),
        "error_examples": examples,
        "short": len(short),
        "short_examples": [
            f"{r.prompt_id}: {r.completion_tokens}/{r.max_tokens or load.max_tokens} tokens "
            f"(finish {r.finish_reason})"
            for r in short[:ERROR_EXAMPLES]
        ],
        "malformed_chunks": sum(r.malformed for r in results),
        "tokens_estimated": sum(1 for r in ok if not r.tokens_from_usage),
        "duration_s": duration,
        "output_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "output_tok_s": tokens / duration if duration > 0 else None,
        "request_s": len(ok) / duration if duration > 0 else None,
        "ttft_ms": _ms(r.ttft for r in ok if r.ttft is not None),
        "tpot_ms": _ms(r.tpot for r in ok if r.tpot is not None),
        "itl_ms": _ms(itls),
        "e2e_ms": _ms(r.e2e for r in ok if r.e2e is not None),
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "accept_length_requests": (
            sum(r.completion_tokens for r in spec) / verify if verify else None
        ),
        "verify_calls_requests": verify or None,
    }
    out.update(goodput_fields(results, duration, slo))
    return out


def goodput_fields(results: list[cl.RequestResult], duration: float, slo: SLO | None) -> dict:
    """Output tok/s and req/s of the requests that met the SLO ({} without an SLO)."""
    if slo is None or not slo.set:
        return {}
    good = [r for r in results if slo.met(r)]
    return {
        "slo": {"tpot_ms": slo.tpot_ms, "ttft_ms": slo.ttft_ms, "source": slo.source},
        "goodput_tok_s": (
            sum(r.completion_tokens or 0 for r in good) / duration if duration > 0 else None
        ),
        "goodput_req_s": len(good) / duration if duration > 0 else None,
    }


async def run_requests(
    client: cl.Client,
    prompts: list[Prompt],
    concurrency: int,
    load: Load,
    console: Console,
    desc: str,
) -> tuple[list[cl.RequestResult], float, bool]:
    """Send `prompts` with at most `concurrency` in flight. Returns (results, seconds,
    interrupted); on Ctrl-C the requests finished so far come back."""
    results: list[cl.RequestResult] = []
    order = iter(enumerate(prompts))
    bar = console.bar(len(prompts), desc)

    async def worker() -> None:
        for i, p in order:
            r = await client.chat(
                p.as_messages(),
                getattr(p, "output_len", None) or load.max_tokens,  # a workload's own length
                index=i,
                prompt_id=p.id,
                temperature=load.temperature,
                ignore_eos=load.ignore_eos,
                seed=load.request_seed(i),
            )
            results.append(r)
            bar.update(1)

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(prompts))))]
    interrupted = False
    try:
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        interrupted = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        bar.close()
    return sorted(results, key=lambda r: r.index), time.perf_counter() - t0, interrupted


async def warm_up(
    client: cl.Client, prompt_set: PromptSet, n: int, load: Load, console: Console
) -> None:
    """`n` full-length requests (same max tokens, EOS ignored) before anything is measured."""
    if n <= 0:
        return
    prompts = prompt_set.take(n, load.seed)
    console.info(f"warm-up: {n} request(s) of {load.max_tokens} tokens")
    results, took, interrupted = await run_requests(client, prompts, n, load, console, "warm-up")
    if interrupted:
        raise Interrupted("during the warm-up")
    bad = [r for r in results if not r.ok]
    if bad:
        console.warn(f"warm-up: {len(bad)}/{n} request(s) failed ({bad[0].error}: {bad[0].detail})")
    short = [
        r
        for r in results
        if r.ok
        and load.ignore_eos
        and (r.completion_tokens or 0) < (r.max_tokens or load.max_tokens)
    ]
    if short:
        console.warn(
            f"warm-up: {len(short)} request(s) came back short "
            f"({short[0].completion_tokens}/{load.max_tokens} tokens): the server "
            f"ignores ignore_eos or caps the length (context length?)"
        )
    console.info(f"warm-up done in {took:.1f} s")


def per_level_prompts(num_prompts: int, per_concurrency: int, concurrency: int) -> int:
    return max(num_prompts, per_concurrency * concurrency, 1)


async def run_level(
    server: probe.Server,
    client: cl.Client,
    prompt_set: PromptSet,
    concurrency: int,
    n: int,
    load: Load,
    console: Console,
    *,
    flush: bool = True,
    slo: SLO | None = None,
) -> Level:
    prompts = prompt_set.take(n, load.seed)
    if flush:
        await asyncio.to_thread(server.flush_cache)
    before = await asyncio.to_thread(server.counters)
    cpu0 = time.process_time()
    runner = getattr(prompt_set, "runner", lambda: None)()  # multi-turn runs its own level
    if runner is not None:
        results, duration, interrupted = await runner(
            client, n, concurrency, load, console, f"c={concurrency}"
        )
    else:
        results, duration, interrupted = await run_requests(
            client, prompts, concurrency, load, console, f"c={concurrency}"
        )
    cpu = time.process_time() - cpu0
    fields = level_metrics(results, duration, load, slo)
    # The load generator's own CPU use: near 100% of its core means it may be the limit.
    fields["client_cpu_s"] = cpu
    fields["client_busy"] = cpu / duration if duration > 0 else None
    level = Level(concurrency, results, duration, interrupted)
    gone = any(r.error in SERVER_GONE for r in results)
    if interrupted:
        after = None  # cancelled requests may still be counted: use the per-request sum
    elif gone and not await asyncio.to_thread(server.alive):
        level.server_gone = True
        after = None
    else:
        after = await asyncio.to_thread(server.counters_after, before, fields["output_tokens"])
    acc = probe.accept_from_counters(before, after)
    fields["accept_length_metrics"] = acc["accept_length"]
    fields["verify_calls_metrics"] = acc["verify_calls"]
    fields["generation_tokens_metrics"] = acc["generation_tokens"]
    if acc["accept_length"] is not None:
        fields["accept_length"] = acc["accept_length"]
        fields["accept_length_source"] = "metrics delta"
    elif fields["accept_length_requests"] is not None:
        fields["accept_length"] = fields["accept_length_requests"]
        fields["accept_length_source"] = "per-request sum"
    else:
        fields["accept_length"], fields["accept_length_source"] = None, None
    gen = acc["generation_tokens"]
    if (
        gen is not None
        and not level.server_gone
        and not fields["errors"]
        and gen > fields["output_tokens"] * 1.02 + 2
    ):
        fields["other_traffic"] = (
            f"the server generated {gen:.0f} tokens during this level, "
            f"the benchmark received {fields['output_tokens']}: other "
            f"clients were using it"
        )
    fields["status"] = (
        "server died"
        if level.server_gone
        else "interrupted"
        if interrupted
        else "errors"
        if fields["errors"]
        else "ok"
    )
    level.fields = fields
    return level


def _trio(block: dict, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    if not block or block.get("p50") is None:
        return "-"
    return "/".join(fmt.format(block[p] * scale) for p in ("p50", "p90", "p99"))


def _num(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


TABLE_HEAD = (
    f"{'conc':>5} {'done':>5} {'err':>4} {'short':>5} {'out tok/s':>10} {'req/s':>7} "
    f"{'TTFT ms p50/90/99':>18} {'TPOT ms p50/90/99':>18} {'ITL ms p50/90/99':>18} "
    f"{'E2E s p50/90/99':>16} {'tok/chunk':>9} {'accept':>6}"
)


def table_row(f: dict, concurrency: int) -> str:
    err = sum(f["errors"].values()) if f.get("errors") else 0
    return (
        f"{concurrency:>5} {f['completed']:>5} {err:>4} {f['short']:>5} "
        f"{_num(f['output_tok_s']):>10} {_num(f['request_s'], '{:.2f}'):>7} "
        f"{_trio(f['ttft_ms']):>18} {_trio(f['tpot_ms'], fmt='{:.1f}'):>18} "
        f"{_trio(f['itl_ms'], fmt='{:.1f}'):>18} "
        f"{_trio(f['e2e_ms'], 1e-3, '{:.2f}'):>16} "
        f"{_num(f.get('tokens_per_chunk'), '{:.2f}'):>9} "
        f"{_num(f.get('accept_length'), '{:.2f}'):>6}"
    )


def goodput_cell(f: dict) -> str:
    """The goodput column, when the level has an SLO (a default one is set after c=1)."""
    if "goodput_tok_s" not in f:
        return ""
    return f" {_num(f['goodput_tok_s']):>13}"


def level_notes(f: dict, concurrency: int) -> list[str]:
    notes = []
    if f["errors"]:
        shown = ", ".join(f"{n} x {k}" for k, n in sorted(f["errors"].items()))
        notes.append(
            f"c={concurrency}: {sum(f['errors'].values())} failed request(s): {shown}; "
            f"e.g. {f['error_examples'][0]}"
        )
    if f["short"]:
        notes.append(
            f"c={concurrency}: {f['short']} request(s) came back short, e.g. "
            f"{f['short_examples'][0]}"
        )
    if f["malformed_chunks"]:
        notes.append(f"c={concurrency}: {f['malformed_chunks']} malformed stream chunk(s) skipped")
    if f.get("tokens_estimated"):
        notes.append(
            f"c={concurrency}: {f['tokens_estimated']} request(s) had no usage chunk: "
            f"tokens counted as chunks"
        )
    if (f.get("client_busy") or 0) > CLIENT_BUSY and f.get("duration_s", 0) > 1:
        notes.append(
            f"c={concurrency}: this client used {f['client_busy'] * 100:.0f}% of a CPU "
            f"core: it may be what limits the figures (a busier host, or more streams "
            f"than one core can drive)"
        )
    if f.get("other_traffic"):
        notes.append(f"c={concurrency}: {f['other_traffic']}")
    return notes


@dataclass
class SweepOutcome:
    levels: list[Level]
    stopped: str = ""  # why the sweep ended early ("" when it ran every level)


def default_slo(first: Level, factor: float = 2.0) -> SLO:
    """Interactive SLO from the first (lowest-concurrency) level: TPOT <= factor x its p50."""
    p50 = first.fields.get("tpot_ms", {}).get("p50")
    if p50 is None:
        return SLO()
    return SLO(
        tpot_ms=factor * p50,
        source=f"default: {factor:g} x p50 TPOT of the first arm at c={first.concurrency}",
    )


async def run_sweep(
    server: probe.Server,
    client: cl.Client,
    prompt_set: PromptSet,
    levels: list[int],
    *,
    num_prompts: int,
    per_concurrency: int,
    load: Load,
    console: Console,
    write,
    arm: str = "",
    flush: bool = True,
    slo: SLO | None = None,
    derive_slo: bool = False,
    on_level=None,
) -> SweepOutcome:
    """Run every level in ascending order; `write(fields)` records each level as it ends.

    derive_slo: without an SLO, take default_slo() from the first level (bench ab).
    Raises Interrupted after writing the interrupted level.
    """
    done: list[Level] = []
    slo = slo or SLO()
    if levels:
        head = TABLE_HEAD + (f" {'goodput tok/s':>13}" if slo.set or derive_slo else "")
        console.out(head if not arm else f"[{arm}]\n{head}")
    for c in sorted(levels):
        n = per_level_prompts(num_prompts, per_concurrency, c)
        level = await run_level(
            server, client, prompt_set, c, n, load, console, flush=flush, slo=slo
        )
        if derive_slo and not slo.set and not done:
            slo.__dict__.update(default_slo(level).__dict__)
            level.fields.update(goodput_fields(level.results, level.duration, slo))
        done.append(level)
        f = level.fields
        f["prompts_per_level"] = n
        if n < PER_CONCURRENCY * c:
            f["steady_state_note"] = (
                f"{n} prompts at concurrency {c}: fewer than "
                f"{PER_CONCURRENCY} x concurrency, so ramp-up and drain "
                f"weigh on the figures"
            )
        if on_level is not None:  # per-request records, input-length check
            on_level(level)
        write(c, f)
        console.out(table_row(f, c) + goodput_cell(f))
        for note in level_notes(f, c):
            console.warn(note)
        if level.interrupted:
            raise Interrupted(f"at concurrency {c}")
        if level.server_gone:
            return SweepOutcome(
                done, f"the server at {server.base_url} stopped answering during concurrency {c}"
            )
    return SweepOutcome(done)
