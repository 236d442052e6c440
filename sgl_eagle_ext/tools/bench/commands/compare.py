"""bench compare and bench ab: presets started in turn through the launcher, the
same sweep on each, compared. One flow and one report for both:

  compare --arm P1 --arm P2 [--arm P3 ...]   per level the best arm and every arm's
                                             ratio to it; each arm against the first
                                             (the reference): crossovers, the lossless
                                             check, a recommendation
  ab --preset-a A --preset-b B               compare --arm A --arm B (its table: the
                                             side-by-side one, B/A ratios)

This module is the command line; the run is arm_runs.py, the report compare_report.py.
"""

from __future__ import annotations

import argparse
import string

from sgl_eagle_ext.common.declared_flags import add_flags, read_options
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import options, workload
from sgl_eagle_ext.tools.bench.arm_runs import LaunchOptions, Options, run_arms
from sgl_eagle_ext.tools.bench.compare_report import report
from sgl_eagle_ext.tools.bench.progress import Console

MAX_ARMS = len(string.ascii_uppercase)


def register(sub) -> None:
    a = sub.add_parser(
        "ab",
        help="start two presets in turn through the launcher, sweep both, "
        "compare; includes the lossless check",
        description="Arguments after `--` go to both servers (SGLang flags).",
    )
    options.add_common(a, 256, url=False)
    options.add_sweep(a)
    workload.add_options(a)
    a.add_argument("--preset-a", default="baseline", help="reference preset (default baseline)")
    a.add_argument("--preset-b", required=True, help="preset to evaluate, e.g. eagle3-2step")
    add_flags(a, LaunchOptions)
    a.set_defaults(read=read_ab, run=run, takes_extra=True)

    c = sub.add_parser(
        "compare",
        help="start N presets in turn through the launcher, sweep each; per level the "
        "best arm and every arm's ratio to it",
        description="Arguments after `--` go to every server (SGLang flags).",
    )
    options.add_common(c, 256, url=False)
    options.add_sweep(c)
    workload.add_options(c)
    c.add_argument(
        "--arm",
        action="append",
        required=True,
        metavar="PRESET",
        help="a preset (name or .toml file) to run; repeat for each arm, the first is the "
        "reference for crossovers and the lossless check (e.g. --arm baseline --arm "
        "eagle3-2step --arm eagle3-adaptive)",
    )
    add_flags(c, LaunchOptions)
    c.set_defaults(read=read_compare, run=run, takes_extra=True)


def read_ab(args: argparse.Namespace) -> Options:
    opts = read_options(Options, args, kind="ab", presets=[args.preset_a, args.preset_b])
    check_presets(args.preset_a, args.preset_b)
    return opts


def read_compare(args: argparse.Namespace) -> Options:
    opts = read_options(Options, args, kind="compare", presets=list(args.arm))
    check_arms(args.arm)
    return opts


def check_presets(a: str, b: str) -> None:
    if a == b:
        raise UserError(
            f"--preset-a and --preset-b are both '{a}'.",
            fix="compare two different presets, e.g. --preset-a baseline --preset-b eagle3-2step",
        )


def check_arms(presets: list[str]) -> None:
    if len(presets) < 2:
        raise UserError(
            f"bench compare needs at least two --arm (got {len(presets)}).",
            fix="e.g. --arm baseline --arm eagle3-2step",
        )
    if len(presets) > MAX_ARMS:
        raise UserError(f"{len(presets)} arms: at most {MAX_ARMS}.", fix="drop some --arm")
    dup = sorted({p for p in presets if presets.count(p) > 1})
    if dup:
        raise UserError(f"--arm {dup[0]} is given more than once.", fix="name each preset once")


def run(opts: Options, extra: list[str], console: Console) -> int:
    run = run_arms(opts, extra, console)
    return run if isinstance(run, int) else report(opts, console, run)
