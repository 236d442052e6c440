"""A secret canary: one real CPU-harness server started with an API key, then every
tool that talks to it (bench single/sweep/lossless/plot/ab, report, router,
healthcheck) run with that key. The key must be found nowhere: not in any file
written, any line printed, or any command line of any process started meanwhile
(psutil, sampled every 0.1 s). SGLang's /server_info echoes its own command line
with the key in it, so records are redacted by value, not only by field name."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sgl_eagle_ext.common import http, ports, redaction
from sgl_eagle_ext.common.redaction import redact_args
from tests.conftest import wait_until

pytestmark = pytest.mark.server


class CommandLines:
    """Every command line of every descendant of this test process, sampled: each
    distinct (pid, command line) pair, since a process may retitle itself (SGLang's
    router becomes `sglang::router`) after starting with its real arguments."""

    def __init__(self):
        self.seen: set[tuple[int, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            for p in me.children(recursive=True):
                try:
                    self.seen.add((p.pid, " ".join(p.cmdline())))
                except psutil.Error:
                    pass
            time.sleep(0.1)

    def stop(self) -> set[tuple[int, str]]:
        self._stop.set()
        self._thread.join(5)
        return self.seen


def run_tool(args: list[str], env: dict, cwd: Path, timeout: float = 600) -> str:
    p = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=cwd,
        timeout=timeout,
    )
    # the header shows the command as typed, key hidden: only the tool's own output counts
    return f"$ {redact_args(args)}\n(exit {p.returncode})\n{p.stdout}{p.stderr}"


def test_the_api_key_is_found_nowhere(start_launcher, tiny_models, tmp_path):
    # a backslash: a logger escapes it (repr, JSON), and each written form must be masked
    canary = f"CANARY{secrets.token_hex(8)}\\k"
    # SGLang's other secret flags: the admin key (the server holds and logs it) and the
    # SSL key's password (SGLang refuses it without a certificate, so it goes through
    # `bench ab`'s arms only: on no launcher's command line, in no output)
    admin = f"ADMINCANARY{secrets.token_hex(8)}\\a"
    ssl_pw = f"SSLCANARY{secrets.token_hex(8)}"
    # the launcher's keys in SGLang's own --config file (after `--`): SGLang would log
    # them in its ServerArgs dump; the launcher reads the file and takes them off
    key_file = tmp_path / "secret" / "c.yaml"
    key_file.parent.mkdir()
    key_file.write_text(f"api-key: '{canary}'\nadmin-api-key: '{admin}'\nlog-level: info\n")
    work = tmp_path / "work"  # every tool runs here: default output paths land here too
    work.mkdir()
    cmdlines = CommandLines()
    printed: list[str] = []
    env = {"EAGLE_EXT_API_KEY": canary, "PYTHONPATH": str(Path.cwd())}

    # the launcher: the keys from a file, never on a command line; profile on (for report)
    launcher = start_launcher(
        "--preset",
        "eagle3-3step",  # the chain: its verify is cheaper than the tree's on CPU
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models["draft-mostly"]),
        "--",
        "--config",
        str(key_file),
        env={"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_CYCLES": "1"},
    )
    try:
        launcher.wait_for("READY in")
        url = launcher.base_url
        # the key is in force: without it the server refuses
        assert http.request(f"{url}/v1/models").status == 401
        assert http.request(f"{url}/v1/models", api_key=canary).status == 200
        # the admin key reached the server too (through the environment): an admin
        # route takes it and refuses the API key
        assert http.request(f"{url}/flush_cache", api_key=canary).status == 401
        # past the key check (400: SGLang declines a flush while requests are in flight)
        assert http.request(f"{url}/flush_cache", api_key=admin).status in (200, 400)
        launcher.wait_for("spec check")

        results = work / "r.jsonl"
        common = ["--results", str(results), "--max-tokens", "4", "--prompts", "coding"]
        for args in (
            ["single", "--url", url, "--runs", "1", "--warmup", "0", *common],
            [
                "sweep",
                "--url",
                url,
                "--concurrency",
                "1,2",  # two levels: `bench plot` draws no curve from one
                "--num-prompts",
                "1",
                "--warmup",
                "0",
                *common,
            ],
            ["lossless", "--url-a", url, "--url-b", url, "--num-prompts", "1", *common],
            ["plot", str(results), "-o", str(work / "r.png")],
        ):
            printed.append(run_tool(["sgl_eagle_ext.bench", *args], env, work))
        # ab with the key after `--` (its own command line holds it, as typed; its children
        # and its output must not): the arms fail fast on a missing model
        printed.append(
            run_tool(
                [
                    "sgl_eagle_ext.bench",
                    "ab",
                    "--preset-a",
                    "baseline",
                    "--preset-b",
                    "eagle3-2step",
                    "--cpu",
                    "--model-path",
                    str(work / "no-model"),
                    "--draft-model-path",
                    str(work / "no-draft"),
                    "--results",
                    str(work / "ab.jsonl"),
                    "--log-dir",
                    str(work / "logs"),
                    "--",
                    "--api-key",
                    canary,
                    "--admin-api-key",
                    admin,
                    "--ssl-keyfile-password",
                    ssl_pw,
                ],
                {},
                work,
            )
        )
        ab_pid_cmd = "-m sgl_eagle_ext.bench ab"
        printed.append(
            run_tool(["sgl_eagle_ext.report", str(launcher.log_file), "--json"], env, work)
        )
        printed.append(
            run_tool(
                ["sgl_eagle_ext.healthcheck", "--url", url],
                {"EAGLE_EXT_HEALTH_API_KEY": canary},
                work,
            )
        )
        # the router in front of it, given the key through the environment
        rport, mport = ports.pick(), ports.pick()
        router = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sgl_eagle_ext.router",
                "--worker-url",
                url,
                "--port",
                str(rport),
                "--metrics-port",
                str(mport),
                "--log-file",
                str(work / "router.log"),
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
            cwd=work,
        )
        out = []
        t0 = time.monotonic()
        for line in router.stdout:
            out.append(line)
            if "READY in" in line or time.monotonic() - t0 > 300:
                break
        # the command-line sampler has seen the router's own process
        wait_until(
            lambda: any(
                "router_entry" in c or "sglang::router" in c for _, c in list(cmdlines.seen)
            ),
            120,
            "the router's command line sampled",
        )
        router.send_signal(signal.SIGTERM)
        rest, _ = router.communicate(timeout=60)
        printed.append("".join(out) + rest)
        assert any("READY in" in line for line in out), printed[-1]
    finally:
        launcher.cleanup()
    seen = cmdlines.stop()
    printed.append(launcher.output)

    # the tools did their work (a check that ran nothing would find nothing)
    recs = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["sweep", "sweep", "sweep", "lossless"]
    assert (work / "r.png").is_file()  # the plot was drawn (and searched below)
    info = recs[0]["provenance"]["server"]["resolved_args"]
    if info.get("launch_command"):  # SGLang 0.5.19+: its command line, key redacted
        assert "--api-key ***" in info["launch_command"]
    assert any("Decode batch" in p or "rows" in p for p in printed)

    # ... and no secret is anywhere, in any form a logger writes it (raw, repr, JSON)
    forms = [f for s in (canary, admin, ssl_pw) for f in redaction.written_forms(s)]
    files = [f for f in tmp_path.rglob("*") if f.is_file() and f != key_file]
    assert len(files) >= 5  # server and router logs, the records (JSONL, CSV), the plot
    leaks = [str(f) for f in files if any(s.encode() in f.read_bytes() for s in forms)]
    leaks += [p.split("\n", 1)[0] for p in printed if any(s in p for s in forms)]
    leaks += [
        f"pid {pid}: {cmd}"
        for pid, cmd in sorted(seen)
        if any(s in cmd for s in forms) and ab_pid_cmd not in cmd  # typed on ab's own line
    ]
    assert len(seen) >= 10  # launcher, server, scheduler, the tools, their children
    print(
        f"\ncanary: {len(files)} files, {len(printed)} outputs, {len(seen)} command lines "
        f"searched; found in {len(leaks)}"
    )
    assert leaks == [], leaks
