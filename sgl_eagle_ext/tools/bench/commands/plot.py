"""bench plot: a PNG of one run's sweep records (every arm on the same axes)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    pl = sub.add_parser("plot", help="PNG of tok/s and p50/p99 latency against concurrency")
    pl.add_argument("results", help="JSONL file written by sweep, ab or compare")
    pl.add_argument("-o", "--output", help="PNG path (default: next to the JSONL)")
    pl.add_argument("--run-id", help="plot this run (default: the latest run with sweep records)")
    pl.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    results: Path  # RESULTS: the JSONL
    output: Path | None  # -o/--output (None: next to the JSONL)
    run_id: str | None  # --run-id (None: the latest run with sweep records)


def read(args: argparse.Namespace) -> Options:
    return Options(
        results=Path(args.results),
        output=Path(args.output) if args.output else None,
        run_id=args.run_id,
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import plot

    return plot.plot_run(opts.results, opts.output, opts.run_id, console)
