"""The test suite's warm SGLang for many probes: ~13 s of imports per probe become a fork.

Only the suite starts one (tests/conftest.py, one per session; users run none): the
package keeps the client (launcher/preflight/probe_server.py), which asks here first
wherever EAGLE_EXT_PROBE_SERVER names a broker's folder.

One process per (python, start environment, installed SGLang files, probe script)
imports SGLang once (tests/probe_serve.py) and answers each probe in a child forked
from it, in the probe's own environment and working directory: the answer
sglang_probe.py gives as a one-off subprocess, from the same code.

    broker = Broker(DIR).start()                 # in a process that outlives the asks
    os.environ[probe_server.VAR] = DIR           # for it and every process it starts
    ...
    broker.close()                               # its warm processes end with it

The broker starts the warm processes as its own children, never the asking
process's: a launcher leaves nothing behind. Each holds 0.4-0.6 GiB (SGLang imported)
and the suite's launches use about ten start environments: at most max_warm are alive
or starting at any moment. A new one retires the least recently asked (its socket
removed: it finishes what it accepted and exits, and the broker waits for that before
starting another); when every slot is starting, the asker is told no socket and asks
the one-off subprocess. Without the cap, five and eight alive in two suites running
side by side left a 23 GiB machine paging.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from sgl_eagle_ext.common import proctree
from sgl_eagle_ext.launcher.preflight.probe_server import BROKER, PROBE

SERVE = Path(__file__).with_name("probe_serve.py")
STARTUP_S = 240.0  # importing SGLang's model registry on a busy CPU
RETIRE_S = 60.0  # a retired process finishes the answers it accepted, then exits
MAX_WARM = 3


class Broker:
    """Starts and keeps the warm processes; tells each asker its process's socket."""

    def __init__(self, folder: str | Path, max_warm: int = MAX_WARM):
        self.folder = Path(folder)
        self.max_warm = max(1, max_warm)
        # identity -> (socket, its process); (None, None): that python cannot serve
        self._known: dict[str, tuple[str | None, subprocess.Popen | None]] = {}
        self._asked: dict[str, float] = {}  # identity -> when it was last asked for
        self._starting: set[str] = set()
        self._procs: list[subprocess.Popen] = []
        self._count = 0
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def start(self) -> Broker:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        path = str(self.folder / BROKER)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _take_stale(path)
            self._sock.bind(path)
        except BaseException:
            self._sock.close()
            raise
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
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
                if not start:
                    return where
                retired = self._make_room(ident)
                if retired is None:
                    return None  # every slot is starting: the asker's subprocess answers
                self._known.pop(ident, None)
                self._starting.add(ident)
            try:
                for old in retired:
                    _retire(old)
                where, proc = self._spawn(hello)
            finally:
                with self._lock:
                    self._starting.discard(ident)
            with self._lock:
                self._known[ident] = (where, proc)
            return where

    def _make_room(self, keep: str) -> list[subprocess.Popen] | None:
        """Room for `keep`'s process within max_warm (self._lock held): the least
        recently asked live ones retired (their sockets removed; returned, to be waited
        for), or None when the starting ones alone fill every slot."""
        if len(self._starting) >= self.max_warm:
            return None
        live = [i for i, (_, p) in self._known.items() if i != keep and p and p.poll() is None]
        live.sort(key=lambda i: self._asked.get(i, 0.0))
        over = len(live) + len(self._starting) + 1 - self.max_warm
        retired = []
        for ident in live[: max(over, 0)]:
            where, proc = self._known.pop(ident)
            Path(where).unlink(missing_ok=True)
            retired.append(proc)
        return retired

    def _spawn(self, hello: dict) -> tuple[str | None, subprocess.Popen | None]:
        with self._lock:
            self._count += 1
            path = str(self.folder / f"{self._count}.sock")  # short: 108 bytes at most
        try:
            with open(path.removesuffix(".sock") + ".log", "wb") as log:  # why it cannot serve
                proc = subprocess.Popen(
                    [hello["python"], str(SERVE), "--serve", path, str(PROBE)],
                    env=dict(hello["env"]),  # allow-listed by the client
                    cwd=hello["cwd"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,
                )
        except (OSError, TypeError, ValueError):
            return None, None
        with self._lock:
            self._procs.append(proc)
        ready, _, _ = select.select([proc.stdout], [], [], STARTUP_S)
        if ready and proc.stdout.readline().strip() == b"READY":
            return path, proc
        _kill(proc)
        return None, None

    def alive(self) -> list[subprocess.Popen]:
        with self._lock:
            return [p for p in self._procs if p.poll() is None]

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            (self.folder / BROKER).unlink(missing_ok=True)
        for path in self.folder.glob("*.sock"):  # the warm processes see it and exit
            path.unlink(missing_ok=True)
        for proc in list(self._procs):
            _kill(proc)


def _take_stale(path: str) -> None:
    """A broker socket left by a broker that died (kill -9) is removed; one that a
    live broker still answers on is not taken over."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except FileNotFoundError:
        return
    except OSError:  # refused: nobody listens there any more
        Path(path).unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise RuntimeError(f"a probe broker already answers on {path}")


def _retire(proc: subprocess.Popen) -> None:
    """Wait for a retired process (its socket gone) to finish and exit."""
    try:
        proc.wait(RETIRE_S)
    except subprocess.TimeoutExpired:
        pass
    _kill(proc)  # killed if still alive; its pipe closed


def _kill(proc: subprocess.Popen) -> None:
    if proc.returncode is None:  # not reaped yet: its number is still its own
        proctree.killpg(proc.pid, signal.SIGKILL)  # its group (its own session)
    proc.wait()
    if proc.stdout:
        proc.stdout.close()
