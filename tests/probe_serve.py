"""The warm probe process the suite's broker starts (tests/probe_broker.py), run by the
python that will start the server:

    SGLANG_PYTHON tests/probe_serve.py --serve SOCKET PROBE

PROBE is the package's sglang_probe.py: this process imports SGLang once, then answers
each request on the unix socket SOCKET in a child forked from it (its own copy of every
module: no request sees another's state), with PROBE's own code, in the environment and
working directory the request names. It exits when SOCKET is removed or after
IDLE_EXIT_S without a request. A child whose asker hangs up (its deadline passed) ends
itself: the asker never signals it (launcher/preflight/probe_server.py).
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder (tests/) comes first on sys.path, where a module
# could shadow one SGLang imports: take it off before importing anything else.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib.util  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

IDLE_EXIT_S = 900.0
# What every answer imports: SGLang's argument parser, ModelConfig, and its model
# registry (every model module). A failure here is left for the answer to report.
WARM_MODULES = (
    "sglang",
    "sglang.srt.server_args",
    "sglang.srt.configs.model_config",
    "sglang.srt.models.registry",
    "sglang.srt.model_loader.utils",
)


def load_probe(path: str):
    """The package's sglang_probe.py as a module (its folder not put on sys.path)."""
    spec = importlib.util.spec_from_file_location("sglang_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _warm() -> None:
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except BaseException:
            pass


def _end_on_hangup(conn: socket.socket) -> None:
    """The asker sends nothing after its request: end of stream means it hung up."""
    try:
        conn.recv(1)
    except OSError:
        pass
    os._exit(1)


def _answer_in_child(conn: socket.socket, probe) -> None:
    """In the forked child: read the request line, answer it as the script would."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SGLang's own subprocesses are waited for
    status = 0
    try:
        with conn.makefile("rwb") as f:
            msg = json.loads(f.readline())
            f.write(f"PID {os.getpid()}\n".encode())
            f.flush()
            threading.Thread(target=_end_on_hangup, args=(conn,), daemon=True).start()
            os.environ.clear()
            os.environ.update(msg["env"])
            os.chdir(msg["cwd"])
            probe._own_environment()
            import random

            random.seed()  # as a fresh process would be (SGLang draws its random_seed)
            try:
                line = probe.TAG + json.dumps(probe.answer(msg["request"]))
            except BaseException as e:  # as the script would exit: the client says so
                line = f"ERROR {type(e).__name__}: {e}"
            f.write((line + "\n").encode())
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def serve(path: str, probe) -> None:
    """Answer requests on the unix socket `path` until it is removed or idle for
    IDLE_EXIT_S; prints READY once SGLang is imported and the socket listens."""
    _warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(64)
    sock.settimeout(1.0)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    last = time.monotonic()
    while os.path.exists(path) and time.monotonic() - last < IDLE_EXIT_S:
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        last = time.monotonic()
        conn.settimeout(None)
        if os.fork() == 0:
            sock.close()
            _answer_in_child(conn, probe)
        conn.close()
    sock.close()
    if os.path.exists(path):  # idle: the broker starts another on the next ask
        os.unlink(path)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--serve"] or len(sys.argv) != 4:
        sys.exit("usage: probe_serve.py --serve SOCKET PROBE")
    probe = load_probe(sys.argv[3])
    probe._own_environment()
    importlib.invalidate_caches()
    serve(sys.argv[2], probe)
