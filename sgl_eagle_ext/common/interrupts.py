"""SIGTERM (and SIGHUP: a closed terminal; SIGQUIT: Ctrl-\\; SIGUSR1) handled like
Ctrl-C: a sweep stopped by `kill` (or a service manager) records the level in progress
as interrupted, as Ctrl-C does, instead of dying with it unrecorded. The handler
re-raises the signal as SIGINT, so whatever handles Ctrl-C (asyncio.run cancelling its
task, a KeyboardInterrupt) handles it.

A command started with SIGINT ignored (a shell script's `cmd &` ignores it, and the
child inherits that) would then ignore `kill` too: inside, SIGINT gets Python's own
handler back, so SIGTERM always stops the run with its results recorded. A SIGHUP,
SIGQUIT or SIGUSR1 ignored at start (`nohup`) stays ignored.

`run(coro)` is asyncio.run for the tools: the kernel may hand a process-wide signal to
any thread (tqdm's monitor, a resolver), and then nothing wakes the main thread's event
loop, asleep in epoll for as long as its next timer (600 s was seen): a `kill` did not
stop `tune --live`. A wakeup fd the loop reads wakes it, and Python runs the handlers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager


def _as_sigint(_signum, _frame) -> None:
    os.kill(os.getpid(), signal.SIGINT)


# Signals that stop a run as Ctrl-C does; all but the first only when not ignored at start.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


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


def run(coro):
    """asyncio.run(coro), its loop woken by a signal whichever thread receives it."""
    return asyncio.run(_woken_by_signals(coro))


async def _woken_by_signals(coro):
    if threading.current_thread() is not threading.main_thread():
        return await coro  # no signal handler runs here
    loop = asyncio.get_running_loop()
    rsock, wsock = socket.socketpair()
    for s in (rsock, wsock):
        s.setblocking(False)
    loop.add_reader(rsock.fileno(), _drain, rsock)
    old = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
    try:
        return await coro
    finally:
        signal.set_wakeup_fd(old)
        loop.remove_reader(rsock.fileno())
        rsock.close()
        wsock.close()


async def gather_or_cancel(tasks: list[asyncio.Task]) -> bool:
    """Await every task; on a cancel (Ctrl-C, or one already pending on this task) cancel
    them all and wait for them to finish. True: interrupted."""
    try:
        if asyncio.current_task().cancelling():
            raise asyncio.CancelledError
        await asyncio.gather(*tasks)
        return False
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return True


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except OSError:  # BlockingIOError: drained
        pass


# How long a wait below sleeps at a stretch: the longest a signal taken by another
# thread waits for its handler.
SLICE_S = 0.25


def wait(event: threading.Event, timeout: float | None) -> bool:
    """event.wait(timeout), cut short by a signal whichever thread the kernel gives it
    to: Python runs handlers in the main thread only, and a main thread asleep in a lock
    wait is not woken when another thread (the server's starter, tqdm's monitor) takes
    the signal: `tune live` waited for READY before it stopped. Waiting in slices lets
    the handler run within SLICE_S."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
        if left <= 0:
            return event.is_set()
        if event.wait(left):
            return True
