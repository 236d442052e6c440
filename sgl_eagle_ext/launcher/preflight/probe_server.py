"""A warm SGLang for many probes: ~13 s of imports per probe become a fork.

One process per (python, start environment, installed SGLang files, probe script)
imports SGLang once (sglang_probe.py --serve) and answers each probe in a child forked
from it, in the probe's own environment and working directory: the answer
sglang_probe.py gives as a one-off subprocess, from the same code.

    broker = Broker(DIR).start()            # in a process that outlives the asks
    os.environ["EAGLE_EXT_PROBE_SERVER"] = DIR   # for it and every process it starts
    ...
    broker.close()                          # its warm processes end with it

(the test suite runs one per session: tests/conftest.py).

ask_sglang asks here first. Anything short of an answer (no broker, a python that
cannot serve, a child that died) falls back to the one-off subprocess, which gives the
same answer or says why not in its own words. The broker starts the warm processes as
its own children, never the asking process's: a launcher leaves nothing behind.
Environments travel over the socket without secret-looking names (probe_cache).

Each warm process holds 0.4-0.6 GiB (SGLang imported), and the test suite's launches
use about ten start environments: the broker keeps MAX_WARM alive (one more while two
start at once), retiring the least recently asked (its socket removed: it finishes what
it accepted, then exits; its next ask starts it again). Without the cap, five and eight
alive in two suites running side by side left a 23 GiB machine paging.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from sgl_eagle_ext.launcher.preflight import probe_cache
from sgl_eagle_ext.launcher.preflight.sglang_probe import TAG

VAR = "EAGLE_EXT_PROBE_SERVER"
BROKER = "broker.sock"
PROBE = Path(__file__).with_name("sglang_probe.py")
STARTUP_S = 240.0  # importing SGLang's model registry on a busy CPU
MAX_WARM = 3


def identity(python: str, start_key: str, src: str | None) -> str:
    """What a warm process fixed when it started: the same for every probe it answers."""
    material = [
        python,
        os.path.realpath(python),
        start_key,
        src,
        hashlib.sha256(PROBE.read_bytes()).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(material).encode()).hexdigest()[:24]


def _plain(env: Mapping[str, str]) -> dict:
    return {k: v for k, v in env.items() if not probe_cache.looks_secret(k)}


def _exchange(path: str, msg: dict, timeout: float) -> tuple[socket.socket, object]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(max(timeout, 0.1))
    try:
        s.connect(path)
        s.sendall(json.dumps(msg).encode() + b"\n")
    except BaseException:
        s.close()
        raise
    return s, s.makefile("rb")


def ask(
    python: str, request: dict, env: Mapping[str, str], cwd: str, ident: str, timeout: float
) -> str | None:
    """The warm answer's line (TAG + JSON), "timeout", or None: ask the subprocess."""
    folder = os.environ.get(VAR)
    if not folder or not ident:
        return None
    deadline = time.monotonic() + timeout
    hello = {"identity": ident, "python": python, "env": _plain(env), "cwd": cwd}
    try:
        s, f = _exchange(str(Path(folder) / BROKER), hello, timeout)
        with s, f:
            where = json.loads(f.readline() or "{}").get("socket")
        if not where:
            return None
        s, f = _exchange(where, {**hello, "request": request}, deadline - time.monotonic())
        with s, f:
            first = f.readline().decode()
            if not first.startswith("PID "):
                return None
            child = int(first.split()[1])
            try:
                line = f.readline().decode()
            except TimeoutError:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
                return "timeout"
    except (OSError, ValueError):
        return None  # no broker, or it went away: the subprocess asks
    return line if line.startswith(TAG) else None


class Broker:
    """Starts and keeps the warm processes; tells each asker its process's socket."""

    def __init__(self, folder: str | Path, max_warm: int = MAX_WARM):
        self.folder = Path(folder)
        self.max_warm = max_warm
        # identity -> (socket, its process); (None, None): that python cannot serve
        self._known: dict[str, tuple[str | None, subprocess.Popen | None]] = {}
        self._asked: dict[str, float] = {}  # identity -> when it was last asked for
        self._procs: list[subprocess.Popen] = []
        self._count = 0
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def start(self) -> Broker:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.folder / BROKER))
        self._sock.listen(64)
        threading.Thread(target=self._serve, daemon=True, name="probe-broker").start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            try:
                hello = json.loads(f.readline())
                where = self._warm(hello)
                f.write(json.dumps({"socket": where}).encode() + b"\n")
                f.flush()
            except (OSError, ValueError, KeyError):
                pass

    def _warm(self, hello: dict) -> str | None:
        ident = str(hello["identity"])
        with self._lock:
            lock = self._locks.setdefault(ident, threading.Lock())
        with lock:
            with self._lock:
                self._asked[ident] = time.monotonic()
                where, proc = self._known.get(ident, (None, None))
                # a warm process that ended (idle for its timeout, killed, retired) is
                # started again
                start = ident not in self._known or (proc is not None and proc.poll() is not None)
                if start:
                    self._make_room(ident)
            if start:
                where, proc = self._spawn(hello)
                with self._lock:
                    self._known[ident] = (where, proc)
            return where

    def _make_room(self, keep: str) -> None:
        """Leave at most max_warm - 1 warm processes besides `keep`'s, the most recently
        asked (self._lock held). A retired one loses its socket: it answers what it has
        accepted and exits; an asker that was just told that socket asks the subprocess."""
        live = [i for i, (_, p) in self._known.items() if i != keep and p and p.poll() is None]
        live.sort(key=lambda i: self._asked.get(i, 0.0))
        for ident in live[: max(len(live) - (self.max_warm - 1), 0)]:
            where, _ = self._known.pop(ident)
            Path(where).unlink(missing_ok=True)

    def _spawn(self, hello: dict) -> tuple[str | None, subprocess.Popen | None]:
        with self._lock:
            self._count += 1
            path = str(self.folder / f"{self._count}.sock")  # short: 108 bytes at most
        try:
            with open(path.removesuffix(".sock") + ".log", "wb") as log:  # why it cannot serve
                proc = subprocess.Popen(
                    [hello["python"], str(PROBE), "--serve", path],
                    env=dict(hello["env"]),
                    cwd=hello["cwd"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                )
        except OSError:
            return None, None
        self._procs.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], STARTUP_S)
        if ready and proc.stdout.readline().strip() == b"READY":
            return path, proc
        _kill(proc)
        return None, None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            (self.folder / BROKER).unlink(missing_ok=True)
        for path in self.folder.glob("*.sock"):  # the warm processes see it and exit
            path.unlink(missing_ok=True)
        for proc in self._procs:
            _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
    if proc.stdout:
        proc.stdout.close()
