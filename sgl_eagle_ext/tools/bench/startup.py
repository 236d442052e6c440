"""Progress while an arm's server starts (minutes on a GPU host): the launcher's
startup phase, read from the server log it writes, with the elapsed time.

    [B] loading weights (0:12)
    [B] capturing target CUDA graphs (1:40)
    [B] still capturing target CUDA graphs (2:10)
    [B] READY after 2:31

The phases are the launcher's own (common/server_process.PHASES, matched on
SGLang's log lines), so bench and the launcher name a phase the same way.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sgl_eagle_ext.common.server_process import PHASES

POLL = 1.0  # seconds between looks at the log
STILL_EVERY = 30.0  # a "still <phase>" line this often while nothing changes
FIRST = "starting (preflight, importing SGLang)"


def clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


class LogPhase:
    """The phase of a server from the lines appended to its log so far."""

    def __init__(self, path: Path | None):
        self.path = path
        self.offset = 0
        self.rest = ""
        self.phase = FIRST

    def poll(self) -> str:
        if self.path is None:
            return self.phase
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                f.seek(self.offset)
                data = f.read()
                self.offset = f.tell()
        except OSError:
            return self.phase  # not written yet
        *lines, self.rest = (self.rest + data).replace("\r", "\n").split("\n")
        for line in lines:
            for pattern, phase in PHASES:
                if pattern.search(line):
                    self.phase = phase
                    break
        return self.phase


def wait_ready(proc, label: str, log_file: str | None, timeout: float | None, console) -> str:
    """proc.wait_ready(timeout), printing each new phase (and a reminder every
    STILL_EVERY seconds) with the elapsed time. Returns the URL; raises what
    wait_ready raises."""
    box: dict = {}

    def wait() -> None:
        try:
            box["url"] = proc.wait_ready(timeout)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t0 = time.monotonic()
    th = threading.Thread(target=wait, daemon=True)
    th.start()
    watch = LogPhase(Path(log_file) if log_file else None)
    shown, last = None, t0
    while True:
        th.join(POLL)
        now = time.monotonic()
        phase = watch.poll()
        if th.is_alive() and phase != shown:
            console.info(f"[{label}] {phase} ({clock(now - t0)})")
            shown, last = phase, now
        elif th.is_alive() and now - last >= STILL_EVERY:
            console.info(f"[{label}] still {phase} ({clock(now - t0)})")
            last = now
        if not th.is_alive():
            break
    if "error" in box:
        raise box["error"]
    console.info(f"[{label}] READY after {clock(time.monotonic() - t0)}")
    return box["url"]
