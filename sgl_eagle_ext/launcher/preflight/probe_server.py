"""The warm-probe client: ask a process that imported SGLang once, where one is offered.

The test suite runs a broker (tests/probe_broker.py) and names its folder in
EAGLE_EXT_PROBE_SERVER, for itself and every launcher it starts: one warm process per
(python, start environment, installed SGLang files, probe script) answers each probe
in a child forked from it, in the probe's own environment and working directory, from
the same code as the one-off subprocess (sglang_probe.py). Users run no broker: without
the variable, ask() returns None at once and ask_sglang runs the subprocess.

What the socket may say is untrusted. What leaves this process is the allow-listed
environment (common/env_allow.py), never more. The whole ask ends within its timeout
(every read bounded by the one deadline, however slowly the peer trickles); a warm
process that does not start answering within HANDSHAKE_S (stopped, gone) is left for
the subprocess. On the deadline the answering child named by the socket is killed
only if this process started it (proctree.own: a descendant, by PID and start time);
any other PID, -1 or 1 included, is never signalled: the child ends itself when this
side hangs up (tests/probe_serve.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from sgl_eagle_ext.common import env_allow, proctree
from sgl_eagle_ext.launcher.preflight.sglang_probe import TAG

VAR = "EAGLE_EXT_PROBE_SERVER"
BROKER = "broker.sock"
PROBE = Path(__file__).with_name("sglang_probe.py")
HANDSHAKE_S = 10.0  # a warm child says its PID right after the fork
LINE_CAP = 64 << 20  # far above any answer: a bound on a peer that streams without end


class Late(Exception):
    """The ask's deadline passed."""


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


class _Peer:
    """One unix-socket exchange: a JSON line sent, lines read back, every step bounded
    by the ask's deadline (and `soon`, a shorter one for the first line)."""

    def __init__(self, path: str, msg: dict, deadline: float):
        self.deadline = deadline
        self.buf = b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._bound(deadline)
            self.sock.connect(path)
            self._bound(deadline)
            self.sock.sendall(json.dumps(msg).encode() + b"\n")
        except BaseException:
            self.sock.close()
            raise

    def _bound(self, until: float) -> None:
        left = until - time.monotonic()
        if left <= 0:
            raise Late
        self.sock.settimeout(left)

    def line(self, until: float | None = None) -> str:
        until = min(until or self.deadline, self.deadline)
        while b"\n" not in self.buf:
            self._bound(until)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise Late from None
            if not chunk:
                return ""  # the peer hung up
            self.buf += chunk
            if len(self.buf) > LINE_CAP:
                raise ValueError("an answer line beyond the cap")
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace")

    def __enter__(self) -> _Peer:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def ask(
    python: str, request: dict, env: Mapping[str, str], cwd: str, ident: str, timeout: float
) -> str | None:
    """The warm answer's line (TAG + JSON), "timeout" (the deadline passed), or None:
    ask the subprocess (within what is left of `timeout`)."""
    folder = os.environ.get(VAR)
    if not folder or not ident:
        return None
    deadline = time.monotonic() + timeout
    hello = {"identity": ident, "python": python, "env": env_allow.allowed(env), "cwd": cwd}
    child = None
    try:
        with _Peer(str(Path(folder) / BROKER), hello, deadline) as broker:
            where = json.loads(broker.line() or "{}").get("socket")
        if not isinstance(where, str) or not where:
            return None
        with _Peer(where, {**hello, "request": request}, deadline) as warm:
            first = warm.line(time.monotonic() + HANDSHAKE_S).split()
            if len(first) < 2 or first[0] != "PID":
                return None
            child = proctree.own(int(first[1]) if first[1].lstrip("-").isdigit() else None)
            try:
                line = warm.line()
            except Late:
                if child is not None:  # ours (this process runs the broker): gone now
                    proctree.send(child, signal.SIGKILL)
                return "timeout"
    except Late:
        if child is None and time.monotonic() < deadline:
            return None  # no PID line within HANDSHAKE_S: a stopped or stuck warm process
        return "timeout"
    except (OSError, ValueError, AttributeError):
        return None  # no broker, or it went away, or said nonsense: the subprocess asks
    return line if line.startswith(TAG) else None
