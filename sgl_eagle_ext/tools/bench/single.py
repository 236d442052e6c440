"""Single stream: a sweep's one level at concurrency 1, its requests read as runs.

Every run asks for exactly --max-tokens tokens with EOS ignored (unless
--respect-eos), so runs are comparable. A run that comes back shorter is
flagged and left out of the averages (level_metrics.one_stream), never silently
averaged in. Warm-up runs use the same length. The runs use the same prompt
(one prompt's acceptance does not vary) unless --vary-prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import records
from sgl_eagle_ext.tools.bench.level_metrics import is_short
from sgl_eagle_ext.tools.bench.loads import Load


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


def run_fields(i: int, r: cl.RequestResult, load: Load) -> RunFields:
    ok = r.ok
    tokens, verify = (r.completion_tokens, r.spec_verify_ct) if ok else (None, None)
    return RunFields(
        run=i,
        prompt_id=r.prompt_id,
        ok=ok,
        error=r.error or None,
        detail=r.detail or None,
        tokens=tokens,
        seconds=r.e2e,
        tok_s=r.tok_s,
        decode_tok_s=r.decode_tok_s,
        prompt_tokens=r.prompt_tokens,
        ttft_ms=r.ttft * 1e3 if r.ttft is not None else None,
        accept_length=accept.from_counts(r.decoded_tokens if ok else None, verify),
        accept_length_with_prefill=accept.from_counts(tokens, verify),
        verify_calls=verify,
        decoded_tokens=r.decoded_tokens if ok and verify else None,
        finish_reason=r.finish_reason,
        short=bool(ok and (tokens or 0) < load.max_tokens),
        counted=ok and not is_short(r, load),
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


def summary_lines(v: records.Level, runs: int) -> list[str]:
    """The one-stream level as runs: tok/s over the counted ones, spread, 95% CI."""
    n, mean = v.at("tok_s", "n") or 0, v.at("tok_s", "mean")
    if not n:
        return [f"no run counted out of {runs}: nothing to average"]
    lines = [f"tok/s over {n} counted run(s) of {runs}: overall {v.overall_tok_s:.1f}"]
    if n >= 2:
        lo, hi = v.at("tok_s", "ci95_low"), v.at("tok_s", "ci95_high")
        lines.append(
            f"  mean {mean:.1f}  median {v.at('tok_s', 'median'):.1f}  min "
            f"{v.at('tok_s', 'min'):.1f}  max {v.at('tok_s', 'max'):.1f}  stdev "
            f"{v.at('tok_s', 'stdev'):.2f}  95% CI {lo:.1f} .. {hi:.1f} "
            f"(+/-{(hi - lo) / 2 / mean * 100:.1f}%)"
        )
    else:
        lines.append(
            f"  one run: {mean:.1f} tok/s (no spread or confidence interval; use --runs 5)"
        )
    if v.accept_length is not None:
        lines.append(
            f"  accept length {v.accept_length:.2f} tokens per verify cycle "
            f"({v.accept_length_source})"
        )
    if v.short:
        lines.append(f"  {v.short} run(s) came back short (see SHORT above)")
    if v.error_count:
        lines.append(f"  {v.error_count} run(s) failed")
    if v.steady:
        lines.append(f"  steady state: OK (spread {v.at('tok_s', 'cv') * 100:.1f}% of the mean)")
    return lines
