"""run_supervised, the supervision tail the launcher and the router share: whatever
ends the body (a failed start, SIGTERM, a normal return), the child's whole tree is
stopped and the exit code says why."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

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


def test_a_signal_between_the_fork_and_the_log_reader_stops_the_tree(child, capsys, monkeypatch):
    # CI once saw SIGINT land after Popen and before the reader thread started:
    # stop() then died on joining an unstarted thread and left the tree behind.
    forked: list[int] = []

    def interrupted_start(thread):
        forked.append(child.pid)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises here

    monkeypatch.setattr(server_process.threading.Thread, "start", interrupted_start)
    assert run_supervised(child, "prog", "widget", child.start) == 128 + signal.SIGINT
    assert "prog: SIGINT: stopping the widget process tree" in capsys.readouterr().err
    assert forked and gone(set(forked)) and not child.alive()


def test_a_child_that_exits_after_ready_is_a_failure(tmp_path, capsys):
    proc = ServerProcess([sys.executable, "-c", "raise SystemExit(7)"], None, tmp_path / "x.log")

    def body() -> int:
        proc.start()
        return serve_until_exit(proc, "prog", "widget")

    assert run_supervised(proc, "prog", "widget", body) == server_process.EXIT_SERVER_FAILED
    assert "prog: the widget exited with code 7" in capsys.readouterr().err


# -- the watchdog after HTTP is up (issue 24) ---------------------------------------------
ACCESS = '[2026-12-02 08:00:00] INFO:     127.0.0.1:5{i:04d} - "GET /health_generate HTTP/1.1" 503'
# a server that gets HTTP up, then logs only what the launcher's health polls cause
POLLED = (
    "import sys, time\n"
    "print('Uvicorn running on http://127.0.0.1:1 (Press CTRL+C to quit)', flush=True)\n"
    "for i in range(600):\n"
    f"    print({ACCESS!r}.format(i=i), flush=True)\n"
    "    time.sleep(0.05)\n"
)


def test_probe_lines_are_logged_but_not_progress(tmp_path):
    from sgl_eagle_ext.common import startup_phase

    assert startup_phase.is_probe_line(ACCESS.format(i=1))
    assert startup_phase.is_probe_line('INFO:  127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK')
    assert startup_phase.is_probe_line("[TP0] Health check failed. Server couldn't get a response")
    assert not startup_phase.is_probe_line('INFO: 127.0.0.1:1 - "POST /generate HTTP/1.1" 200')
    assert not startup_phase.is_probe_line('INFO: 127.0.0.1:1 - "GET /model_info HTTP/1.1" 200')

    proc = ServerProcess([sys.executable, "-c", POLLED], None, tmp_path / "p.log", echo=False)
    proc.start()
    try:
        while proc.probe_lines < 20:
            time.sleep(0.05)
        assert proc.phase == "HTTP up; warm-up generation"
        assert proc.stalled_for() >= 0.5  # 20 lines in ~1 s, none of them progress
        assert all("health_generate" not in t for t in proc.tail)  # the tail stays useful
    finally:
        proc.stop(grace=1)
    assert (tmp_path / "p.log").read_text().count("GET /health_generate") >= 20  # still logged


def test_a_stall_after_http_is_up_is_named_and_exits_3(tmp_path):
    from sgl_eagle_ext.launcher import readiness

    proc = ServerProcess([sys.executable, "-c", POLLED], None, tmp_path / "p.log", echo=False)
    proc.start()
    try:
        with pytest.raises(StartupFailed) as e:  # port 9: nothing answers, polls go on
            readiness.wait_ready(
                proc, "http://127.0.0.1:9", 9, api_key=None, stall_timeout=1.0,
                startup_timeout=0, poll=0.1,
            )  # fmt: skip
    finally:
        proc.stop(grace=1)
    assert e.value.code == EXIT_WATCHDOG
    text = str(e.value)
    assert "watchdog: no server log progress" in text
    assert "while HTTP up; warm-up generation" in text
    assert "logged by the server, last: no connection" in text, text


def test_startup_timeout_default_is_sized_from_the_phases():
    from sgl_eagle_ext.launcher import cli, readiness

    one = readiness.default_startup_timeout(1)
    assert one == readiness.WEIGHTS_S + readiness.JIT_S + readiness.CAPTURE_PER_STATE_S
    assert readiness.default_startup_timeout(6) - one == 5 * readiness.CAPTURE_PER_STATE_S
    assert cli.parser().parse_args([]).startup_timeout is None  # None: sized per launch
    assert f"{one:.0f} for a fixed preset" in cli.parser().format_help().replace("\n", " ")
    # the shipped presets pin their graph sizes as a list (cuda-graph-bs): the adaptive
    # preset's states are counted from it, and its budget holds them
    from sgl_eagle_ext.launcher import plan, running

    def budget(preset: str) -> float:
        req = plan.LaunchRequest(preset=preset, model_path="/m", draft_model_path="/d")
        return running.default_startup_timeout(plan.build(req))

    assert budget("eagle3-3step") == budget("baseline") == one
    assert budget("eagle3-adaptive") == readiness.default_startup_timeout(5)  # 3,0,1,2,5
    # bench and tune live wait for each server the launcher's estimate for it, unless told
    from sgl_eagle_ext.common.server_flags import ServerFlags

    assert ServerFlags.__dataclass_fields__["startup_timeout"].default is None


def test_adaptive_state_builds_are_a_phase_of_their_own():
    from sgl_eagle_ext.common.startup_phase import StartupPhase

    # SGLang 0.5.23's lines, in startup order, for a 3-step start with 2 more states
    lines = [
        "[TP0] Load weight begin. avail mem=90.00 GB",
        "[TP0] Capture cuda graph begin. This can take up to several minutes.",
        "[TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1, 2]",
        "[TP0] Capture draft extend CUDA graph begin. backend=full, bs=[1, 2]",
        "[TP0] Capture draft extend CUDA graph end. elapsed=1.00 s",
    ]
    phase = StartupPhase(adaptive_states=2)
    for line in lines:
        phase.feed(line)
    assert phase.phase == "CUDA graphs captured"
    # the next state's graphs: the same draft-extend capture again
    phase.feed("[TP0] Capture draft extend CUDA graph begin. backend=full, bs=[1, 2]")
    assert phase.phase == (
        "building adaptive runtime states (0 of 2 built): capturing draft-extend CUDA graphs"
    )
    phase.feed("[TP0] Built adaptive runtime state steps=0: elapsed=3.10s, mem=0.80GB")
    assert phase.phase == "building adaptive runtime states (1 of 2 built, last steps=0)"
    phase.feed("[TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1, 2]")
    assert phase.phase == (
        "building adaptive runtime states (1 of 2 built): capturing draft CUDA graphs"
    )
    phase.feed("[TP0] Capture draft decode CUDA graph end. elapsed=1.00 s")
    assert phase.phase == "building adaptive runtime states (1 of 2 built)"
    phase.feed("INFO:     Uvicorn running on http://127.0.0.1:30000")
    assert phase.phase == "HTTP up; warm-up generation"
    # without graphs (the CPU harness) only the Built lines say it
    cpu = StartupPhase()
    cpu.feed("[TP0] Built adaptive runtime state steps=5: elapsed=0.10s, mem=0.00GB")
    assert cpu.phase == "building adaptive runtime states (1 built, last steps=5)"


# A server that logs one line, then runs a silent child of the given name (a copy of
# `sleep`, so the kernel reports that name) for the given seconds, then hangs silently.
BUILDING = (
    "import os, shutil, subprocess, sys, time\n"
    "folder, name, secs = sys.argv[1:4]\n"
    "exe = os.path.join(folder, name)\n"
    "shutil.copy(shutil.which('sleep'), exe)\n"
    "print('Load weight begin', flush=True)\n"
    "child = subprocess.Popen([exe, secs])\n"
    "open(os.path.join(folder, 'child.pid'), 'w').write(str(child.pid))\n"
    "child.wait()\n"
    "time.sleep(3600)\n"
)


def _build_server(tmp_path, name: str, secs: str) -> tuple[ServerProcess, Path]:
    home = tmp_path / "home"  # no JIT cache of this machine's own in the picture
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    for var in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "SGLANG_CACHE_DIR"):
        env.pop(var, None)
    cmd = [sys.executable, "-c", BUILDING, str(tmp_path), name, secs]
    proc = ServerProcess(cmd, env, tmp_path / "b.log", echo=False)
    proc.start()
    return proc, tmp_path / "child.pid"


def _watchdog(proc) -> StartupFailed:
    from sgl_eagle_ext.launcher import readiness

    with pytest.raises(StartupFailed) as e:  # port 9: nothing answers
        readiness.wait_ready(
            proc, "http://127.0.0.1:9", 9, api_key=None, stall_timeout=1.0,
            startup_timeout=0, poll=0.1,
        )  # fmt: skip
    assert e.value.code == EXIT_WATCHDOG
    return e.value


def test_a_silent_compiler_in_the_tree_is_progress(tmp_path):
    """Issue 34: a first start's nvcc build logs nothing; while a compiler runs in the
    server's tree the stall watchdog (1 s here) does not fire, and the phase names it.
    The watchdog fires only once the 4 s build has ended."""
    proc, pid_file = _build_server(tmp_path, "nvcc", "4")
    try:
        failed = _watchdog(proc)
        child = int(pid_file.read_text())
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    finally:
        proc.stop(grace=1)
    assert f"JIT build: nvcc (pid {child})" in str(failed), failed


def test_a_silent_hang_without_a_compiler_still_stops(tmp_path):
    """The same silent child under a name no compiler has: the watchdog fires while it
    still runs."""
    proc, pid_file = _build_server(tmp_path, "sleeper", "60")
    try:
        failed = _watchdog(proc)
        child = int(pid_file.read_text())
        assert psutil.Process(child).is_running()  # fired during the child's life
    finally:
        proc.stop(grace=1)
    assert "JIT" not in str(failed) and "no server log progress" in str(failed)


def test_a_growing_jit_cache_is_progress(tmp_path):
    """Triton's cache gaining kernel folders (no process to see, no log line) is progress;
    the watchdog fires once the growth stops."""
    from sgl_eagle_ext.common import jit_watch

    cache = tmp_path / "triton"
    cache.mkdir()
    script = (
        "import os, sys, time\n"
        "print('Load weight begin', flush=True)\n"
        "for i in range(12):\n"
        "    os.mkdir(os.path.join(sys.argv[1], f'k{i}'))\n"
        "    time.sleep(0.3)\n"
        "time.sleep(3600)\n"
    )
    env = {**os.environ, "HOME": str(tmp_path), "TRITON_CACHE_DIR": str(cache)}
    assert cache in jit_watch.cache_dirs(env)
    proc = ServerProcess([sys.executable, "-c", script, str(cache)], env, tmp_path / "c.log",
                         echo=False)  # fmt: skip
    proc.start()
    try:
        failed = _watchdog(proc)
    finally:
        proc.stop(grace=1)
    assert len(list(cache.iterdir())) == 12  # the growth had ended when it fired
    assert f"JIT cache growing: {cache}" in str(failed), failed


def test_a_benchmark_script_killed_stops_the_servers_it_started(capsys):
    """benchmarks/ scripts run through running.script_main: a `kill` left an arm's
    server running under init (seen: adaptive_vs_fixed.py stopped by pkill)."""
    from sgl_eagle_ext.launcher import running

    stopped = []

    class Server:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            stopped.append(exc[0])

    def main():
        with Server():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        return 0

    assert running.script_main(main) == 130
    assert stopped == [KeyboardInterrupt]
    assert "servers this run started are stopped" in capsys.readouterr().err
