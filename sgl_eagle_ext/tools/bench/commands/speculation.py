"""bench speculation: accept length per input-length bucket and per draft position."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sgl_eagle_ext.common.declared_flags import add_flags, as_path, as_paths, flag, read_options
from sgl_eagle_ext.tools.bench.progress import Console


@dataclass(frozen=True)
class Options:
    file: Path = flag("FILE", check=as_path, help="JSONL written by --save-requests")
    profile_logs: tuple[Path, ...] = flag(
        "--profile-log",
        default=(),
        cli_default=None,
        check=as_paths,
        action="append",
        metavar="LOG",
        help="server log with EAGLE3_PROFILE lines: the profiler's accept_hist too (repeatable)",
    )
    output: Path | None = flag(
        "-o", "--output", check=as_path, help="PNG path (default: next to the file)"
    )


def register(sub) -> None:
    s = sub.add_parser(
        "speculation",
        help="accept length per input-length bucket and per draft position (table and PNG)",
    )
    add_flags(s, Options)
    s.set_defaults(read=partial(read_options, Options), run=run)


def run(opts: Options, extra: list[str], console: Console) -> int:
    from sgl_eagle_ext.tools.bench import spec_view

    return spec_view.show(opts.file, opts.output, list(opts.profile_logs), console)
