"""run_supervised, the supervision tail the launcher and the router share: whatever
ends the body (a failed start, SIGTERM, a normal return), the child's whole tree is
stopped and the exit code says why."""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil
import pytest

from sgl_eagle_ext.common import server_process
from sgl_eagle_ext.common.server_process import (
    EXIT_WATCHDOG,
    ServerProcess,
    StartupFailed,
    run_supervised,
    serve_until_exit,
)

# A child with a grandchild, both sleeping: the tree must go as a whole. Like SGLang's
# server, the child stops its own children on SIGTERM (else stop() waits its grace).
TREE = (
    "import signal, subprocess, sys, time; "
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "signal.signal(signal.SIGTERM, lambda *a: (g.terminate(), g.wait(), sys.exit(0))); "
    "print('child up', flush=True); time.sleep(120)"
)


@pytest.fixture
def child(tmp_path):
    proc = ServerProcess(
        [sys.executable, "-c", TREE], dict(os.environ), tmp_path / "c.log", echo=False
    )
    yield proc
    proc.stop(grace=1)


def started(proc: ServerProcess) -> set[int]:
    proc.start()
    while len(proc.tree_pids()) < 2 or not proc.tail:
        time.sleep(0.05)
    return set(proc.tree_pids())


def gone(pids: set[int]) -> bool:
    return not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_failed_start_prints_error_and_tail_and_stops_the_tree(child, capsys):
    pids: set[int] = set()

    def body() -> int:
        pids.update(started(child))
        raise StartupFailed("watchdog: no progress", EXIT_WATCHDOG)

    assert run_supervised(child, "prog", "widget", body) == EXIT_WATCHDOG
    err = capsys.readouterr().err
    assert "prog: error: watchdog: no progress" in err
    assert "prog: last widget log lines:\n  child up" in err
    assert "prog: stopping the widget process tree" in err
    assert gone(pids)


def test_sigterm_stops_the_tree_with_128_plus_signal(child, capsys):
    pids: set[int] = set()

    def body() -> int:
        pids.update(started(child))
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill` or a container stop would
        raise AssertionError("SIGTERM did not interrupt the body")

    assert run_supervised(child, "prog", "widget", body) == 128 + signal.SIGTERM
    assert "prog: SIGTERM: stopping the widget process tree" in capsys.readouterr().err
    assert gone(pids)
    assert signal.getsignal(signal.SIGTERM) is not server_process._raise_stopped  # restored


def test_a_child_that_exits_after_ready_is_a_failure(tmp_path, capsys):
    proc = ServerProcess([sys.executable, "-c", "raise SystemExit(7)"], None, tmp_path / "x.log")

    def body() -> int:
        proc.start()
        return serve_until_exit(proc, "prog", "widget")

    assert run_supervised(proc, "prog", "widget", body) == server_process.EXIT_SERVER_FAILED
    assert "prog: the widget exited with code 7" in capsys.readouterr().err
