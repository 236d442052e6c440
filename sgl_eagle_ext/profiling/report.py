"""python -m sgl_eagle_ext.report: where the speculation cycle's time goes, and
what accept length would break even.

    python -m sgl_eagle_ext.report server.log [more.log ...] --baseline-tps 82.2
    python -m sgl_eagle_ext.report spec.log --baseline-log baseline.log --target-tps 120
    python -m sgl_eagle_ext.report spec.log --json

Reads EAGLE3_PROFILE lines (see profiling/recorder/window.py), the same records as JSON
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
from sgl_eagle_ext.profiling import adaptive_log
from sgl_eagle_ext.profiling.names import ENV, ENV_FILE, TAG
from sgl_eagle_ext.profiling.phases import PHASES

PROG = "sgl_eagle_ext.report"
WARMUP_FACTOR = 2.0
AGREE_PCT = 10.0
ROWS = ("cycle", *PHASES, "other")
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


# -- reading -------------------------------------------------------------------
def _mix(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (p.split(":") for p in text.split(",") if p)}


def _triplet(text: str) -> dict:
    mean, p50, p90 = (float(x) for x in text.split("/"))
    return {"mean": mean, "p50": p50, "p90": p90}


def record_from_line(line: str) -> dict:
    """An EAGLE3_PROFILE log line -> the same dict as the JSON record."""
    body = line[line.index(TAG) + len(TAG) :].split()
    f = dict(tok.split("=", 1) for tok in body)
    rec = {
        "v": int(f["v"]),
        "rank": int(f["rank"]),
        "cycles": int(f["cycles"]),
        "bs": _mix(f["bs"]),
        "draft_tokens": _mix(f["draft_tokens"]),
    }
    n, ms = f["prefill"].split("/")
    rec["prefill"] = {"n": int(n), "ms_mean": float(ms)}
    if "steps" in f:
        rec["steps"] = _mix(f["steps"])
    if rec["cycles"]:
        rec["phases"] = {p: _triplet(f[f"{p}_ms"]) for p in ROWS}
        for item in f["share"].split(","):
            p, s = item.split(":")
            rec["phases"][p]["share"] = float(s)
        rec["accept_hist"] = _mix(f["accept_hist"])
    return rec


def add_record(parsed: Parsed, rec: dict) -> None:
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


def checked(rec):
    """`rec` if every number in it is finite, else ValueError: one NaN
    line is skipped, never averaged into (and poisoning) its batch-size group."""
    stack = [rec]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v):
            raise ValueError(f"number out of range: {v}")
    return rec


def read_lines(path: Path):
    """The file's lines, read as a stream (server logs run to gigabytes)."""
    if path.is_dir():
        raise UserError(
            f"{path}: is a directory.", fix="give the server log file (launcher: logs/*.log)"
        )
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from f
    except OSError as e:
        raise UserError(
            f"{path}: cannot be read: {e.strerror or e}.",
            fix="give the server log file (launcher: logs/*.log)",
        ) from None


def parse(paths: list[Path]) -> Parsed:
    parsed = Parsed()
    for path in paths:
        # two streamed passes (the adaptive switches, then the records): memory stays
        # flat however large the log
        log = adaptive_log.read(line.rstrip("\r\n") for line in read_lines(path))
        parsed.adaptive.switches += log.switches
        parsed.adaptive.disabled += log.disabled
        for line in read_lines(path):
            line = line.rstrip("\r\n")
            try:
                if line.startswith("{") and '"cycles"' in line:
                    add_record(parsed, checked(json.loads(line)))
                elif TAG + " " in line:
                    add_record(parsed, checked(record_from_line(line)))
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
            except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
                parsed.skipped += 1
    settle(parsed)
    return parsed


# -- figures -------------------------------------------------------------------------
def baseline_ms_per_token(args, baseline: Parsed | None, bs: int) -> float | None:
    """Per-stream baseline time per token at batch size `bs`. The median of the
    baseline log's rates: a stray rate after an idle gap must not skew it."""
    if baseline is not None:
        tps = baseline.groups[bs].sglang_tps if bs in baseline.groups else []
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
            if acc:
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
            print(f"  {'phase':14}{'mean ms':>10}{'p50 ms':>10}{'p90 ms':>10}{'share':>9}")
            for p, s in row["phases"].items():
                print(
                    f"  {p:14}{s['mean_ms']:10.2f}{s['p50_ms']:10.2f}{s['p90_ms']:10.2f}"
                    f"{s['share_pct']:8.1f}%"
                )
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
    print(
        f"  {'by draft steps':16}{'cycles':>8}{'cycle ms':>10}{'draft ms':>10}"
        f"{'accept':>8}{'tok/s':>9}{'tau*':>7}{'vs base':>9}"
    )

    def num(v, width: int, fmt: str = ".2f", unit: str = "") -> str:
        text = "-" if v is None else format(v, fmt) + unit
        return f"{text:>{width}}"

    for r in subrows:
        ph = r.get("phases", {})
        label = f"{r['steps']} (no draft)" if r["no_draft"] else str(r["steps"])
        print(
            f"  {label:16}{r['cycles']:8d}"
            f"{num(ph.get('cycle', {}).get('mean_ms'), 10)}"
            f"{num(ph.get('draft', {}).get('mean_ms'), 10)}"
            f"{num(r.get('accept_len'), 8)}{num(r.get('tok_s'), 9, '.1f')}"
            f"{num(r.get('break_even_accept_len'), 7)}"
            f"{num(r.get('speedup'), 9, '.2f', 'x')}"
        )


def print_adaptive(log: adaptive_log.AdaptiveLog, limit: int = 20) -> None:
    for why in log.disabled:
        print(f"\nSGLang turned adaptive speculation OFF: {why} (static speculation served)")
    if not log.switches:
        return
    reasons = Counter(s.reason for s in log.switches)
    print(
        f"\n== adaptive switches (SGLang's 'Switch adaptive runtime state'): "
        f"{len(log.switches)}, " + ", ".join(f"{n} by {r}" for r, n in sorted(reasons.items()))
    )
    shown = log.switches if len(log.switches) <= limit else log.switches[: limit // 2]
    for s in shown:
        print(f"  {s.describe()}")
    if len(log.switches) > limit:
        print(f"  ... {len(log.switches) - limit} more ...")
        for s in log.switches[-limit // 2 :]:
            print(f"  {s.describe()}")


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Per-phase table and break-even accept length from server logs.",
    )
    p.add_argument("logs", nargs="+", type=Path, help=f"server logs or {ENV_FILE} files")
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
