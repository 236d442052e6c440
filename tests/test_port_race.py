"""A port taken while the model loads: SGLang binds its HTTP port only after the
weights are in, so the preflight's port check cannot see a process that takes it
in between. SGLang then logs `[Errno 98] ... address already in use` and would wait
in its warm-up against the other process until a timeout; the launcher must stop
the tree at once, naming the process that holds the port, with exit 1."""

from __future__ import annotations

import os
import socket

import pytest

pytestmark = pytest.mark.server


def test_a_port_taken_during_startup_stops_the_launch_at_once(start_launcher, tiny_models):
    launcher = start_launcher(
        "--preset", "baseline", "--cpu", "--model-path", str(tiny_models["target"])
    )
    # printed after the preflight's port check, just before the server starts
    launcher.wait_for(f"; log {launcher.log_file}")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", launcher.port))
        squatter.listen()
        code = launcher.wait()
    out = launcher.output
    assert code == 1, out
    assert (
        f"error: port {launcher.port} was taken by PID {os.getpid()} while the model loaded" in out
    ), out
    assert "Errno 98" in launcher.log_text()  # SGLang's own bind failure was what it saw
    # stopped by the bind failure, not by a timeout (the limits line at start is not one)
    assert "watchdog: no server log progress" not in out and "watchdog: not ready" not in out
    assert "READY" not in out
    assert launcher.orphans() == []
