"""Single stream: fixed-length generations one at a time, with spread and confidence.

Every run asks for exactly --max-tokens tokens with EOS ignored (unless
--respect-eos), so runs are comparable. A run that comes back shorter is
flagged and left out of the averages, never silently averaged in. Warm-up runs
use the same length. The runs use the same prompt (one prompt's acceptance
does not vary) unless --vary-prompts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import probe, stats
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.prompts import PromptSet
from sgl_eagle_ext.tools.bench.sweep import Interrupted, Load


@dataclass(frozen=True)
class RunFields:
    """One run as its record holds it (`runs_detail` / `warmup`: asdict of each)."""

    run: int
    prompt_id: str | None
    ok: bool
    error: str | None
    detail: str | None
    tokens: int | None
    seconds: float | None
    tok_s: float | None
    decode_tok_s: float | None  # after the first token
    prompt_tokens: int | None
    ttft_ms: float | None
    accept_length: float | None  # decode-only (SGLang's /server_info convention)
    accept_length_with_prefill: float | None
    verify_calls: int | None
    decoded_tokens: int | None
    finish_reason: str | None
    short: bool  # fewer tokens than asked
    counted: bool  # in the averages
    malformed_chunks: int


def run_fields(i: int, r: cl.RequestResult, load: Load, respect_eos: bool) -> RunFields:
    ok = r.ok
    short = ok and (r.completion_tokens or 0) < load.max_tokens
    tokens, verify = (r.completion_tokens, r.spec_verify_ct) if ok else (None, None)
    decode = None
    if ok and (tokens or 0) > 1 and r.e2e and r.ttft is not None and r.e2e > r.ttft:
        decode = (tokens - 1) / (r.e2e - r.ttft)
    return RunFields(
        run=i,
        prompt_id=r.prompt_id,
        ok=ok,
        error=r.error or None,
        detail=r.detail or None,
        tokens=tokens,
        seconds=r.e2e,
        tok_s=r.tok_s,
        decode_tok_s=decode,
        prompt_tokens=r.prompt_tokens,
        ttft_ms=r.ttft * 1e3 if r.ttft is not None else None,
        accept_length=accept.from_counts(r.decoded_tokens if ok else None, verify),
        accept_length_with_prefill=accept.from_counts(tokens, verify),
        verify_calls=verify,
        decoded_tokens=r.decoded_tokens if ok and verify else None,
        finish_reason=r.finish_reason,
        short=bool(short),
        counted=bool(ok and (not short or respect_eos)),
        malformed_chunks=r.malformed,
    )


def run_line(f: RunFields, total: int, max_tokens: int, warmup: bool = False) -> str:
    tag = f"warm-up {f.run}/{total}" if warmup else f"run {f.run}/{total}"
    if not f.ok:
        return f"{tag}: FAILED ({f.error}: {f.detail})"
    acc = f" accept {f.accept_length:.2f}," if f.accept_length else ""
    line = (
        f"{tag}: {f.tokens} tokens in {f.seconds:.2f} s = {f.tok_s:.1f} tok/s "
        f"(prompt {f.prompt_tokens} tokens, TTFT {f.ttft_ms:.0f} ms,{acc} "
        f"decode {f.decode_tok_s or 0:.1f} tok/s)"
    )
    if f.short:
        line += f"  SHORT: {f.tokens}/{max_tokens} tokens (finish {f.finish_reason})" + (
            "" if f.counted else ": not averaged"
        )
    return line


@dataclass(frozen=True)
class Summary:
    """The runs summarized, as the record holds it (its top-level fields)."""

    tok_s: stats.Summary
    overall_tok_s: float | None
    output_tokens: int
    seconds: float
    decode_tok_s: stats.Summary
    ttft_ms: stats.Summary
    short: int
    failed: int
    steady: bool | None
    warnings: list[str]
    accept_length_requests: float | None
    accept_length_requests_with_prefill: float | None
    accept_length: float | None  # the figure shown, from...
    accept_length_source: str | None  # ..."metrics delta" or "per-request sum"


def summarize(runs: list[RunFields], max_cv: float, from_counters: float | None) -> Summary:
    """The runs summarized; the accept length shown is SGLang's counters' over the runs
    (`from_counters`), else the per-request sum."""
    counted = [f for f in runs if f.counted]
    tok = stats.summary(f.tok_s for f in counted)
    secs = sum(f.seconds for f in counted)
    toks = sum(f.tokens for f in counted)
    warnings = stats.steady_state_warnings([f.tok_s for f in counted], max_cv)
    drafted = [f for f in counted if f.verify_calls]
    verify = sum(f.verify_calls for f in drafted)
    from_requests = accept.from_counts(sum(f.decoded_tokens or 0 for f in drafted), verify)
    if from_counters is not None:
        shown, source = from_counters, "metrics delta"
    elif from_requests is not None:
        shown, source = from_requests, "per-request sum"
    else:
        shown, source = None, None
    return Summary(
        tok_s=tok,
        overall_tok_s=toks / secs if secs else None,
        output_tokens=toks,
        seconds=secs,
        decode_tok_s=stats.summary(f.decode_tok_s for f in counted if f.decode_tok_s),
        ttft_ms=stats.summary(f.ttft_ms for f in counted if f.ttft_ms is not None),
        short=sum(1 for f in runs if f.short),
        failed=sum(1 for f in runs if not f.ok),
        steady=not warnings if tok.n >= 2 else None,
        warnings=warnings,
        accept_length_requests=from_requests,
        accept_length_requests_with_prefill=accept.from_counts(
            sum(f.tokens for f in drafted), verify
        ),
        accept_length=shown,
        accept_length_source=source,
    )


def summary_lines(s: Summary, runs: int) -> list[str]:
    t = s.tok_s
    if not t.n:
        return [f"no run counted out of {runs}: nothing to average"]
    lines = [
        f"tok/s over {t.n} counted run(s) of {runs}: overall {s.overall_tok_s:.1f} "
        f"({s.output_tokens} tokens in {s.seconds:.2f} s)"
    ]
    if t.n >= 2:
        half = (t.ci95_high - t.ci95_low) / 2
        lines.append(
            f"  mean {t.mean:.1f}  median {t.median:.1f}  min {t.min:.1f}  "
            f"max {t.max:.1f}  stdev {t.stdev:.2f}  95% CI {t.ci95_low:.1f} .. "
            f"{t.ci95_high:.1f} (+/-{half / t.mean * 100:.1f}%)"
        )
    else:
        lines.append(
            f"  one run: {t.mean:.1f} tok/s (no spread or confidence interval; use --runs 5)"
        )
    if s.accept_length is not None:
        lines.append(
            f"  accept length {s.accept_length:.2f} tokens per verify cycle "
            f"({s.accept_length_source})"
        )
    if s.short:
        lines.append(f"  {s.short} run(s) came back short (see SHORT above)")
    if s.failed:
        lines.append(f"  {s.failed} run(s) failed")
    if s.steady:
        lines.append(f"  steady state: OK (spread {t.cv * 100:.1f}% of the mean)")
    return lines


async def run(
    server: probe.Server,
    client: cl.Client,
    prompt_set: PromptSet,
    *,
    runs: int,
    warmup: int,
    load: Load,
    respect_eos: bool,
    vary_prompts: bool,
    console: Console,
) -> tuple[list[RunFields], list[RunFields], bool, float | None]:
    """Returns (warm-up fields, run fields, interrupted, the counters' accept length)."""
    prompts = (
        prompt_set.take(runs + warmup, load.seed)
        if vary_prompts
        else prompt_set.take(1, load.seed) * (runs + warmup)
    )
    warm, done = [], []
    before = None
    interrupted = False
    try:
        for i in range(warmup + runs):
            is_warm = i < warmup
            if i == warmup:
                before = await asyncio.to_thread(server.counters)
            p = prompts[i]
            r = await client.chat(
                p.as_messages(),
                load.max_tokens,
                index=i,
                prompt_id=p.id,
                temperature=load.temperature,
                ignore_eos=load.ignore_eos,
                seed=load.request_seed(i),
            )
            f = run_fields((i if is_warm else i - warmup) + 1, r, load, respect_eos)
            (warm if is_warm else done).append(f)
            if is_warm:
                console.info(run_line(f, warmup, load.max_tokens, warmup=True))
            else:
                console.out(run_line(f, runs, load.max_tokens))
            if (
                not r.ok
                and r.error in (cl.E_REFUSED, cl.E_LOST, cl.E_INCOMPLETE)
                and not await asyncio.to_thread(server.alive)
            ):
                console.warn(
                    f"the server at {server.base_url} stopped answering: "
                    f"stopping after {len(done)} run(s)"
                )
                break
    except asyncio.CancelledError:
        interrupted = True
    accept_length = None  # decode-only, from SGLang's counters
    if not interrupted and before is not None and done:
        tokens = sum(f.tokens or 0 for f in done)
        after = await asyncio.to_thread(server.counters_after, before, tokens)
        # drafts SGLang accepted past a run's end count in its figure (sweep.py)
        past = sum(f.decoded_tokens - (f.tokens - 1) for f in done if f.decoded_tokens)
        accept_length = probe.accept_from_counters(before, after).decode_only(past, len(done))
    return warm, done, interrupted, accept_length


def raise_if_interrupted(interrupted: bool) -> None:
    if interrupted:
        raise Interrupted("during the runs")
