"""Progress bars (tqdm on stderr) and console output that --quiet silences."""

from __future__ import annotations

import sys

from tqdm import tqdm


class Console:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet

    def bar(self, total: int, desc: str):
        """A progress bar over `total` requests; a no-op one when quiet or not a terminal."""
        disable = self.quiet or not sys.stderr.isatty()
        return tqdm(
            total=total,
            desc=desc,
            unit="req",
            leave=False,
            disable=disable,
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
        )

    def info(self, msg: str = "") -> None:
        """Chatter (warm-up, server start); silenced by --quiet."""
        if not self.quiet:
            print(msg, flush=True)

    @staticmethod
    def out(msg: str = "") -> None:
        """Results: always printed."""
        print(msg, flush=True)

    @staticmethod
    def warn(msg: str) -> None:
        print(f"warning: {msg}", file=sys.stderr, flush=True)
