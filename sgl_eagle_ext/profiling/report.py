"""python -m sgl_eagle_ext.report: where the speculation cycle's time goes, and
what accept length would break even.

    python -m sgl_eagle_ext.report server.log [more.log ...] --baseline-tps 82.2
    python -m sgl_eagle_ext.report spec.log --baseline-log baseline.log --target-tps 120
    python -m sgl_eagle_ext.report spec.log --json

Reads EAGLE3_PROFILE lines (format: profiling/record.py), the same records as JSON
lines (EAGLE3_PROFILE_FILE), and SGLang's own "Decode batch" lines of every
supported release. Per batch size it prints cycle time, per-phase time and
share, accept length, tokens/s, and the break-even accept length

    tau* = cycle time / baseline time per token (at the same batch size)

i.e. the tokens a cycle must yield to match the baseline; `--target-tps T`
adds the accept length a stream needs to reach T tokens/s. Truncated or
garbled lines are counted and skipped.

Warm-up rule: per batch size, the leading windows whose mean cycle exceeds
WARMUP_FACTOR x the median window of the rest are warm-up (JIT compilation,
autotuning, first allocations): they are left out of the figures and counted
("3 warm-up cycles excluded"). Where the profile's tokens/s and SGLang's own
"Decode batch" gen throughput still differ by more than AGREE_PCT, the report
says so.

Adaptive speculation: each batch size is also split by the draft steps its
cycles ran (`steps=` of the windows; 0 = no drafting), and SGLang's own
"Switch adaptive runtime state" lines are listed with when and why the server
switched (profiling/adaptive_log.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common.cli_args import number
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.profiling import adaptive_log
from sgl_eagle_ext.profiling.names import ENV, ENV_FILE, TAG
from sgl_eagle_ext.profiling.record import (  # noqa: F401 (record_from_line: re-exported)
    BAD_LINE,
    ROWS,
    checked,
    find_record,
    read_lines,
    record_from_line,
)

PROG = "sgl_eagle_ext.report"
WARMUP_FACTOR = 2.0
AGREE_PCT = 10.0
DECODE_BATCH = re.compile(
    r"Decode batch.*?#running-req: (?P<bs>\d+),.*?"
    r"(?:accept len: (?P<acc>[\d.]+),.*?)?gen throughput \(token/s\): (?P<tps>[\d.]+)"
)


@dataclass
class Group:
    """Windows of one batch size, merged exactly where the inputs allow."""

    cycles: int = 0
    windows: int = 0
    mixed: int = 0  # windows whose batch sizes varied (grouped by the dominant one)
    ms_weighted: dict = field(default_factory=lambda: defaultdict(float))  # phase -> sum(mean*n)
    p50_weighted: dict = field(default_factory=lambda: defaultdict(float))
    p90_weighted: dict = field(default_factory=lambda: defaultdict(float))
    hist: Counter = field(default_factory=Counter)
    sglang_accept: list = field(default_factory=list)  # from Decode batch lines
    sglang_tps: list = field(default_factory=list)
    by_steps: dict = field(default_factory=dict)  # draft steps -> Group (adaptive)
    warmup_cycles: int = 0  # left out by the warm-up rule
    warmup_windows: int = 0

    def mean(self, phase: str) -> float:
        return self.ms_weighted[phase] / self.cycles if self.cycles else 0.0


@dataclass
class Parsed:
    groups: dict = field(default_factory=lambda: defaultdict(Group))  # bs -> Group
    profile_records: int = 0
    decode_lines: int = 0
    skipped: int = 0
    prefill: list = field(default_factory=list)  # (n, mean ms)
    adaptive: adaptive_log.AdaptiveLog = field(
        default_factory=lambda: adaptive_log.AdaptiveLog([], [])
    )
    # (batch size, draft steps) -> its windows in log order, until settle()
    pending: dict = field(default_factory=lambda: defaultdict(list))


# -- reading (the record format itself: profiling/record.py) -------------------------
def add_record(parsed: Parsed, rec: dict) -> None:
    if rec.get("cycles") and rec["phases"]["cycle"]["mean"] <= 0:
        raise ValueError("a window of cycles that took 0 ms")  # counted as skipped
    parsed.profile_records += 1
    if rec.get("prefill", {}).get("n"):
        parsed.prefill.append((rec["prefill"]["n"], rec["prefill"]["ms_mean"]))
    if not rec["cycles"]:
        return
    bs_mix = {int(k): v for k, v in rec["bs"].items()}
    steps_mix = {int(k): v for k, v in (rec.get("steps") or {}).items()}
    steps = max(steps_mix, key=steps_mix.get) if steps_mix else None
    parsed.pending[(max(bs_mix, key=bs_mix.get), steps)].append(rec)  # merged by settle()


def warmup_windows(recs: list[dict]) -> int:
    """How many leading windows the warm-up rule leaves out (see the module doc)."""
    if len(recs) < 2:
        return 0
    means = [r["phases"]["cycle"]["mean"] for r in recs]
    lead = 0
    while lead < len(recs) - 1:
        rest = means[lead + 1 :]
        if means[lead] <= WARMUP_FACTOR * statistics.median(rest):
            break
        lead += 1
    return lead


def settle(parsed: Parsed) -> None:
    """Merge the windows read, per batch size and draft steps, after the warm-up rule."""
    for (bs, _steps), recs in parsed.pending.items():
        lead = warmup_windows(recs)
        g = parsed.groups[bs]
        g.warmup_windows += lead
        g.warmup_cycles += sum(r["cycles"] for r in recs[:lead])
        for rec in recs[lead:]:
            _merge_window(parsed, bs, rec)
    parsed.pending.clear()


def _merge_window(parsed: Parsed, bs: int, rec: dict) -> None:
    bs_mix = {int(k): v for k, v in rec["bs"].items()}
    _merge(parsed.groups[bs], rec, bs_mix)
    steps_mix = {int(k): v for k, v in (rec.get("steps") or {}).items()}
    if steps_mix:
        steps = max(steps_mix, key=steps_mix.get)
        by = parsed.groups[bs].by_steps
        _merge(by.setdefault(steps, Group()), rec, bs_mix)


def _merge(g: Group, rec: dict, bs_mix: dict) -> None:
    n = rec["cycles"]
    g.cycles += n
    g.windows += 1
    g.mixed += len(bs_mix) > 1
    for p in ROWS:
        s = rec["phases"][p]
        g.ms_weighted[p] += s["mean"] * n
        g.p50_weighted[p] += s["p50"] * n
        g.p90_weighted[p] += s["p90"] * n
    g.hist.update({int(k): v for k, v in rec["accept_hist"].items()})


def parse(paths: list[Path]) -> Parsed:
    parsed = Parsed()
    for path in paths:
        # two streamed passes (the adaptive switches, then the records): memory stays
        # flat however large the log
        log = adaptive_log.read(read_lines(path), keep=1000)
        parsed.adaptive.absorb(log)
        for line in read_lines(path):
            try:
                rec = find_record(line)
                if rec is not None:
                    add_record(parsed, rec)
                elif "Decode batch" in line:
                    m = DECODE_BATCH.search(line)
                    if not m:
                        raise ValueError("garbled Decode batch line")
                    checked([float(m["tps"]), float(m["acc"] or 0)])
                    g = parsed.groups[int(m["bs"])]
                    parsed.decode_lines += 1
                    g.sglang_tps.append(float(m["tps"]))
                    if m["acc"]:
                        g.sglang_accept.append(float(m["acc"]))
            except BAD_LINE:
                parsed.skipped += 1
    settle(parsed)
    return parsed


# -- figures -------------------------------------------------------------------------
def baseline_ms_per_token(args, baseline: Parsed | None, bs: int) -> float | None:
    """Per-stream baseline time per token at batch size `bs`. The median of the
    baseline log's rates: a stray rate after an idle gap must not skew it."""
    if baseline is not None:
        tps = [v for v in baseline.groups[bs].sglang_tps if v > 0] if bs in baseline.groups else []
        return 1000 * bs / statistics.median(tps) if tps else None
    if args.baseline_ms_per_token:
        return args.baseline_ms_per_token
    if args.baseline_tps:
        return 1000 / args.baseline_tps
    return None


def figures(parsed: Parsed, args, baseline: Parsed | None) -> list[dict]:
    rows = []
    for bs in sorted(parsed.groups):
        g = parsed.groups[bs]
        row = group_figures(g, bs, args, baseline)
        if g.by_steps:
            row["by_steps"] = [
                {"steps": k, "no_draft": k == 0, **group_figures(sub, bs, args, baseline)}
                for k, sub in sorted(g.by_steps.items())
            ]
        rows.append(row)
    return rows


def finite_or_null(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite_or_null(v) for v in obj]
    return obj


def group_figures(g: Group, bs: int, args, baseline: Parsed | None) -> dict:
    row: dict = {
        "bs": bs,
        "cycles": g.cycles,
        "windows": g.windows,
        "mixed_windows": g.mixed,
        "warmup_cycles_excluded": g.warmup_cycles,
        "warmup_windows_excluded": g.warmup_windows,
    }
    if g.cycles:
        cycle = g.mean("cycle")
        row["phases"] = {
            p: {
                "mean_ms": g.mean(p),
                "p50_ms": g.p50_weighted[p] / g.cycles,
                "p90_ms": g.p90_weighted[p] / g.cycles,
                "share_pct": 100 * g.mean(p) / cycle if cycle else 0.0,
            }
            for p in ROWS
        }
        n_req = sum(g.hist.values())
        acc = sum(k * v for k, v in g.hist.items()) / n_req if n_req else None
        row["accept_len"] = acc
        row["tok_s"] = 1000 * acc * bs / cycle if acc and cycle else None
        base = baseline_ms_per_token(args, baseline, bs)
        if base:
            row["baseline_ms_per_token"] = base
            row["break_even_accept_len"] = cycle / base
            if acc and cycle:
                row["speedup"] = acc * base / cycle
        if args.target_tps:
            row["target_tps"] = args.target_tps
            row["accept_len_for_target"] = args.target_tps * cycle / 1000
    if g.sglang_accept:
        row["sglang_accept_len"] = sum(g.sglang_accept) / len(g.sglang_accept)
    if g.sglang_tps:
        row["sglang_gen_tps"] = sum(g.sglang_tps) / len(g.sglang_tps)
        if row.get("tok_s"):
            row["profile_vs_sglang_pct"] = 100 * (row["tok_s"] / row["sglang_gen_tps"] - 1)
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


def print_table(rows: list[dict], parsed: Parsed) -> None:
    print(
        f"{parsed.profile_records} profile windows, {parsed.decode_lines} SGLang Decode batch "
        f"lines, {parsed.skipped} lines skipped (truncated or garbled)"
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
        print(
            f"  note: the profile's {row['tok_s']:.1f} tok/s and SGLang's own gen throughput "
            f"{row['sglang_gen_tps']:.1f} tok/s differ by {pct:+.0f}% (over {AGREE_PCT:g}%): "
            f"time outside the profiled cycles (scheduling, idle gaps between requests, "
            f"prefill) or warm-up the rule did not catch"
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
        "--baseline-ms-per-token", type=number(0, strict=True), help="baseline ms per token"
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
    parsed = parse(args.logs)
    baseline = parse(args.baseline_log) if args.baseline_log else None
    if not (parsed.profile_records or parsed.decode_lines or parsed.adaptive.switches):
        raise UserError(
            f"no {TAG} or Decode batch lines in {', '.join(map(str, args.logs))}"
            f" ({parsed.skipped} garbled).",
            fix=f"start the server with {ENV}=1 and send it some load",
            code=1,
        )
    rows = figures(parsed, args, baseline)
    if args.json:
        json.dump(
            {
                "rows": finite_or_null(rows),
                "profile_windows": parsed.profile_records,
                "decode_lines": parsed.decode_lines,
                "skipped_lines": parsed.skipped,
                "adaptive": parsed.adaptive.to_json(),
            },
            sys.stdout,
            indent=2,
            allow_nan=False,  # NaN is not JSON: non-finite figures are written as null
        )
        print()
    else:
        print_table(rows, parsed)
        print_adaptive(parsed.adaptive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
