"""bench report: one self-contained HTML file of results, plots and provenance."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sgl_eagle_ext.common.declared_flags import add_flags, as_path, flag, read_options
from sgl_eagle_ext.tools.bench.progress import Console


@dataclass(frozen=True)
class Options:
    results: Path = flag(
        "RESULTS", check=as_path, help="JSONL file written by sweep, ab, single or lossless"
    )
    output: Path | None = flag(
        "-o", "--output", check=as_path, help="HTML path (default: the JSONL's name, .html)"
    )
    run_id: str | None = flag("--run-id", help="only this run (default: every run, latest first)")
    requests: Path | None = flag(
        "--requests", check=as_path, help="per-request records (--save-requests) to add"
    )
    slo: str | None = flag(  # as given (goodput.parse_slo)
        "--slo", help="goodput goals in ms for the per-request table, e.g. ttft=500"
    )
    percentiles: str = flag(  # as given (goodput.parse_percentiles)
        "--percentiles", default="50,90,99", help="latency percentiles (50,90,99)"
    )
    profile_logs: tuple[str, ...] = flag(
        "--profile-log",
        default=(),
        cli_default=None,
        check=lambda _flag, logs: tuple(logs or ()),
        action="append",
        metavar="LOG",
        help="server log with EAGLE3_PROFILE lines: acceptance per draft position (repeatable)",
    )


def register(sub) -> None:
    r = sub.add_parser(
        "report",
        help="self-contained HTML report (tables, plots, provenance) of a results file",
    )
    add_flags(r, Options)
    r.set_defaults(read=partial(read_options, Options), run=run)


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import html_report

    return html_report.write_report(opts, console)
