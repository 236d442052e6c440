"""python -m sgl_eagle_ext.tune logs: measure what the adaptive table needs on this host, and write it.

    python -m sgl_eagle_ext.tune logs logs/eagle3-*.log --baseline-log logs/baseline-*.log \
        --out launch/adaptive/mine.json
    python -m sgl_eagle_ext.tune logs spec.log --baseline-tps 82.2 --grid   # + fixed presets

(`tune LOG...` without the word `logs` is the same command; `tune live` is tools/tune/live.py:
its command line is mapped here onto LiveOptions, tools/tune/live_options.py.)

Inputs are server logs (or EAGLE3_PROFILE_FILE records) of EAGLE-3 servers run with
EAGLE3_PROFILE=1 under the load to tune for: fixed chains (eagle3-3step, -5step) and
adaptive servers both count, split by (batch size, draft steps). The baseline time per
token comes from a baseline server's log (SGLang's Decode batch lines, per batch size),
or --baseline-tps / --baseline-ms-per-token for one stream. Prints, per batch size and
step count, predicted accept length, cycle time, tok/s, break-even accept length and
gain against the baseline (tools/tune/model.py), the candidate steps chosen per bucket
and why (choose.py); --out writes the adaptive config (checked by SGLang's rules for
--sglang-version); --grid ranks fixed settings (steps x topk x draft tokens) for one
stream. Launch the result with
    python -m sgl_eagle_ext.launch --preset eagle3-adaptive --adaptive-config FILE ...
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from sgl_eagle_ext.common import adaptive_config, figures, paths, releases
from sgl_eagle_ext.common.cli_args import integer, number, split_extra
from sgl_eagle_ext.common.declared_flags import add_flags, read_options
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.profiling import aggregate
from sgl_eagle_ext.tools.bench import records
from sgl_eagle_ext.tools.tune import choose, grid, model
from sgl_eagle_ext.tools.tune.live_options import REQUIRED, LiveOptions

PROG = "sgl_eagle_ext.tune"
# The commands, and what `tune --help` says of each. The earlier spellings stay:
# `tune --live ...` is `tune live ...`, `tune LOG...` is `tune logs LOG...`.
LIVE, LOGS = "live", "logs"
COMMANDS = {
    LIVE: "one server, one weight load: every (concurrency, draft steps) cell measured under "
    "load, then the adaptive table, the fastest fixed preset and a report",
    LOGS: "offline, from the logs of profiled servers (EAGLE3_PROFILE=1): the adaptive table "
    "and, with --grid, fixed settings ranked (the default: `tune LOG...`)",
}


def top_parser() -> argparse.ArgumentParser:
    """`tune --help`: the commands (each parses its own arguments)."""
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Tune EAGLE-3 speculative decoding on this host.",
        epilog="Earlier spellings still work: `tune --live ...` = `tune live ...`, "
        "`tune LOG...` = `tune logs LOG...`. Each command: `tune COMMAND --help`.",
    )
    sub = p.add_subparsers(title="commands", metavar="{live,logs}")
    for name, text in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG} {LOGS}", description=__doc__.split("\n")[0].split(": ", 1)[1]
    )
    p.add_argument("logs", nargs="+", type=Path, help="EAGLE-3 server logs (EAGLE3_PROFILE=1)")
    base = p.add_mutually_exclusive_group()
    base.add_argument(
        "--baseline-log", type=Path, action="append", help="a baseline server's log (repeatable)"
    )
    base.add_argument(
        "--baseline-tps", type=number(0, strict=True), help="baseline tokens/s of one stream"
    )
    base.add_argument(
        "--baseline-ms-per-token", type=number(0, strict=True), help="baseline ms/token, one stream"
    )
    p.add_argument(
        "--max-steps", type=integer(), default=7, help="largest step count considered (7)"
    )
    p.add_argument(
        "--floor-margin",
        type=number(0),
        default=1.15,
        help="keep 0 steps as a floor at one stream when the best gain is below this (1.15)",
    )
    p.add_argument(
        "--min-gain",
        type=number(0),
        default=1.03,
        help="a step count pays only above this predicted gain over the baseline (1.03)",
    )
    p.add_argument("--out", type=Path, help="write the adaptive config (JSON) here")
    p.add_argument(
        "--sglang-version", help="check the config for this release (default: the installed one)"
    )
    p.add_argument("--grid", action="store_true", help="also rank fixed settings for one stream")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def live_parser() -> argparse.ArgumentParser:
    """`tune live`'s arguments: LiveOptions' fields."""
    from sgl_eagle_ext.tools.tune import live

    p = argparse.ArgumentParser(
        prog=f"python -m {live.PROG}", description=live.__doc__.split("\n")[0]
    )
    add_flags(p, LiveOptions, required=REQUIRED)  # each flag a field
    return p


def live_options(argv: list[str]) -> tuple[LiveOptions, list[str]]:
    """`tune live`'s command line: (its options, the SGLang arguments after `--`)."""
    own, extra = split_extra(argv)
    return read_options(LiveOptions, live_parser().parse_args(own)), extra


def live_command(argv: list[str]) -> int:
    """`tune live ...`."""
    opts, extra = live_options(argv)
    from sgl_eagle_ext.tools.tune import live  # one load, every cell measured

    return live.run(opts, extra)


REASONS = Table(
    Col("bs", 4, "d"),
    Col("steps", 5, "d"),
    Col("accept", 7, ".2f"),
    Col("cycle ms", 9, ".2f"),
    Col("tok/s", 9, ".1f"),
    Col("tau*", 6, ".2f"),
    Col("gain", 6, ".2f", "x"),
    L("note", sep="  "),
)


def tree_note(run: aggregate.Profile) -> str:
    topk = run.spec.get("speculative_eagle_topk")
    ndt = run.spec.get("speculative_num_draft_tokens")
    n = sum(c.cycles for c in run.cells().values())
    return (
        f"{run.path}: a tree (topk {topk}, {ndt} draft tokens; {n} decode cycles): ranked by "
        "--grid, not used for the adaptive table (SGLang's adaptive runs chains only)"
    )


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def reasons_table(preds: dict, picks: dict) -> list[str]:
    lines = [REASONS.header()]
    for bs, rows in preds.items():
        pick = picks[bs]
        for p in rows:
            notes = []
            if p.steps in pick.steps:
                notes.append("candidate")
            if pick.best is p:
                notes.append("best")
            if not p.measured:
                notes.append("cycle fitted")
            if p.baseline_proxy:
                notes.append("baseline = 0-step cycle")
            lines.append(
                REASONS.row(
                    bs,
                    p.steps,
                    p.accept_len,
                    p.cycle_ms,
                    p.tok_s,
                    p.break_even,
                    p.gain,
                    ", ".join(notes),
                )
            )
        lines.append(f"{'':4} -> bucket candidates {pick.steps}: {pick.why}")
    return lines


def command(argv: list[str]) -> tuple[str, list[str]]:
    """(live or logs, that command's arguments), from the new or the earlier spelling."""
    if argv[:1] in ([LIVE], [LOGS]):
        return argv[0], argv[1:]
    ours, _ = split_extra(argv)
    if "--live" in ours:  # the earlier spelling of `tune live`
        i = argv.index("--live")
        return LIVE, argv[:i] + argv[i + 1 :]
    return LOGS, argv


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        top = top_parser()
        if not argv:
            top.error("a command is needed: live or logs (see --help)")
        top.print_help()
        return 0
    name, argv = command(argv)
    if name == LIVE:
        return live_command(argv)
    return offline(argv)


def offline(argv: list[str]) -> int:
    """`tune logs LOG...`."""
    args = parser().parse_args(argv)
    if args.out:  # refused before the logs are read, not after
        paths.check_writable_file("--out", args.out)
    for value, name in (
        (args.baseline_tps, "--baseline-tps"),
        (args.baseline_ms_per_token, "--baseline-ms-per-token"),
    ):
        if value is not None and value <= 0:
            raise UserError(f"{name} {value}: must be positive.")
    if not 1 <= args.max_steps <= 16:
        raise UserError(f"--max-steps {args.max_steps}: must be 1..16.")
    release, _ = releases.resolve(args.sglang_version)
    runs = [aggregate.Profile.read(p) for p in args.logs]
    empty = [r for r in runs if not r.by_key]
    # a tree: its steps are not a chain's (the grid ranks it)
    tree = [r.spec.get("speculative_eagle_topk", 1) not in (1, None) for r in runs]
    trees = [r for r, t in zip(runs, tree) if r.by_key and t]
    cells = aggregate.merge_cells(r for r, t in zip(runs, tree) if r.by_key and not t)
    for run in trees:  # say why each contributes what it does
        print(f"{PROG}: note: {tree_note(run)}", file=sys.stderr)
    if not cells and not (trees and args.grid):
        why = [tree_note(r) for r in trees] + [
            f"{r.path}: no EAGLE3_PROFILE decode windows" for r in empty
        ]
        raise UserError(
            "nothing to tune the adaptive chain table from: " + "; ".join(why) + ".",
            fix=(
                "pass --grid to rank the tree against other fixed settings; for the adaptive "
                "table pass chain logs (eagle3-3step, eagle3-5step) or run tune live"
                if trees
                else "run the EAGLE-3 server with EAGLE3_PROFILE=1 under load, then pass its log"
            ),
        )
    drafts = {r.spec.get("speculative_draft_model_path") for r in runs} - {None}
    if len(drafts) > 1:  # acceptance is pooled: it must be one draft's
        print(
            f"{PROG}: warning: the logs come from {len(drafts)} different drafts "
            f"({', '.join(sorted(drafts))}); their acceptance is pooled as one",
            file=sys.stderr,
        )
    baseline = aggregate.baseline_ms(aggregate.Profile.read(p) for p in args.baseline_log or [])
    if args.baseline_log and not baseline:
        raise UserError(
            f"no SGLang Decode batch lines in {', '.join(map(str, args.baseline_log))}.",
            fix="pass the log of a baseline server that served load (launcher: logs/baseline-*.log)",
        )
    one = args.baseline_ms_per_token or figures.ms_per_token(args.baseline_tps)
    preds = model.predict(cells, baseline, args.max_steps, one)
    min_step = release.adaptive.min_step if release.adaptive else 0
    picks = {
        bs: choose.choose(rows, min_step, args.floor_margin, args.min_gain)
        for bs, rows in preds.items()
    }
    table = choose.buckets(list(picks.values()))
    alphas = model.position_acceptance(cells)
    out: dict = {
        "position_acceptance": alphas,
        "predictions": {
            bs: [
                vars(p) | {"tok_s": p.tok_s, "break_even": p.break_even, "gain": p.gain}
                for p in rows
            ]
            for bs, rows in preds.items()
        },
        "buckets": table,
    }
    if args.grid:
        out["grid"] = grid.rank(runs, cells, baseline.get(1, one), args.max_steps)
    if args.out:
        if not table:
            raise UserError(
                "no bucket could be tuned (no baseline for any measured batch size).",
                fix="pass --baseline-log (a baseline server's log under the same load)",
                code=1,
            )
        about = (
            f"written by python -m {PROG} on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
            f"from {', '.join(p.name for p in args.logs)}; baseline: "
            + (
                ", ".join(p.name for p in args.baseline_log)
                if args.baseline_log
                else f"{figures.tok_s(1, one):.1f} tok/s one stream"
                if one
                else "0-step cycles"
            )
            + "; per-position acceptance, conditional (alpha_j) "
            + ", ".join(f"{a:.2f}" for a in alphas)
        )
        adaptive_config.write(args.out, table, about)
        checked, found = adaptive_config.load(args.out, release)
        if checked is None:  # our own output refused by the release's rules: a bug
            raise UserError(f"{args.out}: {found[0].message}", code=1)
        out["written"] = str(args.out)
    if args.json:
        # valid JSON: a gain over a 0 ms baseline is inf, written as null (not Infinity)
        json.dump(records.clean(out), sys.stdout, indent=2, default=str, allow_nan=False)
        print()
        return 0
    # bench's convention first (cumulative), then the model's own (conditional alpha_j)
    cumulative = figures.cumulative_acceptance(alphas)
    print(
        "per-position acceptance (pooled), cumulative (share of all verify cycles that "
        "accepted draft j): "
        + (", ".join(f"pos {j + 1}={a:.2f}" for j, a in enumerate(cumulative)) or "none measured")
    )
    if alphas:
        print(
            "  conditional (alpha_j: share of the cycles that reached draft j which accepted "
            "it): " + ", ".join(f"a{j + 1}={a:.2f}" for j, a in enumerate(alphas))
        )
    print("\n".join(reasons_table(preds, picks)))
    print("\nadaptive table: " + json.dumps(table))
    if args.grid:
        print("\n" + "\n".join(grid.render(out["grid"])))
    if args.out:
        union = sorted({s for v in table.values() for s in v})
        print(
            f"\nwrote {args.out}; launch: python -m sgl_eagle_ext.launch --preset eagle3-adaptive "
            f"--adaptive-config {args.out} ... (starting steps {union[len(union) // 2]})"
        )
    return 0
