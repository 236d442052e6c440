"""One level's figures from its requests (pure; unit-tested): counts, token
throughputs, latency percentiles, the per-request accept length, peaks, goodput at
the SLO, and a one-stream level's requests read as runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict

import numpy as np

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import stats
from sgl_eagle_ext.tools.bench.loads import SLO, Load

ERROR_EXAMPLES = 3
ITL_EXACT = "per-chunk token counts"
ITL_ESTIMATE = "estimate: each request's tokens after its first chunk spread evenly over its chunks"


def in_ms(values) -> dict:
    return stats.percentiles([v * 1e3 for v in values])


def is_short(r: cl.RequestResult, load: Load) -> bool:
    """Fewer tokens than asked with EOS ignored: flagged, never averaged in as a run."""
    return (
        r.ok and load.ignore_eos and (r.completion_tokens or 0) < (r.max_tokens or load.max_tokens)
    )


def level_metrics(
    results: list[cl.RequestResult], duration: float, load: Load, slo: SLO | None = None
) -> dict:
    """Record fields of one level from its requests (pure; unit-tested)."""
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if not r.ok)
    examples = [f"{r.error}: {r.detail}" for r in results if not r.ok][:ERROR_EXAMPLES]
    short = [r for r in ok if is_short(r, load)]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    chunks = sum(len(r.chunk_times) for r in ok)
    itls = [g for r in ok for g in r.itls]
    gaps = [g for r in ok for g in r.chunk_gaps]
    exact = [r.itl_exact for r in ok if r.chunk_gaps]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    counted = [r.input_tokens for r in ok if r.input_tokens is not None]
    input_tokens = sum(counted) if ok and len(counted) == len(ok) else None
    spec = [r for r in ok if r.spec_verify_ct]
    verify = sum(r.spec_verify_ct for r in spec)
    spec_tokens = sum(r.completion_tokens or 0 for r in spec)
    decoded = sum(r.decoded_tokens or 0 for r in spec)

    def rate(x):
        return x / duration if duration > 0 and x is not None else None

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
        # as sglang.bench_serving: input (the prompts as sent, no chat template: its
        # input lengths), output and total (input + output) token throughput
        "input_tokens": input_tokens,
        "input_tok_s": rate(input_tokens),
        "output_tok_s": rate(tokens),
        "total_tok_s": rate(None if input_tokens is None else input_tokens + tokens),
        # the server's own prompt count (usage.prompt_tokens): the chat template included
        "prompt_tokens": prompt_tokens,
        "prompt_tok_s": rate(prompt_tokens) if ok else None,
        "request_s": rate(len(ok)),
        # sglang.bench_serving's "Concurrency": request time in flight / the level's time
        # (the `concurrency` field stays the cap of a closed-loop level)
        "concurrency_mean": rate(sum(r.e2e for r in ok if r.e2e is not None)),
        "ttft_ms": in_ms(r.ttft for r in ok if r.ttft is not None),
        "tpot_ms": in_ms(r.tpot for r in ok if r.tpot is not None),
        # per token, as sglang.bench_serving counts it (client.RequestResult.itls)
        "itl_ms": {**in_ms(itls), **stats.spread([g * 1e3 for g in itls])},
        "itl_source": None if not exact else ITL_EXACT if all(exact) else ITL_ESTIMATE,
        # the gaps between streamed chunks themselves (a chunk may carry several tokens)
        "chunk_gap_ms": in_ms(gaps),
        "e2e_ms": in_ms(r.e2e for r in ok if r.e2e is not None),
        "tokens_per_chunk": tokens / chunks if chunks else None,
        # decode-only, as SGLang's /server_info: tokens gained in verify cycles per cycle
        # (RequestResult.decoded_tokens)
        "accept_length_requests": accept.from_counts(decoded, verify),
        "accept_length_requests_with_prefill": accept.from_counts(spec_tokens, verify),
        "verify_calls_requests": verify or None,
        # drafts SGLang accepted past the tokens kept (the last cycle at max_tokens): in
        # its server-wide figure, not in the completion counts (0 unless reported)
        "accepted_past_end": decoded - (spec_tokens - len(spec)) if spec else 0,
    }
    out.update(peaks(ok))
    out.update(goodput_fields(results, duration, slo))
    return out


def peaks(ok: list[cl.RequestResult]) -> dict:
    """sglang.bench_serving's peaks over one-second buckets from the first send: the
    most output tokens that arrived in one (each chunk's own tokens at its arrival, as
    bench_serving on /generate; on the OpenAI endpoints it counts one per chunk) and
    the most requests in flight during some part of one."""
    if not ok:
        return {"peak_output_tok_s": None, "peak_concurrency": None}
    t0 = min(r.start for r in ok)
    ends = [r.start + (r.e2e or 0.0) for r in ok]
    size = int(math.ceil(max(ends) - t0)) + 1
    toks, inflight = np.zeros(size), np.zeros(size)
    for r, end in zip(ok, ends):
        times = [r.start + t - t0 for t in r.chunk_times]
        first = r.chunk_tokens[0] if r.itl_exact else 1
        counts = [first, *r.tokens_per_gap()] if times else []
        if len(counts) != len(times):
            counts = [1] * len(times)
        np.add.at(toks, np.minimum(np.array(times, dtype=int), size - 1), counts)
        inflight[int(r.start - t0) : int(end - t0) + 1] += 1
    return {"peak_output_tok_s": float(toks.max()), "peak_concurrency": int(inflight.max())}


def goodput_fields(results: list[cl.RequestResult], duration: float, slo: SLO | None) -> dict:
    """Output tok/s and req/s of the requests that met the SLO ({} without an SLO)."""
    if slo is None or not slo.set:
        return {}
    good = [r for r in results if slo.met(r)]
    sent = len(results) or 1
    return {
        "slo": slo.record(),
        # as sglang.bench_serving: requests meeting every goal (each goal) / requests sent
        "slo_attainment": len(good) / sent,
        "slo_attainment_by_metric": {
            key: sum(1 for r in results if SLO(**{key: goal}).met(r)) / sent
            for key, goal in slo.goals().items()
        },
        "goodput_tok_s": (
            sum(r.completion_tokens or 0 for r in good) / duration if duration > 0 else None
        ),
        "goodput_req_s": len(good) / duration if duration > 0 else None,
    }


def one_stream(results: list[cl.RequestResult], load: Load, max_cv: float) -> dict:
    """A one-stream level's requests as repeated runs (bench single's statistics): the
    spread and 95% CI of their tok/s and a steady-state check; a short request (EOS
    ignored) is left out of them."""
    runs = [r for r in results if r.ok and not is_short(r, load)]
    tok = stats.summary(r.tok_s for r in runs)
    secs = sum(r.e2e for r in runs)
    warnings = stats.steady_state_warnings([r.tok_s for r in runs], max_cv)
    return {
        "tok_s": asdict(tok),
        "decode_tok_s": asdict(stats.summary(r.decode_tok_s for r in runs if r.decode_tok_s)),
        "overall_tok_s": sum(r.completion_tokens for r in runs) / secs if secs else None,
        "steady": not warnings if tok.n >= 2 else None,
        "steady_warnings": warnings,
    }


def choose_accept_length(fields: dict, metrics_with_prefill: float | None) -> dict:
    """The level's accept length: decode-only under the shared name (SGLang's
    /server_info convention, what sglang.bench_serving prints), the prefill-inclusive
    figure of the same source beside it; SGLang's counters first, else the streamed
    per-request counts."""
    if fields.get("accept_length_metrics") is not None:
        return {
            "accept_length": fields["accept_length_metrics"],
            "accept_length_with_prefill": metrics_with_prefill,
            "accept_length_source": "metrics delta",
        }
    if fields.get("accept_length_requests") is not None:
        return {
            "accept_length": fields["accept_length_requests"],
            "accept_length_with_prefill": fields.get("accept_length_requests_with_prefill"),
            "accept_length_source": "per-request sum",
        }
    return {"accept_length": None, "accept_length_with_prefill": None, "accept_length_source": None}


METRIC_SOURCES = {  # vLLM's --percentile-metrics names -> a request's values (seconds)
    "ttft": lambda r: [r.ttft] if r.ttft is not None else [],
    "tpot": lambda r: [r.tpot] if r.tpot is not None else [],
    "itl": lambda r: r.itls,
    "e2el": lambda r: [r.e2e] if r.e2e is not None else [],
}


def metric_percentiles(results: list[cl.RequestResult], wanted) -> dict:
    """vLLM's --percentile-metrics x --metric-percentiles, in ms: {"ttft": {"p25": ...}}."""
    metrics, ps = wanted
    ok = [r for r in results if r.ok]
    out = {}
    for m in metrics:
        values = [v * 1e3 for r in ok for v in METRIC_SOURCES[m](r)]
        out[m] = {f"p{p:g}": float(np.percentile(values, p)) if values else None for p in ps}
    return out
