"""python -m sgl_eagle_ext.healthcheck: exit 0 only when the server is really ready.

The container's HEALTHCHECK. It asks the same question as the launcher's
readiness gate (sgl_eagle_ext/launcher/readiness.py): does GET /health_generate answer
200? SGLang answers 503 until its warm-up generation has succeeded and then
answers 200 only when a fresh 1-token generation went through every rank, so
"healthy" means "serving", not "HTTP is up".

    python -m sgl_eagle_ext.healthcheck                  # find the server(s) this host runs
    python -m sgl_eagle_ext.healthcheck --url http://127.0.0.1:30001

Which server: --url, else $EAGLE_EXT_HEALTH_URL, else every SGLang server process
found on this host (`python -m sgl_eagle_ext.in_sglang.serve ...` started by the launcher,
`python -m sglang.launch_server ...`, or SGLang's router `python -m
sglang_router.launch_router ...`), probed at the --host/--port on its own command
line; all of them must answer 200. With none found it probes
http://127.0.0.1:30000. When it found the process, the port must also be held by
that process tree (an old server left on the port is not ours).

Exit codes: 0 healthy; 1 not healthy (no answer, 503, timeout, or the port held
by another process); 2 bad input (e.g. a malformed URL).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import psutil

from sgl_eagle_ext.common import http, proctree, secret_flags
from sgl_eagle_ext.common.cli_args import seconds
from sgl_eagle_ext.common.contract import SERVE_MODULE
from sgl_eagle_ext.common.errors import cli
from sgl_eagle_ext.common.http import probe_host
from sgl_eagle_ext.common.server_argv import ServerArgv

PROG = "sgl_eagle_ext.healthcheck"
URL_ENV = "EAGLE_EXT_HEALTH_URL"
API_KEY_ENV = "EAGLE_EXT_HEALTH_API_KEY"  # only for releases that guard /health_generate
DEFAULT_URL = "http://127.0.0.1:30000"
# The server entry points whose command line carries --host/--port (all default to
# port 30000): SGLang started by the launcher or by hand, and SGLang's router
# (started by `python -m sgl_eagle_ext.router`, whose /health_generate goes to a worker).
SERVER_MODULES = (
    SERVE_MODULE,
    "sglang.launch_server",
    "sglang_router.launch_router",
    "sgl_eagle_ext.tools.router_entry",  # the router given an API key (tools/router.py)
)


@dataclass
class Target:
    url: str
    port: int | None = None  # set when found from a process: check who holds it
    pid: int | None = None
    cert: str | None = None  # its --ssl-certfile: trusted when no --insecure/--ca-cert


def target_from_cmdline(cmdline: list[str]) -> Target | None:
    """The URL a server command line listens on, or None if it is no server's."""
    for i, tok in enumerate(cmdline[:-1]):
        if tok == "-m" and cmdline[i + 1] in SERVER_MODULES:
            args = cmdline[i + 2 :]
            break
    else:
        return None
    argv = ServerArgv(args)
    host = argv.host
    try:
        port = int(argv.port_text)
    except ValueError:
        return None
    return Target(f"{argv.scheme}://{probe_host(host)}:{port}", port, cert=argv.tls_certfile)


def discover() -> list[Target]:
    """SGLang server processes on this host (none: an empty list)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            t = target_from_cmdline(proc.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if t is not None:
            t.pid = proc.info["pid"]
            found.append(t)
    return found


def probe(t: Target, api_key: str | None, timeout: float, tls=None) -> tuple[bool, str]:
    reply = http.request(f"{t.url}/health_generate", api_key=api_key, timeout=timeout, tls=tls)
    if reply.status != 200:
        why = f"HTTP {reply.status}" if reply.status else f"no answer ({reply.error})"
        if 300 <= reply.status < 400:  # a redirect to another origin: not this server's 200
            why += f" ({reply.error})"
        return False, f"{t.url}/health_generate: {why}"
    if t.pid is not None and t.port is not None:
        owners = http.listener_pids(t.port)
        if owners is not None and not owners & proctree.tree_pids(t.pid):
            return False, (
                f"{t.url}: port {t.port} is held by {sorted(owners)}, not by the "
                f"server process {t.pid}"
            )
    return True, f"{t.url}/health_generate: 200"


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    p.add_argument(
        "--url",
        default=os.environ.get(URL_ENV),
        help=f"server base URL (default ${URL_ENV}, else the servers found here)",
    )
    p.add_argument(
        "--timeout",
        type=seconds(0, strict=True),
        default=30.0,
        help="seconds to wait for the answer (SGLang itself gives up after 20)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when healthy")
    http.add_tls_arguments(p)
    args = p.parse_args(argv)
    tls = http.tls_from_flags(args.insecure, args.ca_cert)

    targets = (
        [Target(http.check_url("--url (or $" + URL_ENV + ")", args.url))]
        if args.url
        else discover() or [Target(DEFAULT_URL)]
    )
    api_key = os.environ.get(API_KEY_ENV) or None
    if api_key:  # one HTTP cannot carry or SGLang cannot compare: said, never sent
        secret_flags.check_value("api-key", api_key, shown=f"${API_KEY_ENV}")
    healthy = True
    for t in targets:
        own = tls
        if own is None and t.cert:  # a server found here: trust the certificate it serves
            try:
                own = http.tls_context(cafile=t.cert, pinned=True)
            except (OSError, ValueError):
                own = None  # unreadable here: verified as usual, and said if it fails
        ok, message = probe(t, api_key, args.timeout, own)
        healthy &= ok
        if not ok or not args.quiet:
            print(
                f"{PROG}: {'ok' if ok else 'unhealthy'}: {message}",
                file=sys.stdout if ok else sys.stderr,
            )
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
