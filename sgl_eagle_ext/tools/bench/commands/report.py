"""bench report: one self-contained HTML file of results, plots and provenance."""

from __future__ import annotations

from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    r = sub.add_parser(
        "report",
        help="self-contained HTML report (tables, plots, provenance) of a results file",
    )
    r.add_argument("results", help="JSONL file written by sweep, ab, single or lossless")
    r.add_argument("-o", "--output", help="HTML path (default: the JSONL's name, .html)")
    r.add_argument("--run-id", help="only this run (default: every run, latest first)")
    r.add_argument("--requests", help="per-request records (--save-requests) to add")
    r.add_argument("--slo", help="goodput goals in ms for the per-request table, e.g. ttft=500")
    r.add_argument("--percentiles", default="50,90,99", help="latency percentiles (50,90,99)")
    r.add_argument(
        "--profile-log",
        action="append",
        metavar="LOG",
        help="server log with EAGLE3_PROFILE lines: acceptance per draft position (repeatable)",
    )
    r.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import html_report

    return html_report.main(args, console)
