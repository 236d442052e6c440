"""SIGTERM (and SIGHUP: a closed terminal; SIGUSR1) handled like Ctrl-C: a sweep stopped by `kill` (or a service manager)
records the level in progress as interrupted, as Ctrl-C does, instead of dying with
it unrecorded. The handler re-raises the signal as SIGINT, so whatever handles
Ctrl-C (asyncio.run cancelling its task, a KeyboardInterrupt) handles it.

A command started with SIGINT ignored (a shell script's `cmd &` ignores it, and the
child inherits that) would then ignore `kill` too: inside, SIGINT gets Python's own
handler back, so SIGTERM always stops the run with its results recorded. A SIGHUP or
SIGUSR1 ignored at start (`nohup`) stays ignored."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager


def _as_sigint(_signum, _frame) -> None:
    os.kill(os.getpid(), signal.SIGINT)


# Signals that stop a run as Ctrl-C does; the last two only when not ignored at start.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


@contextmanager
def sigterm_as_sigint():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in STOP_SIGNALS:
        was = signal.getsignal(sig)
        if sig != signal.SIGTERM and was == signal.SIG_IGN:
            continue  # nohup's choice is kept
        old[sig] = signal.signal(sig, _as_sigint)
    old_int = signal.getsignal(signal.SIGINT)
    if old_int == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, was in old.items():
            signal.signal(sig, was)
        if old_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, old_int)
