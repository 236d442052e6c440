"""bench plot: a PNG of one run's sweep records (every arm on the same axes)."""

from __future__ import annotations

from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    pl = sub.add_parser("plot", help="PNG of tok/s and p50/p99 latency against concurrency")
    pl.add_argument("results", help="JSONL file written by sweep, ab or compare")
    pl.add_argument("-o", "--output", help="PNG path (default: next to the JSONL)")
    pl.add_argument("--run-id", help="plot this run (default: the latest run with sweep records)")
    pl.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import plot

    return plot.main(args, console)
