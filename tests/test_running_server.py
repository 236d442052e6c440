"""launcher.start(plan) -> RunningServer (launcher/running.py), on a stand-in server
(tests/fakes/fake_sglang.py, started as the plan's server command): readiness from
/health_generate on our own process tree, each rank's NCCL line collected, the log
written, a failed start stopped and reported with its log's last lines, and stop()
ending the tree. (The real server through the same code: the launcher's server tests.)"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from sgl_eagle_ext.common import http, nccl_line, ports
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_process import EXIT_SERVER_FAILED, StartupFailed
from sgl_eagle_ext.launcher import plan, running

FAKE = Path(__file__).resolve().parent / "fakes" / "fake_sglang.py"
V23 = "0.5.23"


def launch(port: int) -> plan.LaunchPlan:
    return plan.build(
        plan.LaunchRequest(
            preset="baseline",
            model_path="org/some-model",  # not read: the stand-in serves no model
            sglang_version=V23,
            extra=("--port", str(port)),
        )
    )


def stand_in(port: int, nccl_env: dict[str, str], exit_first: bool = False) -> list[str]:
    """A server command: one NCCL line per 'rank', then the fake SGLang (or an exit)."""
    code = (
        "import os, runpy, sys\n"
        f"for rank in (0, 1):\n"
        f"    print({nccl_line.format_line('RANK', 0, nccl_env)!r}.replace('RANK', str(rank)),"
        " flush=True)\n"
        + ("sys.exit(7)\n" if exit_first else "")
        + f"sys.argv = [{str(FAKE)!r}, '--port', '{port}']\n"
        f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
    )
    return [sys.executable, "-c", code]


def test_start_waits_for_readiness_collects_nccl_and_stop_ends_the_tree(tmp_path):
    port = ports.pick()
    log = tmp_path / "server.log"
    srv = running.start(
        launch(port),
        running.StartOptions(log_path=log, preflight=False),
        command=stand_in(port, {"NCCL_PROTO": "LL", "PATH": "/bin"}),
    )
    with srv:
        assert srv.alive() and srv.url == f"http://127.0.0.1:{port}"
        assert srv.nccl == {"0": {"NCCL_PROTO": "LL"}, "1": {"NCCL_PROTO": "LL"}}
        table, warnings = srv.nccl_table()
        assert "rank 0" in table and "rank 1" in table
        print(f"ready in {srv.startup_s:.1f} s")
        pid = srv.pid
    assert not srv.alive() and srv.returncode() is not None
    assert not psutil.pid_exists(pid)  # stopped and reaped
    assert "fake SGLang on" in log.read_text()


def test_a_server_that_dies_while_starting_is_reported_and_stopped(tmp_path):
    port = ports.pick()
    with pytest.raises(StartupFailed) as e:
        running.start(
            launch(port),
            running.StartOptions(log_path=tmp_path / "s.log", preflight=False),
            command=stand_in(port, {}, exit_first=True),
        )
    assert e.value.code == EXIT_SERVER_FAILED
    assert "exited with code 7" in str(e.value)
    assert "EAGLE_EXT_NCCL rank=1" in str(e.value)  # the log's last lines come with it


def test_a_taken_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UserError):
            running.start(
                launch(port),
                running.StartOptions(log_path=tmp_path / "s.log", preflight=False),
                command=[sys.executable, "-c", "raise SystemExit('must not run')"],
            )
    assert not (tmp_path / "s.log").exists()


def test_a_script_that_cannot_start_its_server_ends_with_one_line(tmp_path, capsys):
    """start_or_exit (benchmarks/): the failure as one line naming the server and its log."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        log = tmp_path / "s.log"
        with pytest.raises(SystemExit) as e:
            running.start_or_exit(launch(s.getsockname()[1]), log, "the 2-step arm")
    assert str(e.value).startswith("the 2-step arm did not start: ")
    assert "in use" in str(e.value) and str(e.value).endswith(f"; see {log}")
    assert not log.exists()


# -- bench's arms (tools/bench/arms.py): the same start, in a thread ------------------


@pytest.fixture
def stand_in_arms(monkeypatch):
    """arms' servers are the stand-in (the plan, checks and readiness stay real)."""
    from sgl_eagle_ext.tools.bench import arms

    real = running.launch
    commands = {}

    def launch_stand_in(plan_, options):
        return real(plan_, options, command=commands.get(plan_.port))

    monkeypatch.setattr(running, "launch", launch_stand_in)
    return arms, commands


def arm_plan(arms, port: int, log: Path):
    p = launch(port)
    return arms.ArmPlan("A", "baseline", ["--preset", "baseline"], {}, launch=p, log_file=log)


def test_an_arm_starts_in_process_and_stops_its_whole_tree(stand_in_arms, tmp_path):
    arms, commands = stand_in_arms
    port = ports.pick()
    commands[port] = stand_in(port, {"NCCL_PROTO": "LL"})
    proc = arms.LauncherProcess(arm_plan(arms, port, tmp_path / "a.log"))
    try:
        assert proc.wait_ready(60) == f"http://127.0.0.1:{port}"
        pid = proc.proc.pid
        # the server outlives its start: the parent-death signal follows the thread that
        # started it, which therefore lives until stop()
        time.sleep(1.5)
        assert proc.alive() and psutil.pid_exists(pid)
        assert http.request(f"{proc.url}/health").status == 200
        assert any("NCCL_PROTO" in line for line in proc.lines)  # the rank table, kept
    finally:
        proc.stop()
    assert proc.stopped_cleanly and not psutil.pid_exists(pid)
    assert "fake SGLang on" in (tmp_path / "a.log").read_text()


def test_an_arm_whose_server_dies_or_is_refused_fails_with_its_kind(stand_in_arms, tmp_path):
    arms, commands = stand_in_arms
    port = ports.pick()
    commands[port] = stand_in(port, {}, exit_first=True)
    proc = arms.LauncherProcess(arm_plan(arms, port, tmp_path / "a.log"))
    with pytest.raises(arms.ArmFailed) as e:
        proc.wait_ready(60)
    assert e.value.kind == "exited" and "exited with code 7" in str(e.value)
    proc.stop()
    with socket.socket() as s:  # the port taken: the launcher's refusal, exit 2
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        proc = arms.LauncherProcess(arm_plan(arms, taken, tmp_path / "b.log"))
        with pytest.raises(arms.ArmFailed) as e:
            proc.wait_ready(60)
    assert e.value.kind == "refused" and e.value.code == 2
    assert proc.stop() is None and proc.proc is None  # nothing was started


def test_an_arm_stopped_while_it_starts_leaves_nothing(stand_in_arms, tmp_path):
    arms, commands = stand_in_arms
    port = ports.pick()
    # a server that never becomes ready (it sleeps): stopped by the caller's timeout
    commands[port] = [sys.executable, "-c", "import time; time.sleep(600)"]
    proc = arms.LauncherProcess(arm_plan(arms, port, tmp_path / "a.log"))
    with pytest.raises(arms.ArmFailed) as e:
        proc.wait_ready(3)
    assert e.value.kind == "not_ready"
    assert proc.stopped_cleanly and not proc.alive()
