"""bench goodput: latency percentiles and goodput at any SLO from per-request records."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    g = sub.add_parser(
        "goodput",
        help="recompute percentiles and goodput at an SLO from --save-requests records",
    )
    g.add_argument("file", help="JSONL written by --save-requests")
    g.add_argument(
        "--slo",
        "--goodput",
        dest="slo",
        nargs="+",
        action="extend",
        metavar="KEY=MS",
        help="goals in ms a request must meet, e.g. ttft=500,tpot=50 or ttft:500 tpot:50 "
        "(keys ttft, tpot, itl, e2e or e2el)",
    )
    g.add_argument(
        "--percentiles", default="50,90,99", help="latency percentiles (default 50,90,99)"
    )
    g.add_argument("--run-id", help="only this run (default: every run in the file)")
    g.add_argument("--json", action="store_true", help="also print the figures as JSON")
    g.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    file: Path  # FILE: --save-requests records
    slo: list[str] | None  # --slo/--goodput words, as given (goodput.parse_slo)
    percentiles: str  # --percentiles, as given (goodput.parse_percentiles)
    run_id: str | None  # --run-id (None: every run)
    json: bool  # --json


def read(args: argparse.Namespace) -> Options:
    return Options(
        file=Path(args.file),
        slo=args.slo,
        percentiles=args.percentiles,
        run_id=args.run_id,
        json=args.json,
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import goodput

    return goodput.report(
        opts.file,
        console,
        slo_text=opts.slo,
        percentiles_text=opts.percentiles,
        run_id=opts.run_id,
        as_json=opts.json,
    )
