"""Process-tree facts and signals (psutil), shared by the launcher, bench ab,
the router wrapper, the health check and the warm-probe client.

A signal goes only to what this process started: a psutil.Process found among its
own descendants (psutil refuses a PID reused since: it checks the start time), or the
process group of a child it started and has not yet reaped (the group's leader holds
the number). A number read from anywhere else (a socket, a file) is looked up with
own() first: PID <= 1, this process, and any process it did not start are refused."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess

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
        p.send_signal(sig)  # psutil: refused if the PID now names another process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def own(pid: object, started: float | None = None) -> psutil.Process | None:
    """`pid` as a process this one started (a live descendant), or None: a number that
    is not a PID > 1, this process itself, an ancestor, a stranger, or (with `started`,
    its start time as psutil reports it) a process started at another time."""
    if type(pid) is not int or pid <= 1 or pid == os.getpid():
        return None
    try:
        p = psutil.Process(pid)
        if started is not None and abs(p.create_time() - started) > 0.01:
            return None
        if os.getpid() not in {a.pid for a in p.parents()}:
            return None
    except (psutil.Error, OSError):
        return None
    return p


def signal_own(pid: object, sig: int, started: float | None = None) -> bool:
    """Send `sig` to `pid` only if this process started it (own()); True if sent."""
    p = own(pid, started)
    if p is None:
        return False
    try:
        p.send_signal(sig)
    except psutil.Error:
        return False
    return True


def killpg(pgid: int, sig: int) -> None:
    """Signal the process group of a child started with start_new_session, by its
    Popen's pid before it is reaped. Never group 0 or 1, nor this process's own group."""
    if type(pgid) is not int or pgid <= 1 or pgid == os.getpgrp():
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _own_group_child() -> None:
    """preexec_fn of run_in_group: dies with its parent too (a kill -9 of the tool)."""
    die_with_parent()


def run_in_group(cmd: list[str], timeout: float | None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in the child's own process group (start_new_session), the whole
    group killed on timeout and on every other way out (Ctrl-C, SIGTERM turned into an
    exception, an error here): a wrapper script that does not `exec` its python, or a
    loader that starts helpers, leaves nothing behind. Output is captured (text)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_own_group_child, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt, ...: re-raised
        _kill_group(proc)
        raise
    finally:
        # a grandchild that outlived its parent, still in the group: gone too
        killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)  # reap it and close the pipes
    except (subprocess.TimeoutExpired, OSError, ValueError):
        proc.kill()
        proc.wait()
