"""bench plot: a PNG of one run's sweep records (every arm on the same axes)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sgl_eagle_ext.common.declared_flags import add_flags, as_path, flag, read_options
from sgl_eagle_ext.tools.bench.progress import Console


@dataclass(frozen=True)
class Options:
    results: Path = flag(
        "RESULTS", check=as_path, help="JSONL file written by sweep, ab or compare"
    )
    output: Path | None = flag(
        "-o", "--output", check=as_path, help="PNG path (default: next to the JSONL)"
    )
    run_id: str | None = flag(
        "--run-id", help="plot this run (default: the latest run with sweep records)"
    )


def register(sub) -> None:
    pl = sub.add_parser("plot", help="PNG of tok/s and p50/p99 latency against concurrency")
    add_flags(pl, Options)
    pl.set_defaults(read=partial(read_options, Options), run=run)


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import plot

    return plot.plot_run(opts.results, opts.output, opts.run_id, console)
