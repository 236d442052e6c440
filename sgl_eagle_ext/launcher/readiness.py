"""Readiness that cannot be fooled.

Ready means: GET /health_generate answers 200. SGLang answers 503 until its
warm-up generation has succeeded and, after that, answers 200 only when a fresh
1-token generation has gone through every rank (/model_info and /v1/models
answer 200 long before). The listener must also belong to our own server
process tree, so an old server still holding the port cannot pass for ours.
"""

from __future__ import annotations

import time

from sgl_eagle_ext.common.cli_args import show_seconds
from sgl_eagle_ext.common.http import listener_pids, request
from sgl_eagle_ext.common.server_process import (
    EXIT_SERVER_FAILED,
    EXIT_WATCHDOG,
    ServerProcess,
    StartupFailed,
)

# --startup-timeout's default, sized from the phases of a cold start of the presets on
# the GPU host (Kimi-K2.5 INT4, ~600 GB over TP 8). [unmeasured] budgets, each well
# above what a healthy phase should take; the stall watchdog catches a hang sooner.
WEIGHTS_S = 1800.0  # reading ~75 GB per rank, from a slow or cold disk
JIT_S = 900.0  # first-start kernel builds (Triton, Marlin, DeepGEMM), autotuning
CAPTURE_PER_STATE_S = 300.0  # target-verify, draft and draft-extend CUDA graphs, per state


def default_startup_timeout(states: int = 1) -> float:
    """Seconds a start may take in all: weights + JIT + capture of each runtime state
    (1 for a plain or fixed preset; launcher/runtime_states.py for adaptive)."""
    return WEIGHTS_S + JIT_S + CAPTURE_PER_STATE_S * max(1, states)


def wait_ready(
    server: ServerProcess,
    base_url: str,
    port: int,
    *,
    api_key: str | None,
    tls=None,
    stall_timeout: float,
    startup_timeout: float,
    poll: float = 2.0,
) -> float:
    """Block until the server is ready; return seconds taken.

    Raises StartupFailed when the server exits, when it shows no progress for
    `stall_timeout` s (the watchdog: no log line, no compiler in its tree, no JIT cache
    growth), or after `startup_timeout` s (0: none).
    The lines our own polls cause (uvicorn's access log of /health_generate) are not
    progress (common/startup_phase.py), so a stall after HTTP is up is caught too.
    """
    t0 = time.monotonic()
    polls, answer = 0, "no answer yet"
    while True:
        code = server.returncode()
        if code is not None:
            raise StartupFailed(
                f"the server exited with code {code} during startup (phase: {server.phase})",
                EXIT_SERVER_FAILED,
            )
        server.note_builds()  # a silent JIT build is progress (common/jit_watch.py)
        if stall_timeout and server.stalled_for() > stall_timeout:
            raise StartupFailed(
                f"watchdog: no server log progress for {show_seconds(server.stalled_for())} "
                f"(limit {show_seconds(stall_timeout)}) while {server.phase}"
                + _polls(polls, answer, server),
                EXIT_WATCHDOG,
            )
        elapsed = time.monotonic() - t0
        if startup_timeout and elapsed > startup_timeout:
            raise StartupFailed(
                f"watchdog: not ready after {show_seconds(elapsed)} "
                f"(limit {show_seconds(startup_timeout)}) "
                f"while {server.phase}" + _polls(polls, answer, server),
                EXIT_WATCHDOG,
            )
        reply = request(f"{base_url}/health_generate", api_key=api_key, timeout=30, tls=tls)
        polls += 1
        answer = f"HTTP {reply.status}" if reply.status else "no connection"
        if reply.status == 200:
            owners = listener_pids(port)
            if owners is None or owners & server.tree_pids():
                return time.monotonic() - t0
            raise StartupFailed(
                f"port {port} answers, but it is held by process(es) {sorted(owners)}, not by "
                f"the server this launcher started",
                EXIT_SERVER_FAILED,
            )
        time.sleep(poll)


def _polls(polls: int, answer: str, server: ServerProcess) -> str:
    """What the readiness polls saw meanwhile (their log lines were not progress)."""
    logged = f", {server.probe_lines} logged by the server" if server.probe_lines else ""
    return f"; /health_generate polled {polls} times{logged}, last: {answer}"
