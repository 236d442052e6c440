"""The small blocking HTTP client every side uses (launcher, bench probes, router,
health check, demo), and the local-port facts around it. Standard library only.

Redirects are followed within one origin (scheme, host, port) only: a redirect to
another origin is answered as the redirect itself (its status, the target's origin
named), so no key or header goes to a host it was not given for, and no check passes
on another server's answer. TLS (https://) is verified as usual; tls_context() makes
the context for --insecure or a CA/certificate file, and a verification failure says
so (TLS_FAILED), not "no answer".
"""

from __future__ import annotations

import errno
import http.client
import json
import re
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import psutil

from sgl_eagle_ext.common import figures as _figures
from sgl_eagle_ext.common import nesting
from sgl_eagle_ext.common.errors import UserError


class HTTPFailed(Exception):
    """A request that had to succeed did not (no answer, or not 200)."""


@dataclass
class Reply:
    status: int  # 0: no HTTP answer (refused, reset, timed out)
    body: dict | list | None = None  # the JSON answer
    error: str = ""
    text: str = ""  # an answer that is not JSON (e.g. /metrics)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# An answer read whole (JSON, /metrics): far above any real one, a bound on a peer
# that streams without end.
BODY_CAP = 64 << 20
# A timeout beyond this is no timeout (and 1e300 overflows the OS's timers).
MAX_TIMEOUT = 7 * 24 * 3600.0
TLS_FAILED = "TLS certificate verification failed"
TLS_FIX = (
    "--insecure skips the check (a test server's self-signed certificate), "
    "--ca-cert FILE trusts the server's certificate or its CA"
)


def tls_context(
    insecure: bool = False, cafile: str | None = None, pinned: bool = False
) -> ssl.SSLContext | None:
    """The TLS context for https:// requests: None (the system's trust store), an
    unverified one (insecure), or one trusting `cafile` (the server's certificate or
    its CA; `pinned`: that certificate alone, whatever host name it names: the launcher
    polling the server it started on a loopback address)."""
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if not cafile:
        return None
    ctx = ssl.create_default_context(cafile=cafile)
    if pinned:
        ctx.check_hostname = False
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf certificate as the anchor
    return ctx


def add_tls_arguments(p) -> None:
    """--insecure and --ca-cert on an argparse parser (bench, healthcheck); read them
    with tls_from_flags(args.insecure, args.ca_cert)."""
    p.add_argument(
        "--insecure",
        action="store_true",
        help="https: do not verify the server's certificate (a self-signed test server)",
    )
    p.add_argument(
        "--ca-cert",
        metavar="FILE",
        help="https: trust the certificate(s) in this PEM file (the server's own, or its CA)",
    )


def tls_from_flags(insecure: bool, cafile: str | None) -> ssl.SSLContext | None:
    """The TLS context --insecure / --ca-cert ask for, or one clear UserError."""
    if insecure and cafile:
        raise UserError(
            "--insecure and --ca-cert: give one of them.",
            fix="--ca-cert FILE to verify against that certificate, or --insecure not to verify",
        )
    try:
        return tls_context(insecure, cafile)
    except (OSError, ssl.SSLError) as e:
        why = getattr(e, "strerror", None) or getattr(e, "reason", None) or e
        raise UserError(
            f"--ca-cert {cafile}: not a readable PEM certificate ({why}).",
            fix="give the server's certificate or its CA's, in PEM",
        ) from None


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _CrossOrigin(Exception):
    def __init__(self, code: int, target: str):
        super().__init__(target)
        self.code, self.target = code, target


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, except that one to another origin is not followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl) != origin(req.full_url):
            scheme, host, port = origin(newurl)
            fp.close()
            raise _CrossOrigin(code, f"{scheme}://{host}:{port}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Deadline:
    """The whole request, connect to last body byte, within `timeout` seconds: a
    socket timeout bounds each read only, and a peer trickling a byte a second never
    trips it. At the deadline the socket is shut down, which ends any read."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()


def _opener(deadline: _Deadline, tls: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """urllib's opener (proxies as usual, same-origin redirects) whose connections are
    watched; https:// with `tls` (None: the system's trust store)."""

    def watched(base):
        class Conn(base):
            def connect(self):
                super().connect()
                deadline.watch(self.sock)

        return Conn

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(
                watched(http.client.HTTPSConnection),
                req,
                context=self._context,
            )

    return urllib.request.build_opener(HTTP, HTTPS(context=tls), _SameOriginRedirects)


def request(
    url: str,
    payload: dict | None = None,
    api_key: str | None = None,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Reply:
    """`headers`: extra request headers (e.g. a gateway's), sent as given. `timeout`
    bounds the whole request (headers and body), not each read. `tls`: tls_context()'s
    answer for an https:// URL (None: the system's trust store)."""
    timeout = min(max(float(timeout), 0.001), MAX_TIMEOUT)
    data = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    for name, value in headers.items():  # never sent, never echoed in an error
        if _CONTROL.search(f"{name}{value}"):
            return Reply(0, error=f"header {name[:40]!r}: holds a control character (CR, LF, NUL)")
    try:
        req = urllib.request.Request(
            url, data=data, headers=headers, method="GET" if data is None else "POST"
        )
    except ValueError as e:  # a malformed URL
        return Reply(0, error=f"bad URL: {e}")
    with _Deadline(timeout) as deadline:
        reply = _send(req, timeout, deadline, tls)
    if deadline.expired and (reply.status == 0 or reply.error):
        return Reply(0, error=describe_error(TimeoutError(), timeout))
    return reply


def _send(req, timeout: float, deadline: _Deadline, tls: ssl.SSLContext | None) -> Reply:
    try:
        with _opener(deadline, tls).open(req, timeout=timeout) as r:
            raw = r.read(BODY_CAP + 1)
            status = r.status
        if len(raw) > BODY_CAP:
            return Reply(0, error=f"an answer larger than {BODY_CAP >> 20} MiB")
        if deadline.expired:
            return Reply(0, error="timed out")
    except urllib.error.HTTPError as e:
        try:
            said = e.read(300).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException, ValueError):
            said = str(e.reason)
        return Reply(e.code, error=said)
    except _CrossOrigin as e:
        return Reply(
            e.code,
            error=f"redirected to another origin ({e.target}): not followed, and nothing "
            f"sent there; if that is the server, give its URL",
        )
    except (urllib.error.URLError, OSError) as e:  # refused, reset, timeout, TLS
        reason = getattr(e, "reason", e)
        if isinstance(reason, ssl.SSLCertVerificationError):
            why = reason.verify_message or reason.reason or "not trusted"
            return Reply(0, error=f"{TLS_FAILED} ({why}): {TLS_FIX}")
        if isinstance(reason, ssl.SSLError):
            return Reply(0, error=f"TLS handshake failed ({reason.reason or reason})")
        return Reply(0, error=describe_error(reason, timeout))
    except (ValueError, http.client.InvalidURL) as e:  # a malformed URL (or host)
        return Reply(0, error=f"bad URL: {e}")
    except http.client.HTTPException as e:  # BadStatusLine, IncompleteRead, LineTooLong...
        return Reply(0, error=f"not an HTTP answer ({type(e).__name__}: {e})"[:300])
    try:
        return Reply(status, nesting.json_loads(raw) if raw else None)
    except (ValueError, RecursionError):
        return Reply(status, None, text=raw.decode("utf-8", "replace"))


def describe_error(reason, timeout: float) -> str:
    """Words for a failed request: a connect timeout is not "no answer within 600 s"."""
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"timed out after {timeout:g} s (connecting or waiting for the answer)"
    return str(reason)


def listener_pids(port: int) -> set[int] | None:
    """PIDs listening on TCP `port`, or None if the OS does not tell us."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return None
    return {
        c.pid
        for c in conns
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
    }


def check_url(flag: str, url: str) -> str:
    """A base URL (http or https, a host, a valid port), without its trailing slash."""
    fix = "give a URL such as http://127.0.0.1:30000"
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None or parts.password is not None:
            # never echoed: the part before @ may be a password
            shown = f"{parts.scheme}://***@{parts.netloc.rpartition('@')[2]}"
            raise UserError(
                f"{flag} {shown}: a URL with credentials (user:password@) is refused: it "
                f"would show in every record and command line.",
                fix="give the URL without user:password@ and the key through the environment "
                "(EAGLE_EXT_API_KEY) or --api-key-file",
            )
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as e:
        raise UserError(f"{flag} {url}: not a valid URL ({e}).", fix=fix) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag} {url}: not an http(s) URL with a host.", fix=fix)
    return url.rstrip("/")


def parse_port(flag: str, text: str | int) -> int:
    """A TCP port from the command line or a preset, or one clear UserError."""
    try:
        port = int(str(text).strip())
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        raise UserError(f"{flag} {text!s}: not a TCP port.", fix="give an integer from 1 to 65535")
    return port


def check_port_free(host: str, port: int) -> None:
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(
            f"--host {host}: cannot be resolved ({getattr(e, 'strerror', None) or e}).",
            fix="give an IP address or a host name this machine resolves (e.g. 127.0.0.1)",
        ) from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                raise UserError(
                    f"--host {host}: not an address of this machine: {e.strerror}.",
                    fix="bind 127.0.0.1, 0.0.0.0 or one of this host's addresses",
                ) from None
            owners = listener_pids(port) or set()
            who = f" (held by pid {', '.join(map(str, sorted(owners)))})" if owners else ""
            raise UserError(
                f"port {port} on {host} is already in use{who}: {e.strerror}.",
                fix="stop the old server (a zombie server also holds GPU memory), "
                "or pass `-- --port N`",
            ) from None


def probe_host(host: str) -> str:
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


# SGLang's accept length of one request from its meta_info (common/figures.py).
accept_length = _figures.of_meta


def generate(
    base_url: str,
    texts: list[str],
    max_new_tokens: int,
    api_key: str | None = None,
    timeout: float = 600.0,
    tls: ssl.SSLContext | None = None,
) -> list[dict]:
    """Greedy generations of `texts` through /generate (one batched request)."""
    reply = request(
        f"{base_url}/generate",
        {
            "text": texts,
            "sampling_params": {
                "temperature": 0,
                "max_new_tokens": max_new_tokens,
                "ignore_eos": True,
            },
        },
        api_key=api_key,
        timeout=timeout,
        tls=tls,
    )
    if reply.status != 200 or not isinstance(reply.body, list):
        raise HTTPFailed(f"/generate failed: HTTP {reply.status} {reply.error}")
    return reply.body
