"""bench speculation: accept length per input-length bucket and per draft position."""

from __future__ import annotations

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
    s.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import spec_view

    return spec_view.main(args, console)
