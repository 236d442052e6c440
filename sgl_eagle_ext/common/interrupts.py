"""SIGTERM handled like Ctrl-C: a sweep stopped by `kill` (or a service manager)
records the level in progress as interrupted, as Ctrl-C does, instead of dying with
it unrecorded. The handler re-raises the signal as SIGINT, so whatever handles
Ctrl-C (asyncio.run cancelling its task, a KeyboardInterrupt) handles it.

A command started with SIGINT ignored (a shell script's `cmd &` ignores it, and the
child inherits that) would then ignore `kill` too: inside, SIGINT gets Python's own
handler back, so SIGTERM always stops the run with its results recorded."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager


def _as_sigint(_signum, _frame) -> None:
    os.kill(os.getpid(), signal.SIGINT)


@contextmanager
def sigterm_as_sigint():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _as_sigint)
    old_int = signal.getsignal(signal.SIGINT)
    if old_int == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        if old_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, old_int)
