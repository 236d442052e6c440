"""bench report: one self-contained HTML file of results, plots and provenance."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

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
    r.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    results: Path  # RESULTS: the JSONL
    output: Path | None  # -o/--output (None: the JSONL's name, .html)
    run_id: str | None  # --run-id (None: every run)
    requests: Path | None  # --requests: per-request records
    slo: str | None  # --slo, as given (goodput.parse_slo)
    percentiles: str  # --percentiles, as given (goodput.parse_percentiles)
    profile_logs: tuple[str, ...]  # --profile-log LOG ...


def read(args: argparse.Namespace) -> Options:
    return Options(
        results=Path(args.results),
        output=Path(args.output) if args.output else None,
        run_id=args.run_id,
        requests=Path(args.requests) if args.requests else None,
        slo=args.slo,
        percentiles=args.percentiles,
        profile_logs=tuple(args.profile_log or ()),
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import html_report

    return html_report.write_report(
        opts.results,
        opts.output,
        console,
        run_id=opts.run_id,
        requests=opts.requests,
        slo_text=opts.slo,
        percentiles_text=opts.percentiles,
        profile_logs=opts.profile_logs,
    )
