"""The HTTP client's origin and TLS rules (common/http.py), where every tool meets them:
no key or header follows a redirect to another origin (healthcheck and bench's probes
against two local servers), a server that only redirects is not healthy, https://
is verified (--insecure, --ca-cert, a clear message when the certificate is not
trusted), and a TLS launch on the CPU harness reaches READY, bench working against it.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from sgl_eagle_ext.common import http
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools import healthcheck
from sgl_eagle_ext.tools.bench import probe
from tests.test_reliability import _in_process, _json, tiny_server

KEY = "sk-CANARY-redirect-0123456789"
GATEWAY = "CANARY-gateway-key"
PASSWORD = "CANARY-pem-pass"


def redirecting(to: str, code: int):
    def handle(h):
        h.send_response(code)
        h.send_header("Location", to + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return handle


@pytest.mark.parametrize("code", [302, 307])
def test_no_key_follows_a_redirect_to_another_origin(code, monkeypatch):
    seen: list[tuple[str, dict]] = []

    def other(h):  # another origin (another port): it would answer 200 to anything
        seen.append((h.path, dict(h.headers)))
        _json(h, 200, {"data": [{"id": "m"}], "version": "0.5.23"})

    with tiny_server(other) as b, tiny_server(redirecting(b, code)) as a:
        monkeypatch.setenv(healthcheck.API_KEY_ENV, KEY)
        rc, text = _in_process(healthcheck.main, ["--url", a])
        assert rc == 1 and "unhealthy" in text and "another origin" in text, text
        assert f": ok: {a}" not in text
        server = probe.Server(a, api_key=KEY, headers={"X-Api-Key": GATEWAY})
        for reply in (
            server.get("/v1/models"),
            server.get("/server_info"),
            server.post("/flush_cache"),
            server.get("/health"),
        ):
            assert reply.status == code and "not followed" in reply.error
        assert server.get_text("/metrics") is None
        with pytest.raises(UserError, match="another origin"):
            server.connect()
    assert seen == []  # nothing at all reached the other origin, no key, no header


def test_a_redirect_within_the_origin_is_followed_with_its_key():
    def moved(h):
        if h.path == "/old":
            h.send_response(307)
            h.send_header("Location", "/new")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        _json(h, 200, {"auth": h.headers.get("Authorization")})

    with tiny_server(moved) as same:
        reply = http.request(f"{same}/old", api_key=KEY)
    assert reply.status == 200 and reply.body == {"auth": f"Bearer {KEY}"}


def make_cert(folder: Path, password: str | None = None) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 (openssl CLI), its key
    encrypted with `password` when given."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    cmd += ["-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost"]
    cmd += ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    cmd += ["-passout", f"pass:{password}"] if password else ["-nodes"]
    subprocess.run(cmd, check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def cert_pair(tmp_path_factory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"), PASSWORD)


def https_server(cert: Path, key: Path):
    """tests.test_reliability.tiny_server's answers, over TLS."""
    server = tiny_server(lambda h: _json(h, 200, {"data": [{"id": "m"}], "version": "0.5.23"}))

    class Wrapped:
        def __enter__(self):
            real_init = ThreadingHTTPServer.server_activate

            def activate(srv):
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(cert, key, password=PASSWORD)
                srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
                real_init(srv)

            self.patch = pytest.MonkeyPatch()
            self.patch.setattr(ThreadingHTTPServer, "server_activate", activate)
            try:
                url = server.__enter__()
            finally:
                self.patch.undo()
            return url.replace("http://", "https://")

        def __exit__(self, *exc):
            server.__exit__(*exc)

    return Wrapped()


def test_https_is_verified_and_says_so_when_the_certificate_is_not_trusted(cert_pair, tmp_path):
    cert, key = cert_pair
    with https_server(cert, key) as url:
        plain = http.request(f"{url}/health_generate")
        assert plain.status == 0 and plain.error.startswith(http.TLS_FAILED)
        assert "--insecure" in plain.error
        for tls in (http.tls_context(insecure=True), http.tls_context(cafile=str(cert))):
            assert http.request(f"{url}/health_generate", tls=tls).status == 200
        # the tools: bench's connect names the fix, not "start a server first"
        with pytest.raises(UserError) as e:
            probe.Server(url).connect()
        assert http.TLS_FAILED in str(e.value) and "--insecure" in e.value.fix
        assert "start a server" not in str(e.value) + e.value.fix
        assert probe.Server(url, tls=http.tls_context(insecure=True)).connect().model_id == "m"
        rc, text = _in_process(healthcheck.main, ["--url", url])
        assert rc == 1 and http.TLS_FAILED in text
        for flags in (["--insecure"], ["--ca-cert", str(cert)]):
            rc, text = _in_process(healthcheck.main, ["--url", url, *flags])
            assert rc == 0 and ": ok:" in text, text
    rc, text = _in_process(healthcheck.main, ["--url", url, "--ca-cert", str(tmp_path / "no")])
    assert rc == 2 and "--ca-cert" in text and "Traceback" not in text


@pytest.mark.server
def test_a_tls_launch_reaches_ready_and_bench_works_against_it(
    tiny_models, start_launcher, tmp_path
):
    """One server: SGLang given a self-signed certificate and a key encrypted with a
    password (--ssl-keyfile-password, a secret flag: off the command line, back inside
    the server process). The launcher polls https:// and says READY; bench works with
    --insecure and with --ca-cert; the password shows nowhere."""
    cert, key = make_cert(tmp_path, PASSWORD)
    run = start_launcher(
        *("--preset", "baseline", "--cpu", "--model-path", str(tiny_models["target"])),
        *("--", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)),
        *("--ssl-keyfile-password", PASSWORD),
    )
    ready = run.wait_for("READY in")
    url = run.base_url.replace("http://", "https://")
    assert url in ready, ready
    base = [sys.executable, "-m", "sgl_eagle_ext.bench", "single", "--url", url]
    base += ["--max-tokens", "4", "--runs", "1", "--warmup", "0", "--no-records"]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and http.TLS_FAILED in refused.stderr, refused.stderr
    for flags in (["--insecure"], ["--ca-cert", str(cert)]):
        done = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "4 tokens" in done.stdout or "tok/s" in done.stdout, done.stdout
    assert PASSWORD not in run.output + run.log_text()
    for cmd in run.commands.values():
        assert PASSWORD not in cmd


def test_a_tls_server_found_on_this_host_is_probed_over_https():
    t = healthcheck.target_from_cmdline(
        ["python", "-m", "sglang.launch_server", "--port", "30011"]
        + ["--ssl-certfile", "/srv/c.pem", "--ssl-keyfile", "/srv/k.pem"]
    )
    assert (t.url, t.cert) == ("https://127.0.0.1:30011", "/srv/c.pem")
    plain = healthcheck.target_from_cmdline(["python", "-m", "sglang.launch_server"])
    assert (plain.url, plain.cert) == ("http://127.0.0.1:30000", None)
