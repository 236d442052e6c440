"""python -m sgl_eagle_ext.router: SGLang's router in front of data-parallel replicas.

Each replica is a whole server started by the launcher (one per 8-GPU host,
usually); the router (the `sglang-router` package, SGLang's own Rust load
balancer) spreads requests over them and speaks the same API, so clients and
`bench` point at the router's URL instead of one server's.

    python -m sgl_eagle_ext.router --worker-url http://10.0.0.1:30000 \\
        --worker-url http://10.0.0.2:30000 --host 0.0.0.0 --port 30080
    python -m sgl_eagle_ext.router ... -- --api-key KEY     # more sglang_router arguments

What it adds to `python -m sglang_router.launch_router`: it starts the router
only once every worker passes the launcher's readiness gate (GET
/health_generate 200), it waits until the router itself reports ready, it keeps
the router's metrics port on the router's host, it gives worker health checks
more time than SGLang's own 20 s health generation may take under load, and it
stops the router on Ctrl-C / SIGTERM. Exit codes as the launcher's: 0 ok, 1 the
router failed, 2 bad input, 3 a worker or the router was not ready in time,
128+N stopped by signal N.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime

from sgl_eagle_ext.common import http, secret_flags
from sgl_eagle_ext.common.cli_args import port_number, seconds, split_extra
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.http import check_port_free, probe_host
from sgl_eagle_ext.common.paths import check_writable_file, read_secret_file
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.common.server_process import (
    EXIT_SERVER_FAILED,
    EXIT_WATCHDOG,
    ServerProcess,
    StartupFailed,
    run_supervised,
    serve_until_exit,
)

PROG = "sgl_eagle_ext.router"
ROUTER_MODULE = "sglang_router.launch_router"
# The same router, given the workers' API key through the environment.
KEYED_ROUTER_MODULE = "sgl_eagle_ext.tools.router_entry"
# sglang_router checks worker health with GET /health (SGLang: a 1-token
# generation that may take up to SGLANG_HEALTH_CHECK_TIMEOUT = 20 s); its own
# default timeout is 5 s, which marks a busy worker dead.
HEALTH_TIMEOUT_S = "30"
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")


@dataclass(frozen=True)
class RouterOptions:
    """The command line, typed (main maps it at the edge); its defaults are the parser's."""

    worker_url: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 30080
    metrics_port: int = 29000
    policy: str = "cache_aware"
    worker_timeout: float = 3600.0
    startup_timeout: float = 300.0
    api_key_file: str | None = None
    log_file: str | None = None
    quiet: bool = False


def parser() -> argparse.ArgumentParser:
    d = RouterOptions
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Start sglang-router in front of SGLang servers (data-parallel replicas), "
        "once they are ready. Arguments after `--` go to sglang_router untouched.",
    )
    p.add_argument(
        "--worker-url",
        action="append",
        default=[],
        metavar="URL",
        help="a replica's base URL, e.g. http://10.0.0.1:30000 (repeat per replica)",
    )
    p.add_argument(
        "--host",
        default=d.host,
        help="address the router listens on (default 127.0.0.1; 0.0.0.0 for all)",
    )
    p.add_argument("--port", type=port_number, default=d.port, help="router port (default 30080)")
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=d.metrics_port,
        help="the router's Prometheus port, on --host (default 29000)",
    )
    p.add_argument(
        "--policy",
        default=d.policy,
        choices=POLICIES,
        help="how requests are spread (default cache_aware: a request goes where its "
        "prefix is cached, unless the load is uneven)",
    )
    p.add_argument(
        "--worker-timeout",
        type=seconds(0),
        default=d.worker_timeout,
        help="seconds to wait for every worker to be ready (default 3600; 0: forever)",
    )
    p.add_argument(
        "--startup-timeout",
        type=seconds(0, strict=True),
        default=d.startup_timeout,
        help="seconds to wait for the router to be ready once started (default 300)",
    )
    p.add_argument(
        "--api-key-file",
        help=f"file holding the workers' API key (or set ${API_KEY_ENV}); kept off "
        "every command line",
    )
    p.add_argument("--log-file", help="router log file (default logs/router-<time>.log)")
    p.add_argument("--quiet", action="store_true", help="do not echo the router log")
    return p


def normalise(url: str) -> str:
    return http.check_url("--worker-url", url.strip())


def wait_workers(
    urls: list[str],
    timeout: float,
    poll: float = 2.0,
    report_every: float = 30.0,
    api_key: str | None = None,
) -> None:
    """Block until every worker's /health_generate answers 200."""
    t0 = last_report = time.monotonic()
    pending = {u: "not asked yet" for u in urls}
    while True:
        for url in list(pending):
            reply = http.request(f"{url}/health_generate", api_key=api_key, timeout=30)
            if reply.status == 200:
                print(f"{PROG}: worker ready: {url}", flush=True)
                del pending[url]
            else:
                pending[url] = f"HTTP {reply.status}" if reply.status else "no answer"
        if not pending:
            return
        now = time.monotonic()
        if timeout and now - t0 > timeout:
            raise StartupFailed(
                f"worker(s) not ready after {now - t0:.0f} s: "
                + ", ".join(f"{u} ({why})" for u, why in pending.items()),
                EXIT_WATCHDOG,
            )
        if now - last_report >= report_every:
            last_report = now
            print(
                f"{PROG}: waiting for worker(s): "
                + ", ".join(f"{u} ({why})" for u, why in pending.items()),
                flush=True,
            )
        time.sleep(poll)


def wait_router(
    router: ServerProcess,
    base_url: str,
    n_workers: int,
    timeout: float,
    poll: float = 1.0,
    api_key: str | None = None,
) -> float:
    """Block until the router answers /readiness 200 with every worker healthy."""
    t0 = time.monotonic()
    while True:
        code = router.returncode()
        if code is not None:
            raise StartupFailed(
                f"the router exited with code {code} during startup", EXIT_SERVER_FAILED
            )
        elapsed = time.monotonic() - t0
        if timeout and elapsed > timeout:
            raise StartupFailed(f"the router is not ready after {elapsed:.0f} s", EXIT_WATCHDOG)
        reply = http.request(f"{base_url}/readiness", api_key=api_key, timeout=10)
        if reply.status == 200:  # sglang-router 0.3: {"status": "ready", "healthy_workers": N, ...}
            body = reply.body if isinstance(reply.body, dict) else {}
            healthy = body.get("healthy_workers")
            if healthy is None:  # other releases: count the listed workers
                workers = http.request(f"{base_url}/workers", api_key=api_key, timeout=10).body
                healthy = len(workers.get("workers", [])) if isinstance(workers, dict) else 0
            if healthy >= n_workers:
                return elapsed
        time.sleep(poll)


def options(argv: list[str]) -> RouterOptions:
    """Our arguments (before `--`), parsed and typed."""
    ns = parser().parse_args(argv)
    return RouterOptions(**{**vars(ns), "worker_url": tuple(ns.worker_url)})


def router_command(
    opts: RouterOptions, urls: list[str], extra: list[str], keyed: bool = False
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        KEYED_ROUTER_MODULE if keyed else ROUTER_MODULE,
        "--host",
        opts.host,
        "--port",
        str(opts.port),
        "--worker-urls",
        *urls,
        "--policy",
        opts.policy,
        "--prometheus-host",
        opts.host,
        "--prometheus-port",
        str(opts.metrics_port),
    ]
    if ServerArgv(extra).value("health-check-timeout-secs") is None:
        cmd += ["--health-check-timeout-secs", HEALTH_TIMEOUT_S]
    return cmd + extra


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    opts = options(ours)
    secret_flags.refuse_abbreviations(extra)  # `--api-k K` would stay on the command line
    router_argv, api_key = ServerArgv(extra).without("api-key")  # travels in the environment
    extra = list(router_argv)
    api_key = (
        api_key
        or read_secret_file("--api-key-file", opts.api_key_file)
        or os.environ.get(API_KEY_ENV)
    )
    if api_key:
        secret_flags.check_value("api-key", api_key)
    urls = [normalise(u) for u in opts.worker_url]
    if not urls:
        raise UserError("no worker given.", fix="pass --worker-url http://HOST:PORT per replica")
    if len(set(urls)) != len(urls):
        raise UserError("the same --worker-url is given twice.", fix="list each replica once")
    if opts.metrics_port == opts.port:
        raise UserError(
            f"--metrics-port {opts.port} is the router's --port too.",
            fix="give the router and its metrics two ports",
        )
    # the arguments before the machine: a bad --log-file is refused whatever holds the ports
    log_path = check_writable_file(
        "--log-file", opts.log_file or f"logs/router-{datetime.now():%Y%m%d-%H%M%S}.log"
    )
    check_port_free(opts.host, opts.port)
    check_port_free(opts.host, opts.metrics_port)

    base_url = f"http://{probe_host(opts.host)}:{opts.port}"
    # after the arguments: a bad one is reported as such, router installed or not
    if importlib.util.find_spec("sglang_router") is None:
        raise UserError(
            "the sglang-router package is not installed in this Python.",
            fix="pip install sglang-router (it ships the router's Rust binary)",
        )
    env = {**os.environ, API_KEY_ENV: api_key} if api_key else None
    router = ServerProcess(
        router_command(opts, urls, extra, keyed=bool(api_key)),
        env,
        log_path,
        redact=[api_key or ""],
        echo=not opts.quiet,
    )

    def start_and_serve() -> int:
        print(f"{PROG}: waiting for {len(urls)} worker(s) to pass /health_generate", flush=True)
        wait_workers(urls, opts.worker_timeout, api_key=api_key)
        router.start()
        took = wait_router(router, base_url, len(urls), opts.startup_timeout, api_key=api_key)
        print(
            f"{PROG}: READY in {took:.1f} s: {base_url} -> {len(urls)} worker(s), policy "
            f"{opts.policy} (pid {router.pid}, log {log_path})",
            flush=True,
        )
        return serve_until_exit(router, PROG, "router")

    # Leaving run_supervised stops the router, however it is left.
    return run_supervised(router, PROG, "router", start_and_serve)


if __name__ == "__main__":
    sys.exit(main())
