"""Data-parallel replicas behind SGLang's router (sglang-router), on the CPU harness.

Two tiny replicas are started through our launcher (`--preset baseline --cpu`),
`python -m sgl_eagle_ext.router` puts the real Rust router in front of them on
loopback, and a short concurrent load goes through the router's URL. Each
replica's own Prometheus counters show that both served part of it; then
`python -m sgl_eagle_ext.bench sweep` runs unchanged against the router's URL.
"""

from __future__ import annotations

import importlib.util
import re
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from conftest import READY_TIMEOUT, Collected, wait_until

from sgl_eagle_ext.common import http, ports, server_process
from sgl_eagle_ext.tools import healthcheck, router

MAX_NEW = 8
REQUESTS = 8
CONCURRENCY = 4
PROMPTS = ["The quick brown fox", "Once upon a time", "def main():", "In the beginning"]
GEN_TOKENS = re.compile(r"^sglang:generation_tokens_total(?:\{[^}]*\})?\s+(\S+)$", re.M)


class RouterRun(Collected):
    """`python -m sgl_eagle_ext.router ...` as a subprocess, output collected."""

    def __init__(self, args: list[str], tmp):
        self.port, self.metrics_port = ports.pick(), ports.pick()
        self.base_url = f"http://127.0.0.1:{self.port}"
        log = tmp / f"router-{self.port}.log"
        super().__init__(
            [sys.executable, "-m", "sgl_eagle_ext.router", *args, "--port", str(self.port)]
            + ["--metrics-port", str(self.metrics_port), "--log-file", str(log), "--quiet"]
        )

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> int:
        return self.signal(signal.SIGTERM, 60) if self.proc.poll() is None else self.wait(60)


@pytest.fixture
def start_router(tmp_path):
    runs: list[RouterRun] = []

    def start(*args: str) -> RouterRun:
        run = RouterRun(list(args), tmp_path)
        runs.append(run)
        return run

    yield start
    for run in runs:
        kids = run.descendants()
        run.stop()
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass


def generated_tokens(base_url: str) -> float:
    """Tokens a replica generated so far (its Prometheus counter; the preset enables metrics)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    found = GEN_TOKENS.findall(text)
    assert found, f"{base_url}/metrics has no sglang:generation_tokens_total"
    return sum(float(v) for v in found)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def one_request(base_url: str, i: int) -> dict:
    reply = http.request(
        f"{base_url}/generate",
        {
            "text": PROMPTS[i % len(PROMPTS)],
            "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True},
        },
        timeout=600,
    )
    assert reply.status == 200, f"request {i}: HTTP {reply.status} {reply.error}"
    return reply.body


# -- fast: the router front end without servers -----------------------------------
def test_usage_errors(start_router):
    for args, words in (
        (["--port", "1"], "no worker given"),
        (["--worker-url", "10.0.0.1:30000"], "not an http(s) URL"),
        (["--worker-url", "http://127.0.0.1:1", "--worker-url", "http://127.0.0.1:1/"], "twice"),
        (["--worker-url", "http://127.0.0.1:9", "--metrics-port", "30080"], "--port too"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "sgl_eagle_ext.router", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and words in done.stderr, done.stderr


@pytest.mark.harness
def test_a_worker_that_never_gets_ready_stops_the_start(start_router):
    import sglang_router  # noqa: F401  (in the harness requirements: missing = a failure)

    dead = f"http://127.0.0.1:{ports.pick()}"  # nothing listens there
    run = start_router("--worker-url", dead, "--worker-timeout", "3")
    assert run.wait(timeout=120) == server_process.EXIT_WATCHDOG, run.output
    assert f"{dead} (no answer)" in run.output


def test_router_command_defaults():
    opts = router.RouterOptions(metrics_port=29001, policy="round_robin")
    cmd = router.router_command(opts, ["http://a:1", "http://b:2"], [])
    assert cmd[1:3] == ["-m", "sglang_router.launch_router"]
    assert cmd[cmd.index("--worker-urls") + 1 :][:2] == ["http://a:1", "http://b:2"]
    assert cmd[cmd.index("--prometheus-host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--health-check-timeout-secs") + 1] == router.HEALTH_TIMEOUT_S
    mine = router.router_command(opts, ["http://a:1"], ["--health-check-timeout-secs", "90"])
    assert mine.count("--health-check-timeout-secs") == 1 and mine[-1] == "90"


# -- the real thing ---------------------------------------------------------------
@pytest.mark.server
def test_two_replicas_behind_the_router_share_a_concurrent_load(
    tiny_models, start_launcher, start_router
):
    import sglang_router  # noqa: F401  (in the harness requirements: missing = a failure)

    replicas = [
        start_launcher("--preset", "baseline", "--cpu", "--model-path", str(tiny_models["target"]))
        for _ in range(2)
    ]
    for r in replicas:
        r.wait_for("READY in")

    run = start_router(
        *[a for r in replicas for a in ("--worker-url", r.base_url)], "--policy", "round_robin"
    )
    run.wait_for("READY in", timeout=READY_TIMEOUT)
    router_pids = {p.pid for p in run.descendants()}
    assert router_pids, "the router process was not started"
    before = [generated_tokens(r.base_url) for r in replicas]

    t0 = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        outs = list(pool.map(lambda i: one_request(run.base_url, i), range(REQUESTS)))
    took = time.monotonic() - t0
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [MAX_NEW] * REQUESTS
    # the OpenAI API goes through the router too
    done = http.request(
        f"{run.base_url}/v1/completions",
        {
            "model": str(tiny_models["target"]),
            "prompt": PROMPTS[0],
            "max_tokens": MAX_NEW,
            "temperature": 0,
            "ignore_eos": True,
        },
        timeout=600,
    )
    assert done.status == 200 and done.body["usage"]["completion_tokens"] == MAX_NEW, done

    served = [generated_tokens(r.base_url) - b for r, b in zip(replicas, before)]
    assert all(s >= MAX_NEW for s in served), f"a replica served nothing: {served}"
    assert sum(served) >= (REQUESTS + 1) * MAX_NEW, served
    print(
        f"{REQUESTS + 1} requests through the router in {took:.1f} s; tokens per replica {served}"
    )

    # `bench sweep` works unchanged against the router's URL
    if importlib.util.find_spec("sgl_eagle_ext.tools.bench") is not None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "sgl_eagle_ext.bench",
                "sweep",
                "--url",
                run.base_url,
                "--concurrency",
                "2",
                "--num-prompts",
                "4",
                "--prompts-per-concurrency",
                "2",
                "--max-tokens",
                str(MAX_NEW),
                "--warmup",
                "1",
                "--no-records",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        print(done.stdout)
        after = [generated_tokens(r.base_url) for r in replicas]
        assert all(a > b + s for a, b, s in zip(after, before, served)), (
            "the sweep bypassed a replica"
        )

    # the container's health check passes through the router as well
    assert healthcheck.main(["--url", run.base_url, "--quiet"]) == 0

    assert run.stop() == 128 + signal.SIGTERM, run.output
    # the front end has exited: its router goes with it (a generous wait, not a pause)
    wait_until(lambda: not [p for p in router_pids if alive(p)], 60, "the router's exit")
    # the replicas keep serving on their own
    assert http.request(f"{replicas[0].base_url}/health_generate").status == 200
