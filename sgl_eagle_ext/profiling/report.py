"""python -m sgl_eagle_ext.report: where the speculation cycle's time goes, and
what accept length would break even.

    python -m sgl_eagle_ext.report server.log [more.log ...] --baseline-tps 82.2
    python -m sgl_eagle_ext.report spec.log --baseline-log baseline.log --target-tps 120
    python -m sgl_eagle_ext.report spec.log --json

Reads EAGLE3_PROFILE lines (format: profiling/record.py), the same records as JSON
lines (EAGLE3_PROFILE_FILE), and SGLang's own "Decode batch" lines of every
supported release. Per batch size it prints cycle time (wall time, start to next
start: the `host` row is the scheduler's work between cycles), per-phase time and
share, accept length, tokens/s, and the break-even accept length

    tau* = cycle time / baseline time per token (at the same batch size: a one-stream
           baseline, --baseline-tps, gives it at batch size 1 only)

i.e. the tokens a cycle must yield to match the baseline; `--target-tps T`
adds the accept length a stream needs to reach T tokens/s. Truncated or
garbled lines are counted and skipped.

The figures come from the one aggregator (profiling/aggregate.py: the warm-up rule,
the merge, SGLang's Decode batch lines, accept length), as tune's do. Warm-up windows
are left out and counted ("3 warm-up cycles excluded"). Where the profile's tokens/s
and SGLang's own "Decode batch" gen throughput (its lines' tokens over their time) differ by
more than AGREE_PCT, the report says so.

Adaptive speculation: each batch size is also split by the draft steps its
cycles ran (`steps=` of the windows; 0 = no drafting), and SGLang's own
"Switch adaptive runtime state" lines are listed with when and why the server
switched (profiling/adaptive_log.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from sgl_eagle_ext.common import figures as fig  # report.figures: this module's rows
from sgl_eagle_ext.common.cli_args import number
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.profiling import adaptive_log, phases
from sgl_eagle_ext.profiling.aggregate import (  # noqa: F401 (DECODE_BATCH: re-exported)
    DECODE_BATCH,
    WARMUP_FACTOR,
    Cell,
    Profile,
    baseline_ms,
    warmup_windows,
)
from sgl_eagle_ext.profiling.names import ENV, ENV_FILE, TAG
from sgl_eagle_ext.profiling.record import (  # noqa: F401 (record_from_line: re-exported)
    ROWS,
    read_lines,
    record_from_line,
)

PROG = "sgl_eagle_ext.report"
AGREE_PCT = 5.0
# A disagreement is named sampling when the kept windows' mean cycles spread (max - min,
# % of the median) at least this many times wider: on a contended host each figure's
# few lines/windows cover different cycles. Measured on the CPU harness at load ~10:
# -9% with windows ranging 1498-2800 ms (64%); the issue's +41% was at load 8-9.
SAMPLING_FACTOR = 2.0


def parse(paths: list[Path]) -> tuple[Profile, adaptive_log.AdaptiveLog]:
    """The logs' windows and Decode batch lines (profiling/aggregate.py), and SGLang's
    adaptive switches."""
    adaptive = adaptive_log.AdaptiveLog([], [])
    for path in paths:  # a streamed pass of its own: memory stays flat however large
        adaptive.absorb(adaptive_log.read(read_lines(path), keep=1000))
    return Profile.read_all(paths), adaptive


# -- figures -------------------------------------------------------------------------
def baseline_ms_per_token(
    baseline: Profile | None, bs: int, one_stream_ms: float | None = None
) -> float | None:
    """Per-stream baseline time per token at batch size `bs`: from the baseline log's
    Decode batch lines there (aggregate.baseline_ms), else the one-stream figure given,
    at batch size 1 only (as tune's model): a stream of a batch is slower than one alone,
    so at a larger batch it would overstate the break-even accept length."""
    if baseline is not None:
        return baseline_ms([baseline]).get(bs)
    return one_stream_ms if bs == 1 else None


ONE_STREAM_ONLY = (
    "no break-even at this batch size: the baseline given is one stream's "
    "(--baseline-tps/--baseline-ms-per-token); --baseline-log BASELINE.log gives it at "
    "every batch size the baseline server ran"
)


def finite_or_null(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite_or_null(v) for v in obj]
    return obj


def figures(
    prof: Profile,
    baseline: Profile | None = None,
    one_stream_ms: float | None = None,
    target_tps: float | None = None,
) -> list[dict]:
    """One row per batch size (split by draft steps where the windows said them)."""
    rows = []
    cells = prof.cells()
    for bs in prof.batch_sizes():
        keys = sorted(k for k in prof.by_key if k[0] == bs)
        base = baseline_ms_per_token(baseline, bs, one_stream_ms)
        row = cell_figures(prof.cell(bs), base, target_tps)
        if base is None and one_stream_ms and baseline is None:
            row["baseline_note"] = ONE_STREAM_ONLY
        warm = [prof.warmup(k) for k in keys]
        row["warmup_windows_excluded"] = sum(w for w, _ in warm)
        row["warmup_cycles_excluded"] = sum(c for _, c in warm)
        by_steps = [(k[1], cells[k]) for k in keys if cells[k].steps_known]
        if by_steps:
            row["by_steps"] = [
                {"steps": s, "no_draft": s == 0, **cell_figures(c, base, target_tps)}
                for s, c in by_steps
            ]
        spread = window_spread(prof, keys)
        if spread:
            row["window_cycle_ms"] = spread
            row["cycle_spread_pct"] = 100 * (spread["max"] - spread["min"]) / spread["median"]
        lines = prof.sglang.get(bs)
        if lines is not None:
            row["sglang_lines_kept"] = len(lines.kept())
            if lines.accept_len is not None:
                row["sglang_accept_len"] = lines.accept_len
            if lines.gen_tps is not None:
                row["sglang_gen_tps"] = lines.gen_tps
                if row.get("tok_s"):
                    row["profile_vs_sglang_pct"] = fig.pct_apart(row["tok_s"], lines.gen_tps)
        rows.append(row)
    return rows


def window_spread(prof: Profile, keys) -> dict | None:
    """min / median / max of the kept windows' mean cycle (two windows at least)."""
    means = []
    for k in keys:
        windows = prof.by_key[k]
        means += [w.phases["cycle"].mean for w in windows[warmup_windows(windows) :]]
    if len(means) < 2:
        return None
    return {"min": min(means), "median": statistics.median(means), "max": max(means)}


def cell_figures(cell: Cell, base: float | None, target_tps: float | None) -> dict:
    """A cell's figures: per-row times and shares, accept length, tok/s, tau*."""
    row: dict = {
        "bs": cell.bs,
        "cycles": cell.cycles,
        "windows": cell.windows,
        "mixed_windows": cell.mixed,
    }
    if not cell.cycles:
        return row
    cycle, acc = cell.mean("cycle"), cell.accept_len
    row["phases"] = {
        p: {
            "mean_ms": cell.mean(p),
            "p50_ms": cell.mean(p, "p50"),
            "p90_ms": cell.mean(p, "p90"),
            "share_pct": 100.0 if p == "cycle" else cell.share(p),
        }
        for p in ROWS
    }
    row["accept_len"] = acc
    row["tok_s"] = cell.tok_s
    row["clock"] = sorted(cell.clocks)
    meaning = {r: phases.row_meaning(r, cell.clocks) for r in ("other", "host")}
    row["row_meaning"] = {r: m for r, m in meaning.items() if m}
    if base:
        row["baseline_ms_per_token"] = base
        row["break_even_accept_len"] = fig.break_even(cycle, base)
        if acc and cycle:
            row["speedup"] = fig.gain(acc, cycle, base)
    if target_tps:  # the accept length that reaches target_tps per stream
        row["target_tps"] = target_tps
        row["accept_len_for_target"] = fig.break_even(cycle, fig.ms_per_token(target_tps))
    return row


PHASE_TABLE = Table(
    L("phase", 14),
    Col("mean ms", 10, ".2f", sep=""),
    Col("p50 ms", 10, ".2f", sep=""),
    Col("p90 ms", 10, ".2f", sep=""),
    Col("share", 9, ".1f", "%", sep=""),
    indent="  ",
)
BY_STEPS_TABLE = Table(
    L("by draft steps", 16),
    Col("cycles", 8, "d", sep=""),
    Col("cycle ms", 10, ".2f", sep=""),
    Col("draft ms", 10, ".2f", sep=""),
    Col("accept", 8, ".2f", sep=""),
    Col("tok/s", 9, ".1f", sep=""),
    Col("tau*", 7, ".2f", sep=""),
    Col("vs base", 9, ".2f", "x", sep=""),
    indent="  ",
)


def print_table(rows: list[dict], prof: Profile) -> None:
    print(
        f"{prof.windows} profile windows, {prof.decode_lines} SGLang Decode batch "
        f"lines, {prof.skipped} lines skipped (truncated or garbled)"
    )
    only_sglang = [r for r in rows if not r["cycles"] and not r["warmup_cycles_excluded"]]
    for row in rows:
        if row in only_sglang:
            continue
        warm = row["warmup_cycles_excluded"]
        print(
            f"\n== batch size {row['bs']}: {row['cycles']} cycles in {row['windows']} windows"
            + (f" ({row['mixed_windows']} with mixed batch sizes)" if row["mixed_windows"] else "")
            + (
                f"; {warm} warm-up cycles excluded ({row['warmup_windows_excluded']} leading "
                f"window(s) over {WARMUP_FACTOR:g}x the median cycle)"
                if warm
                else ""
            )
        )
        if "phases" in row:
            rows = [
                (p, s["mean_ms"], s["p50_ms"], s["p90_ms"], s["share_pct"])
                for p, s in row["phases"].items()
            ]
            print("\n".join(PHASE_TABLE.render(rows)))
            for name, meaning in row.get("row_meaning", {}).items():
                print(f"  {name}: {meaning}")
            if row.get("accept_len") is not None:
                print(
                    f"  accept length {row['accept_len']:.2f} tokens/cycle -> "
                    f"{row['tok_s']:.1f} tok/s at this batch size"
                )
        if "break_even_accept_len" in row:
            verdict = ""
            if "speedup" in row:
                verdict = (
                    f"; measured {row['accept_len']:.2f} -> "
                    f"{row['speedup']:.2f}x the baseline "
                    f"({'pays' if row['speedup'] > 1 else 'does not pay'})"
                )
            print(
                f"  break-even accept length {row['break_even_accept_len']:.2f} "
                f"(baseline {row['baseline_ms_per_token']:.2f} ms/token per stream){verdict}"
            )
        elif "baseline_note" in row and row["cycles"]:
            print(f"  {row['baseline_note']}")
        if "accept_len_for_target" in row:
            print(
                f"  accept length for {row['target_tps']:.1f} tok/s per stream: "
                f"{row['accept_len_for_target']:.2f}"
            )
        if row.get("by_steps"):
            print_by_steps(row["by_steps"])
        if "sglang_accept_len" in row or "sglang_gen_tps" in row:
            acc = row.get("sglang_accept_len")
            print(
                "  SGLang's own: "
                + ", ".join(
                    s
                    for s in (
                        f"accept len {acc:.2f}" if acc is not None else "",
                        f"gen throughput {row['sglang_gen_tps']:.1f} tok/s"
                        if "sglang_gen_tps" in row
                        else "",
                    )
                    if s
                )
            )
            print_agreement(row)

    if only_sglang:  # batch sizes SGLang logged but no profile window covers
        print("\nSGLang's own, batch sizes without profile windows:")
        for row in only_sglang:
            acc = row.get("sglang_accept_len")
            tps = row.get("sglang_gen_tps")
            parts = [f"accept len {acc:.2f}" if acc is not None else ""]
            parts.append(f"gen throughput {tps:.1f} tok/s" if tps is not None else "")
            print(f"  batch size {row['bs']}: " + ", ".join(p for p in parts if p))


def print_agreement(row: dict) -> None:
    """The profile's speed against SGLang's own line for the same batch size."""
    pct = row.get("profile_vs_sglang_pct")
    if pct is None:
        return
    if abs(pct) > AGREE_PCT:
        head = (
            f"  note: the profile's {row['tok_s']:.1f} tok/s and SGLang's own gen throughput "
            f"{row['sglang_gen_tps']:.1f} tok/s differ by {pct:+.0f}% (over {AGREE_PCT:g}%): "
        )
        spread, w = row.get("cycle_spread_pct"), row.get("window_cycle_ms")
        if spread is not None and spread >= SAMPLING_FACTOR * abs(pct):
            print(
                head + f"the windows' mean cycle ranged {w['min']:.0f}-{w['max']:.0f} ms "
                f"({spread:.0f}% of the median: a contended host), and SGLang's "
                f"{row.get('sglang_lines_kept', 0)} kept lines and the profile's "
                f"{row['windows']} windows cover different cycles: a difference this size "
                f"is sampling, not time left uncounted (a longer run narrows it)"
            )
        else:
            print(
                head + "time outside the profiled cycles (prefill, idle gaps between "
                "requests) or warm-up the rule did not catch"
            )
    else:
        print(f"  agrees with SGLang's own gen throughput within {AGREE_PCT:g}% ({pct:+.0f}%)")


def print_by_steps(subrows: list[dict]) -> None:
    rows = []
    for r in subrows:
        ph = r.get("phases", {})
        rows.append(
            (
                f"{r['steps']} (no draft)" if r["no_draft"] else str(r["steps"]),
                r["cycles"],
                ph.get("cycle", {}).get("mean_ms"),
                ph.get("draft", {}).get("mean_ms"),
                r.get("accept_len"),
                r.get("tok_s"),
                r.get("break_even_accept_len"),
                r.get("speedup"),
            )
        )
    print("\n".join(BY_STEPS_TABLE.render(rows)))


def print_adaptive(log: adaptive_log.AdaptiveLog, limit: int = 20) -> None:
    for why in log.disabled:
        print(f"\nSGLang turned adaptive speculation OFF: {why} (static speculation served)")
    if not log.switches:
        return
    reasons = log.by_reason
    print(
        f"\n== adaptive switches (SGLang's 'Switch adaptive runtime state'): "
        f"{log.total}, " + ", ".join(f"{n} by {r}" for r, n in sorted(reasons.items()))
    )
    shown = log.switches if len(log.switches) <= limit else log.switches[: limit // 2]
    for s in shown:
        print(f"  {s.describe()}")
    if len(log.switches) > limit:
        print(f"  ... {log.total - limit} more ...")
        for s in log.switches[-limit // 2 :]:
            print(f"  {s.describe()}")


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Per-phase table and break-even accept length from server logs.",
    )
    p.add_argument("logs", nargs="*", type=Path, help=f"server logs or {ENV_FILE} files")
    p.add_argument(
        "--where",
        metavar="PHASE",
        help="print which SGLang method opens and closes PHASE (draft, verify_fwd, accept, "
        "draft_extend, cycle) per supported release, and exit",
    )
    p.add_argument("--sglang-version", help="--where: only this release")
    base = p.add_mutually_exclusive_group()
    base.add_argument(
        "--baseline-tps", type=number(0, strict=True), help="baseline tokens/s of one stream"
    )
    base.add_argument(
        "--baseline-ms-per-token",
        type=number(0, strict=True),
        help="baseline ms per token of one stream",
    )
    base.add_argument(
        "--baseline-log",
        type=Path,
        action="append",
        help="log of a baseline server (its Decode batch lines, per batch size)",
    )
    p.add_argument("--target-tps", type=number(0, strict=True), help="tokens/s per stream to reach")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    if args.where is not None:
        from sgl_eagle_ext.profiling import where

        print("\n".join(where.answer(args.where, args.sglang_version)))
        return 0
    if not args.logs:
        p.error("the following arguments are required: logs (or --where PHASE)")
    for value, name in (
        (args.baseline_tps, "--baseline-tps"),
        (args.baseline_ms_per_token, "--baseline-ms-per-token"),
        (args.target_tps, "--target-tps"),
    ):
        if value is not None and value <= 0:
            raise UserError(f"{name} {value}: must be positive.")
    prof, adaptive = parse(args.logs)
    baseline = Profile.read_all(args.baseline_log) if args.baseline_log else None
    if not (prof.windows or prof.decode_lines or adaptive.switches):
        raise UserError(
            f"no {TAG} or Decode batch lines in {', '.join(map(str, args.logs))}"
            f" ({prof.skipped} garbled).",
            fix=f"start the server with {ENV}=1 and send it some load",
            code=1,
        )
    one_stream_ms = args.baseline_ms_per_token or fig.ms_per_token(args.baseline_tps)
    rows = figures(prof, baseline, one_stream_ms, args.target_tps)
    if args.json:
        json.dump(
            {
                "rows": finite_or_null(rows),
                "profile_windows": prof.windows,
                "decode_lines": prof.decode_lines,
                "skipped_lines": prof.skipped,
                "adaptive": adaptive.to_json(),
            },
            sys.stdout,
            indent=2,
            allow_nan=False,  # NaN is not JSON: non-finite figures are written as null
        )
        print()
    else:
        print_table(rows, prof)
        print_adaptive(adaptive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
