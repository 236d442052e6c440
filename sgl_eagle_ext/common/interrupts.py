"""SIGTERM handled like Ctrl-C: a sweep stopped by `kill` (or a service manager)
records the level in progress as interrupted, as Ctrl-C does, instead of dying with
it unrecorded. The handler re-raises the signal as SIGINT, so whatever handles
Ctrl-C (asyncio.run cancelling its task, a KeyboardInterrupt) handles it."""

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
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
