"""bench goodput: latency percentiles and goodput at any SLO from per-request records."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sgl_eagle_ext.common.declared_flags import add_flags, as_path, flag, read_options
from sgl_eagle_ext.tools.bench.progress import Console


@dataclass(frozen=True)
class Options:
    file: Path = flag("FILE", check=as_path, help="JSONL written by --save-requests")
    slo: list[str] | None = flag(  # as given (goodput.parse_slo)
        "--slo",
        "--goodput",
        nargs="+",
        action="extend",
        metavar="KEY=MS",
        help="goals in ms a request must meet, e.g. ttft=500,tpot=50 or ttft:500 tpot:50 "
        "(keys ttft, tpot, itl, e2e or e2el)",
    )
    percentiles: str = flag(  # as given (goodput.parse_percentiles)
        "--percentiles", default="50,90,99", help="latency percentiles (default 50,90,99)"
    )
    run_id: str | None = flag("--run-id", help="only this run (default: every run in the file)")
    json: bool = flag(
        "--json", default=False, action="store_true", help="also print the figures as JSON"
    )


def register(sub) -> None:
    g = sub.add_parser(
        "goodput",
        help="recompute percentiles and goodput at an SLO from --save-requests records",
    )
    add_flags(g, Options)
    g.set_defaults(read=partial(read_options, Options), run=run)


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import goodput

    return goodput.report(opts, console)
