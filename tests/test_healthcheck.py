"""sgl_eagle_ext.healthcheck (the container's HEALTHCHECK) against a stand-in server (fast)."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sgl_eagle_ext.tools import healthcheck


class StandIn(BaseHTTPRequestHandler):
    status = 200  # what /health_generate answers
    seen: list[str] = []

    def do_GET(self):
        self.seen.append(self.path)
        code = self.status if self.path == "/health_generate" else 200  # /health, /v1/models...
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    StandIn.status, StandIn.seen = 200, []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_healthy_only_when_health_generate_answers_200(server):
    assert healthcheck.main(["--url", url(server)]) == 0
    assert StandIn.seen == ["/health_generate"]
    StandIn.status = 503  # SGLang before its warm-up generation, or a failed 1-token run
    assert healthcheck.main(["--url", url(server), "--quiet"]) == 1


def test_no_server_is_unhealthy(server):
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    assert healthcheck.main(["--url", f"http://127.0.0.1:{port}", "--timeout", "2"]) == 1


def test_url_from_the_environment(server, monkeypatch):
    monkeypatch.setenv(healthcheck.URL_ENV, url(server))
    assert healthcheck.main([]) == 0
    StandIn.status = 503
    assert healthcheck.main([]) == 1


@pytest.mark.parametrize(
    "cmdline, want",
    [
        (
            [
                "python",
                "-m",
                "sgl_eagle_ext.in_sglang.serve",
                "--model-path",
                "m",
                "--port",
                "30001",
            ],
            "http://127.0.0.1:30001",
        ),
        (
            ["python", "-m", "sgl_eagle_ext.in_sglang.serve", "--host", "0.0.0.0", "--port=31000"],
            "http://127.0.0.1:31000",
        ),
        (["python", "-m", "sglang.launch_server", "--host", "::1"], "http://[::1]:30000"),
        (
            [
                "/opt/venv/bin/python",
                "-m",
                "sglang_router.launch_router",
                "--host",
                "0.0.0.0",
                "--port",
                "30080",
                "--worker-urls",
                "http://a:30000",
            ],
            "http://127.0.0.1:30080",
        ),
        (
            [
                "python",
                "-m",
                "sgl_eagle_ext.in_sglang.serve",
                "--host",
                "10.0.0.5",
                "--port",
                "8000",
                "--port",
                "8001",
            ],
            "http://10.0.0.5:8001",
        ),
    ],
)
def test_server_found_from_its_command_line(cmdline, want):
    t = healthcheck.target_from_cmdline(cmdline)
    assert t is not None and t.url == want


@pytest.mark.parametrize(
    "cmdline",
    [
        ["python", "-m", "sgl_eagle_ext.launch", "--preset", "baseline", "--", "--port", "30001"],
        ["python", "-m", "sgl_eagle_ext.router", "--worker-url", "http://a:1", "--port", "30080"],
        ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
        ["python", "-m", "sgl_eagle_ext.in_sglang.serve", "--port", "abc"],
        [],
    ],
)
def test_other_processes_are_not_servers(cmdline):
    assert healthcheck.target_from_cmdline(cmdline) is None


def test_found_server_must_hold_its_port(server):
    """A process found by its command line whose port another process holds is unhealthy."""
    port = server.server_address[1]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t = healthcheck.Target(url(server), port=port, pid=other.pid)
        ok, message = healthcheck.probe(t, None, 5)
        assert not ok and "held by" in message
        t = healthcheck.Target(url(server), port=port, pid=None)
        assert healthcheck.probe(t, None, 5)[0]
    finally:
        other.kill()
        other.wait()


def test_runs_as_a_module(server):
    done = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.healthcheck", "--url", url(server)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "200" in done.stdout
