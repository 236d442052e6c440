"""bench speculation: accept length per input-length bucket and per draft position."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    s = sub.add_parser(
        "speculation",
        help="accept length per input-length bucket and per draft position (table and PNG)",
    )
    s.add_argument("file", help="JSONL written by --save-requests")
    s.add_argument(
        "--profile-log",
        action="append",
        metavar="LOG",
        help="server log with EAGLE3_PROFILE lines: the profiler's accept_hist too (repeatable)",
    )
    s.add_argument("-o", "--output", help="PNG path (default: next to the file)")
    s.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    file: Path  # FILE: --save-requests records
    profile_logs: list[Path]  # --profile-log LOG ...
    output: Path | None  # -o/--output (None: next to the file)


def read(args: argparse.Namespace) -> Options:
    return Options(
        file=Path(args.file),
        profile_logs=[Path(p) for p in args.profile_log or ()],
        output=Path(args.output) if args.output else None,
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import spec_view

    return spec_view.show(opts.file, opts.output, opts.profile_logs, console)
