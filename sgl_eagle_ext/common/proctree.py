"""Process-tree facts and signals (psutil), shared by the launcher, bench ab,
the router wrapper and the health check."""

from __future__ import annotations

import ctypes
import os
import signal

import psutil


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM if its parent dies (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def tree_pids(pid: int) -> set[int]:
    """`pid` and all its descendants, alive now (empty if `pid` is gone)."""
    try:
        root = psutil.Process(pid)
        return {root.pid} | {c.pid for c in root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def is_alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def send(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
