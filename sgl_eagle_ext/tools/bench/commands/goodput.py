"""bench goodput: latency percentiles and goodput at any SLO from per-request records."""

from __future__ import annotations

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
    g.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import goodput

    return goodput.main(args, console)
