"""Progress (tqdm bars on a terminal, plain lines with an ETA elsewhere) and console
output that --quiet silences.

Off a terminal (docker logs, CI, a pipe) a redrawn bar is noise or invisible, so
progress becomes one line every --progress-every seconds on stderr:
`progress c=10: 120/500 requests (24%), 1m02s elapsed, ETA 3m16s`.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

DEFAULT_EVERY = 30.0  # seconds between plain progress lines


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Lines:
    """tqdm's update/close, printed as a line at most every `every` seconds."""

    def __init__(self, total: float, desc: str, every: float, unit: str = "requests"):
        self.total, self.desc, self.every, self.unit = total, desc, every, unit
        self.n = 0
        self.t0 = self.last = time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.monotonic()
        if now - self.last < self.every or self.n >= self.total:
            return
        self.last = now
        elapsed = now - self.t0
        eta = elapsed / self.n * (self.total - self.n) if self.n else None
        print(
            f"progress {self.desc}: {self.n:.0f}/{self.total:.0f} {self.unit} "
            f"({self.n / self.total * 100:.0f}%), {_clock(elapsed)} elapsed, "
            f"ETA {_clock(eta) if eta is not None else '?'}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        pass


class Console:
    def __init__(
        self, quiet: bool = False, progress_every: float = DEFAULT_EVERY, bars: bool = True
    ):
        self.quiet = quiet
        self.progress_every = progress_every
        self.bars = bars  # False: --disable-tqdm (the results and notes still print)

    def bar(self, total: float, desc: str, seconds: bool = False):
        """Progress over `total` requests (or seconds): a tqdm bar on a terminal, plain
        lines off one, nothing when quiet."""
        if not self.quiet and self.bars and not sys.stderr.isatty():
            return Lines(total, desc, self.progress_every, "seconds" if seconds else "requests")
        return tqdm(
            total=total,
            desc=desc,
            unit="s" if seconds else "req",
            leave=False,
            disable=self.quiet or not self.bars,
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
    def error(msg: str) -> None:
        """A failure the command survives (one arm of a compare): always printed."""
        print(f"error: {msg}", file=sys.stderr, flush=True)

    @staticmethod
    def warn(msg: str) -> None:
        print(f"warning: {msg}", file=sys.stderr, flush=True)
