"""The warm-probe client (launcher/preflight/probe_server.py) against fake sockets, and
the suite's broker (tests/probe_broker.py) against a fake python: no SGLang here.

What a socket named in EAGLE_EXT_PROBE_SERVER says is untrusted: the PID it names is
signalled only if this process started it (never -1, 1, this process, its parent or a
stranger); what it is sent is the allow-listed environment (common/env_allow.py); the
ask ends within its deadline however slowly the socket trickles, and a warm process
that never starts answering is left for the subprocess well before the deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from sgl_eagle_ext.common import env_allow, proctree
from sgl_eagle_ext.launcher.preflight import ask_sglang, probe_server
from tests.probe_broker import Broker

REAL_KILL = os.kill  # the tests' own clean-up, past the `signals` recorder
SECRETS = {
    "DATABASE_URL": "postgres://u:CANARY-pw@h/db",
    "MYSQL_PWD": "CANARY-mysql",
    "HF_TOKEN": "CANARY-hf",
    "EAGLE_EXT_API_KEY": "CANARY-key",
    "AWS_SECRET_ACCESS_KEY": "CANARY-aws",
    "SOME_APP_SETTING": "CANARY-app",
}


class FakeProbe:
    """A broker socket and a warm socket in threads: the broker names the warm socket;
    the warm one answers with `first` (e.g. "PID 1"), then `then` (a callable given the
    connection). Every byte received is kept."""

    def __init__(self, first: str | None, then):
        self.folder = Path(tempfile.mkdtemp(prefix="fake-probe-"))
        self.received: list[bytes] = []
        self.first, self.then = first, then
        self.stop = threading.Event()
        self._socks = []
        warm = self._listen(self.folder / "1.sock", self._warm)
        self._listen(self.folder / probe_server.BROKER, self._broker(str(warm)))

    def _listen(self, path: Path, handle) -> Path:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.listen(8)
        self._socks.append(s)

        def loop():
            while True:
                try:
                    conn, _ = s.accept()
                except OSError:
                    return
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return path

    def _read_line(self, conn) -> bytes:
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
        self.received.append(buf)
        return buf

    def _broker(self, where: str):
        def handle(conn):
            with conn:
                self._read_line(conn)
                conn.sendall(json.dumps({"socket": where}).encode() + b"\n")

        return handle

    def _warm(self, conn):
        with conn:
            self._read_line(conn)
            if self.first is not None:
                conn.sendall(self.first.encode() + b"\n")
            self.then(conn, self.stop)

    def close(self):
        self.stop.set()
        for s in self._socks:
            s.close()


def trickle(conn, stop):
    """A byte every 0.1 s, never a newline: no per-read timeout ever trips."""
    while not stop.wait(0.1):
        try:
            conn.sendall(b"x")
        except OSError:
            return


def silent(conn, stop):
    stop.wait(60)


@pytest.fixture
def fake(monkeypatch):
    made = []

    def make(first, then):
        f = FakeProbe(first, then)
        made.append(f)
        monkeypatch.setenv(probe_server.VAR, str(f.folder))
        return f

    yield make
    for f in made:
        f.close()


@pytest.fixture
def signals(monkeypatch):
    """Every signal this process sends, recorded and NOT sent (a broken client would
    otherwise signal -1: every process of the user)."""
    sent = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append(("kill", pid, sig)))
    monkeypatch.setattr(os, "killpg", lambda pid, sig: sent.append(("killpg", pid, sig)))
    return sent


def stranger() -> psutil.Process:
    """A process this one did not start (its parent, a shell, exited: re-parented)."""
    out = subprocess.run(
        ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
    )
    p = psutil.Process(int(out.stdout))
    assert os.getpid() not in {a.pid for a in p.parents()}
    return p


def ask(timeout: float) -> tuple[str | None, float]:
    t0 = time.monotonic()
    got = probe_server.ask(sys.executable, {"launches": []}, {}, os.getcwd(), "ident", timeout)
    return got, time.monotonic() - t0


def test_a_foreign_pid_named_by_the_socket_is_never_signalled(fake, signals):
    other = stranger()
    try:
        for pid in (other.pid, -1, 0, 1, os.getpid(), os.getppid(), "abc", 99999999):
            fake(f"PID {pid}", trickle)
            got, took = ask(timeout=0.6)
            assert got == "timeout", pid
        assert signals == []
        assert other.is_running()
        for pid in (other.pid, -1, 1, os.getpid(), os.getppid()):
            assert proctree.own(pid) is None and not proctree.signal_own(pid, signal.SIGKILL)
        # a number whose start time is not the one this process knows: refused too
        mine = subprocess.Popen(["sleep", "60"])
        try:
            assert not proctree.signal_own(mine.pid, signal.SIGKILL, started=1.0)
            assert signals == []
        finally:
            REAL_KILL(mine.pid, signal.SIGKILL)
            mine.wait()
    finally:
        REAL_KILL(other.pid, signal.SIGKILL)


def test_the_answering_child_is_killed_when_this_process_started_it(fake):
    """The suite's case: the broker runs in this process, so the warm child named by
    the socket is one of its descendants (checked by PID and start time)."""
    mine = subprocess.Popen(["sleep", "60"])
    try:
        fake(f"PID {mine.pid}", trickle)
        assert ask(timeout=0.6)[0] == "timeout"
        assert mine.wait(10) == -signal.SIGKILL
    finally:
        if mine.poll() is None:
            mine.kill()
            mine.wait()


def test_a_trickling_socket_ends_the_wait_within_the_deadline(fake):
    fake("PID 1", trickle)
    got, took = ask(timeout=1.0)
    assert got == "timeout" and took < 1.0 + 3.0, took
    # asked through ask_sglang, the same deadline holds for the warm ask and the
    # subprocess together, and the message states it
    t0 = time.monotonic()
    reply, why, _ = ask_sglang._probe(sys.executable, {"launches": []}, {}, 1.0, None, "i")
    assert reply is None and "timed out after 1 s" in why and time.monotonic() - t0 < 4.0


def test_a_warm_process_that_never_answers_falls_back_well_before_the_deadline(fake, monkeypatch):
    monkeypatch.setattr(probe_server, "HANDSHAKE_S", 0.3)
    fake(None, silent)  # accepts, reads, never says its PID (stopped: SIGSTOP)
    got, took = ask(timeout=30.0)
    assert got is None and took < 30.0  # None: ask_sglang runs the subprocess


def test_the_socket_sees_only_allow_listed_variables(fake, monkeypatch):
    answer = {"version": "0.5.23", "launches": [{}]}

    def reply(conn, stop):
        conn.sendall(("PROBE " + json.dumps(answer) + "\n").encode())

    probe = fake("PID 1", reply)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("EAGLE_EXT_PROBE_CACHE", "0")
    launch = ask_sglang.Launch(["--model-path", "m"], {**os.environ, "OTHER_DSN": "CANARY-x"})
    found = {"sglang": "0.5.23", "src": None}
    (got,) = ask_sglang.ask_launches(sys.executable, [launch], timeout=10, found=found)
    assert got[1] == "", got
    sent = b"".join(probe.received).decode()
    assert "CANARY" not in sent and "postgres" not in sent
    hello = json.loads(probe.received[0])
    assert hello["env"] and all(env_allow.allowed_name(k) for k in hello["env"])
    assert "PATH" in hello["env"]  # what the probe needs still goes
    request = json.loads(probe.received[1])["request"]
    assert all(env_allow.allowed_name(k) for c in request["launches"] for k in c["env"])


FAKE_SERVE = """
import os, socket, sys, time
time.sleep(0.5)  # the starts overlap
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
print("READY", flush=True)
while os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""


def test_the_broker_keeps_its_cap_and_takes_over_a_stale_socket(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="brk-"))
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(folder / probe_server.BROKER))
    stale.close()  # a broker killed -9: its socket file stays, nobody listens
    python = tmp_path / "python"
    script = tmp_path / "serve.py"
    script.write_text(FAKE_SERVE)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$3"\n')
    python.chmod(0o755)
    broker = Broker(folder, max_warm=2).start()
    try:
        with pytest.raises(RuntimeError, match="already answers"):
            Broker(folder).start()  # a live broker's socket is not taken over
        alive_at_spawn: list[int] = []
        real = broker._spawn

        def spawn(hello):
            alive_at_spawn.append(len(broker.alive()))
            return real(hello)

        broker._spawn = spawn

        def hello(i):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(folder / probe_server.BROKER))
                msg = {"identity": f"id{i}", "python": str(python), "env": {}, "cwd": "/"}
                s.sendall(json.dumps(msg).encode() + b"\n")
                s.makefile("rb").readline()

        for _ in range(2):
            threads = [threading.Thread(target=hello, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        assert alive_at_spawn and max(alive_at_spawn) <= 1, alive_at_spawn
        assert len(broker.alive()) <= 2
    finally:
        broker.close()
    assert broker.alive() == []


def test_the_broker_and_the_serve_mode_are_the_suites_not_the_packages():
    from sgl_eagle_ext.launcher.preflight import sglang_probe

    assert not hasattr(probe_server, "Broker")
    assert "--serve" not in Path(sglang_probe.__file__).read_text()
    assert Path(__file__).with_name("probe_serve.py").is_file()
