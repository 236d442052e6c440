"""Readiness that cannot be fooled.

Ready means: GET /health_generate answers 200. SGLang answers 503 until its
warm-up generation has succeeded and, after that, answers 200 only when a fresh
1-token generation has gone through every rank (/model_info and /v1/models
answer 200 long before). The listener must also belong to our own server
process tree, so an old server still holding the port cannot pass for ours.
"""

from __future__ import annotations

import time

from sgl_eagle_ext.common.http import listener_pids, request
from sgl_eagle_ext.common.server_process import (
    EXIT_SERVER_FAILED,
    EXIT_WATCHDOG,
    ServerProcess,
    StartupFailed,
)


def wait_ready(
    server: ServerProcess,
    base_url: str,
    port: int,
    *,
    api_key: str | None,
    stall_timeout: float,
    startup_timeout: float,
    poll: float = 2.0,
) -> float:
    """Block until the server is ready; return seconds taken.

    Raises StartupFailed when the server exits, when its log shows no progress
    for `stall_timeout` s (the watchdog), or after `startup_timeout` s (0: none).
    """
    t0 = time.monotonic()
    while True:
        code = server.returncode()
        if code is not None:
            raise StartupFailed(
                f"the server exited with code {code} during startup (phase: {server.phase})",
                EXIT_SERVER_FAILED,
            )
        if stall_timeout and server.stalled_for() > stall_timeout:
            raise StartupFailed(
                f"watchdog: no server log progress for {server.stalled_for():.0f} s "
                f"(limit {stall_timeout:.0f} s) while {server.phase}",
                EXIT_WATCHDOG,
            )
        elapsed = time.monotonic() - t0
        if startup_timeout and elapsed > startup_timeout:
            raise StartupFailed(
                f"watchdog: not ready after {elapsed:.0f} s (limit {startup_timeout:.0f} s) "
                f"while {server.phase}",
                EXIT_WATCHDOG,
            )
        reply = request(f"{base_url}/health_generate", api_key=api_key, timeout=30)
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
