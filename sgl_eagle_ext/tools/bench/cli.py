"""python -m sgl_eagle_ext.bench {single,sweep,ab,compare,lossless,plot,goodput,report,speculation}

    bench single --url U --max-tokens 2048 --runs 5 --warmup 2
    bench sweep --url U --concurrency 1,2,5,10,30,70,100,250 --num-prompts 200
    bench ab --preset-a baseline --preset-b eagle3-2step --model-path M --draft-model-path D
    bench compare --arm baseline --arm eagle3-2step --arm eagle3-adaptive --model-path M ...
    bench lossless --url-a U1 --url-b U2
    bench plot bench-results/results.jsonl
    bench goodput requests.jsonl --slo ttft=500,tpot=50 --percentiles 50,90,99
    bench speculation requests.jsonl [--profile-log server.log]
    bench report bench-results/results.jsonl --requests requests.jsonl -o report.html

Exit codes: 0 ok; 1 the server failed (died, every run failed, an arm did not
start) or the lossless check found differences; 2 bad input; 130 Ctrl-C (what
was finished is written first).

This module only assembles the subcommands (commands/, each owns its parser,
the reading of its flags into one typed options object, and its run) and
dispatches: parse -> read (every check of a flag's value) -> run.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from sgl_eagle_ext.common.cli_args import split_extra
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.interrupts import sigterm_as_sigint
from sgl_eagle_ext.common.redaction import redact_args
from sgl_eagle_ext.tools.bench import session
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.commands import (
    compare,
    goodput,
    lossless,
    plot,
    report,
    single,
    speculation,
    sweep,
)
from sgl_eagle_ext.tools.bench.progress import DEFAULT_EVERY, Console

PROG = session.PROG
COMMANDS = (single, sweep, compare, lossless, plot, goodput, report, speculation)
# (compare registers ab and compare)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description="Benchmarks that settle whether speculation pays."
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        command.register(sub)
    return p


def _console(args: argparse.Namespace) -> Console:
    """--quiet and --progress-every (the commands that send requests have them)."""
    every = getattr(args, "progress_every", DEFAULT_EVERY)  # number(0) checked it
    return Console(getattr(args, "quiet", False), every, bars=not getattr(args, "disable_tqdm", 0))


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = parser().parse_args(ours)
    if extra and not getattr(args, "takes_extra", False):
        raise UserError(
            f"arguments after `--` ({shlex.join(redact_args(extra))}) only go to `bench ab` and "
            f"`bench compare` (the servers they start).",
            fix="drop them",
        )
    opts = args.read(args)  # the command's typed options; a bad value stops here
    console = _console(args)
    try:
        with sigterm_as_sigint():  # `kill` records the level in progress, as Ctrl-C does
            return args.run(opts, extra, console)
    except (sw.Interrupted, KeyboardInterrupt) as e:
        where = f" {e}" if str(e) else ""
        print(f"\n{PROG}: interrupted{where}; finished results are recorded", file=sys.stderr)
        return session.EXIT_INTERRUPTED
