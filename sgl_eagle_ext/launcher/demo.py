"""The CPU demo's client side: the product's three uses on the tiny pair, in a minute.

1. answers: greedy continuations of the demo prompts, each with SGLang's accept
   length beside the one the pair was built for (the manifest's replay);
2. benchmark: a few fixed-length single-stream runs, tokens per second;
3. profile: the server runs with EAGLE3_PROFILE on (short windows), and the
   report tool's table is printed from the server's own log (cycles in wall time, the
   `host` row the scheduler's work between them), set beside SGLang's own Decode
   batch throughput at the same batch size.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sgl_eagle_ext.common import figures, http
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.profiling import names

MAX_NEW_TOKENS = 16  # the manifest's expected accept lengths are for 16 new tokens
BENCH_PROMPT = "Speculative decoding works by"
BENCH_TOKENS = 32
BENCH_RUNS = 2
# Profile windows every few decode cycles: a short demo still logs several.
PROFILE_ENV = {names.ENV: "1", names.ENV_CYCLES: "4"}
SETTING_FLAGS = (
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
)


# SGLang's Decode batch line every few decode iterations too (default 40: a demo run
# would print none), so the report sets the profile beside SGLang's own throughput.
DECODE_LOG_INTERVAL = "4"


def server_extra(extra: list[str]) -> list[str]:
    """The SGLang flags the demo server starts with, the user's own kept."""
    if any(a.split("=")[0] == "--decode-log-interval" for a in extra):
        return list(extra)
    return [*extra, "--decode-log-interval", DECODE_LOG_INTERVAL]


def server_env(environ=os.environ) -> dict[str, str]:
    """The profiling switches the demo server starts with (the user's own win)."""
    return {k: environ.get(k, v) for k, v in PROFILE_ENV.items()}


def expected_accept(manifest_path: Path, draft: str, server_args: list[str]) -> list | None:
    """Per-prompt accept lengths the pair was built for, under these settings."""
    argv = ServerArgv.of(server_args)
    setting = ",".join(argv.value(f) or "" for f in SETTING_FLAGS)
    try:
        manifest = json.loads(manifest_path.read_text())
        return manifest["expected_accept_length"][f"draft-{draft}"][setting]
    except (OSError, ValueError, KeyError):
        return None


def server_accept_length(base_url: str, api_key: str | None) -> float | None:
    """SGLang's own running average (/server_info internal_states)."""
    reply = http.request(f"{base_url}/server_info", api_key=api_key, timeout=30)
    if reply.status != 200 or not isinstance(reply.body, dict):
        return None
    values = [s.get("avg_spec_accept_length") for s in reply.body.get("internal_states", [])]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _shown(acc: float | None) -> str:
    return "n/a (no speculation)" if acc is None else f"{acc:.2f}"


def answers(base_url: str, api_key: str | None, draft: str, expected: list | None) -> None:
    from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS

    outs = http.generate(base_url, list(DEMO_PROMPTS), MAX_NEW_TOKENS, api_key=api_key)
    print(
        f"\n=== 1/3 answers: the tiny target's greedy text ({MAX_NEW_TOKENS} new tokens), "
        f"drafted by draft-{draft} ==="
    )
    for i, (prompt, out) in enumerate(zip(DEMO_PROMPTS, outs)):
        acc = http.accept_length(out.get("meta_info", {}))
        built = f" (built for {expected[i]:.2f})" if expected and acc is not None else ""
        text = out["text"].rstrip("\n").replace("\n", "\n     ")
        print(f"> {prompt}\n  =>{text}\n  accept length {_shown(acc)}{built}")
    avg = server_accept_length(base_url, api_key)
    if avg is not None:
        print(f"SGLang's average accept length: {avg:.2f} tokens per verify cycle")


def benchmark(base_url: str, api_key: str | None) -> float:
    print(f"\n=== 2/3 benchmark: one stream, {BENCH_TOKENS} tokens per run, {BENCH_RUNS} runs ===")
    speeds = []
    for i in range(1, BENCH_RUNS + 1):
        t0 = time.perf_counter()
        out = http.generate(base_url, [BENCH_PROMPT], BENCH_TOKENS, api_key=api_key)[0]
        seconds = time.perf_counter() - t0
        meta = out.get("meta_info", {})
        tokens = meta.get("completion_tokens", BENCH_TOKENS)
        speeds.append(tokens / seconds)
        print(
            f"  run {i}: {tokens} tokens in {seconds:.2f} s = {speeds[-1]:.1f} tok/s, "
            f"accept length {_shown(http.accept_length(meta))}"
        )
    print(
        f"  single stream: {sum(speeds) / len(speeds):.1f} tok/s on this CPU "
        f"(full tool: python -m sgl_eagle_ext.bench single --url {base_url})"
    )
    return sum(speeds) / len(speeds)


def profile(log_path: Path, bench_tps: float | None = None) -> None:
    """The report tool's table for this run, read from the server's own log."""
    from sgl_eagle_ext.profiling import report
    from sgl_eagle_ext.profiling.aggregate import Profile

    print(f"\n=== 3/3 profile: where each speculation cycle's time went ({log_path}) ===")
    prof = Profile.read(log_path)  # the one aggregator, as the report reads it
    rows = [r for r in report.figures(prof) if r.get("cycles")]
    if not rows:
        print("  no EAGLE3_PROFILE window in the log (was EAGLE3_PROFILE switched off?)")
        return
    # The single-stream runs above: batch size 1 if profiled, else the busiest group.
    row = next((r for r in rows if r["bs"] == 1), max(rows, key=lambda r: r["cycles"]))
    report.print_table([row], prof)
    if bench_tps and row.get("tok_s") and row["bs"] == 1:
        pct = figures.pct_apart(row["tok_s"], bench_tps)
        print(
            f"  profile {row['tok_s']:.1f} tok/s vs the benchmark's {bench_tps:.1f} tok/s: "
            + (
                f"within {report.AGREE_PCT:g}% ({pct:+.0f}%)"
                if abs(pct) <= report.AGREE_PCT
                else f"{pct:+.0f}%, over {report.AGREE_PCT:g}% (the benchmark also times "
                f"prefill and the HTTP round trip)"
            )
        )
    print(
        f"  all batch sizes, break-even accept length: python -m sgl_eagle_ext.report "
        f"{log_path} --baseline-tps <baseline tok/s>"
    )


def run(
    base_url: str,
    api_key: str | None,
    log_path: Path,
    draft: str = "mostly",
    expected: list | None = None,
) -> None:
    answers(base_url, api_key, draft, expected)
    tps = benchmark(base_url, api_key)
    profile(log_path, tps)
