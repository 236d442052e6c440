"""Shared helpers: the tiny model pair, and a launcher run as a user would run it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from sgl_eagle_ext.common import ports

READY_TIMEOUT = 900  # seconds; the CPU harness is slow (Triton interpreter)
HARNESS_HINT = (
    "needs the CPU harness (SGLang on CPU, sglang-router, hadolint): "
    "python3 -m sgl_eagle_ext.cpu.install --all, then run pytest with .venv/bin/python"
)


# The README runs the suite on three workers (`-n 3 --dist loadgroup`): a file to a worker,
# each worker taking the next file in collection order, except that every test reading
# the session's shared server (`spec_server`) goes to one worker with test_server_cpu.py
# (its baseline fixture's tokens are compared with that server's): one shared server
# start, not one per worker. The files that start servers go first, the longest first
# (minutes of one worker where measured, on a 2-core machine whose suite took 42 min),
# so the short files fill in at the end instead of one worker finishing a long file alone.
SHARED_SERVER_GROUP = "spec_server"
SHARED_SERVER_FILES = ("test_server_cpu.py",)
LONGEST_FIRST = (
    "test_tune_live_server.py",  # ~8
    "test_profile_server.py",  # ~8
    "test_chain_verify_server.py",  # ~4 (one server, three passes)
    "test_bench.py",  # ~6.5
    "test_v1_worker_cpu.py",  # ~6 (before its baseline server was dropped)
    "test_bench_workloads.py",  # ~4.5
    "test_preflight.py",  # ~4
    "test_adaptive_server.py",  # ~4
    "test_schedule_tp2_server.py",  # ~3.5
    "test_secret_canary.py",  # ~3
    "test_router_cpu.py",  # ~2.5
    "test_fuzz_inputs.py",
    "test_bench_labels.py",
    "test_bench_load.py",
    "test_fairness.py",
    "test_reliability.py",
    "test_tune_live.py",
    "test_ask_sglang.py",
    "test_port_race.py",
)


def xdist_group(item) -> str:
    if "spec_server" in item.fixturenames or item.path.name in SHARED_SERVER_FILES:
        return SHARED_SERVER_GROUP
    return item.path.name


def pytest_configure(config):
    # The test processes too (workers inherit it): torch's idle OpenMP threads spin on a
    # 2-core box shared by three workers and their servers (launch/overlays/cpu.toml)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # xdist would reorder the groups by their number of tests (the fast files have most)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # One warm SGLang per probe environment for the whole session (tests/probe_broker.py):
    # a launch's preflight probe is a fork, not 13-20 s of imports. Started in the
    # controlling process, before the workers, which inherit the variable; the probes it
    # answers are SGLang's own answers (tests/test_probe_server.py).
    from sgl_eagle_ext.launcher.preflight import probe_server
    from tests.probe_broker import Broker

    if not hasattr(config, "workerinput") and not os.environ.get(probe_server.VAR):
        folder = tempfile.mkdtemp(prefix="eagle-probes-")
        config._probe_broker = Broker(folder).start()
        os.environ[probe_server.VAR] = folder


def pytest_unconfigure(config):
    broker = getattr(config, "_probe_broker", None)
    if broker is not None:
        broker.close()
        shutil.rmtree(broker.folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(config, items):
    rank = {name: i + 1 for i, name in enumerate(LONGEST_FIRST)}  # the shared group first

    def order(item) -> int:
        group = xdist_group(item)
        return 0 if group == SHARED_SERVER_GROUP else rank.get(group, len(rank) + 1)

    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    items.sort(key=order)  # stable: files keep their order


def pytest_runtest_setup(item):
    """Tests of the harness tiers fail, with one line saying how to get the harness,
    when this interpreter has no SGLang (never a skip, never a long traceback)."""
    tiers = {"server", "harness"} & {m.name for m in item.iter_markers()}
    if tiers and importlib.util.find_spec("sglang") is None:
        pytest.fail(f"{'/'.join(sorted(tiers))} test: {HARNESS_HINT}", pytrace=False)


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    from sgl_eagle_ext.cpu import tiny_models

    root = Path(os.environ.get("EAGLE_EXT_MODELS_DIR", tiny_models.DEFAULT_DIR)).expanduser()
    return {k: Path(v) for k, v in tiny_models.build(root).items()}


@pytest.fixture
def short_draft(tiny_models, tmp_path) -> Path:
    """draft-mostly with max_position_embeddings 1024, shorter than the target's 2048:
    the first users' context-length mismatch (draft shorter than target) on the tiny pair
    (weights linked, not copied)."""
    import json

    short = tmp_path / "short-draft"
    short.mkdir()
    for f in tiny_models["draft-mostly"].iterdir():
        if f.name != "config.json":
            (short / f.name).symlink_to(f)
    cfg = json.loads((tiny_models["draft-mostly"] / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 1024}))
    return short


def readable(text: str, min_share: float = 0.8) -> bool:
    """Printable ASCII, no replacement characters, and mostly words of the corpus
    the tiny target was trained on (the random target wrote '@ torickD~ccsist')."""
    import re
    import string

    from sgl_eagle_ext.cpu.tiny_corpus import CORPUS

    if any(c not in string.printable for c in text):
        return False
    corpus_words = {w.lower() for t in CORPUS for w in re.findall(r"[A-Za-z]+", t)}
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    return bool(words) and sum(w in corpus_words for w in words) >= min_share * len(words)


def wait_until(predicate, timeout: float = 120, what: str = "condition") -> None:
    """Poll `predicate` until it holds: a wait on an event with a generous overall
    timeout (a busy machine is slow, never wrong), not a sleep that guesses how long."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not met after {timeout:g} s")
        time.sleep(0.05)


class Collected:
    """A command as a subprocess, its output (stdout and stderr) collected line by line
    by a reader thread: what the launcher's and the router's tests wait on."""

    def __init__(self, cmd: list[str], env: dict | None = None):
        self.cmd = cmd
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def exited_before(self, needle: str) -> str:
        return f"exited ({self.proc.returncode}) before {needle!r}:\n{self.output}"

    def wait_for(self, needle: str, timeout: float = READY_TIMEOUT) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            for line in self.lines:
                if needle in line:
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.5)  # let the reader drain
                if any(needle in ln for ln in self.lines):
                    continue
                raise AssertionError(self.exited_before(needle))
            time.sleep(0.5)
        raise AssertionError(f"no {needle!r} after {timeout} s:\n{self.output}")

    def signal(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = READY_TIMEOUT) -> int:
        """The exit code, once the output is read to the end: its last lines (the
        watchdog's verdict, say) may still be in the pipe when it exits."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(timeout=10)  # a descendant holding the pipe: not forever


class Launcher(Collected):
    """`python -m sgl_eagle_ext.launch ...` as a subprocess, with its output
    collected and every descendant it ever had remembered (orphan checks)."""

    def __init__(
        self, args: list[str], tmp: Path, env: dict | None = None, python: str | Path | None = None
    ):
        # outside the kernel's ephemeral range: a port from bind(0) was taken as some
        # connection's source port during a 35 s server start (3 workers on 2 cores)
        self.port = ports.pick()
        self.log_file = tmp / f"server-{self.port}.log"
        ours, sep, extra = (
            (args[: args.index("--")], ["--"], args[args.index("--") + 1 :])
            if "--" in args
            else (args, ["--"], [])
        )
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.descendants: set[int] = set()
        self.commands: dict[int, str] = {}  # each descendant's command line, first seen
        # `python`: another interpreter (another venv, hence another SGLang release)
        super().__init__(
            [
                str(python or sys.executable),
                "-m",
                "sgl_eagle_ext.launch",
                *ours,
                "--log-file",
                str(self.log_file),
                "--quiet",
                *sep,
                *extra,
                "--port",
                str(self.port),
            ],
            env,
        )
        threading.Thread(target=self._watch_tree, daemon=True).start()

    def _watch_tree(self) -> None:
        while self.proc.poll() is None:
            try:
                kids = psutil.Process(self.proc.pid).children(recursive=True)
                self.descendants |= {k.pid for k in kids}
                for k in kids:
                    if k.pid not in self.commands:
                        try:
                            cmd = k.cmdline()
                        except psutil.Error:
                            continue
                        # a child caught between fork and exec still shows the launcher's
                        # own command line (what the test passed it): not the child's yet
                        if cmd != self.cmd:
                            self.commands[k.pid] = " ".join(cmd)
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.2)

    def wait_until(self, predicate, timeout: float = 120) -> None:
        t0 = time.monotonic()
        while not predicate():
            if time.monotonic() - t0 > timeout or self.proc.poll() is not None:
                raise AssertionError(f"condition not met:\n{self.output}")
            time.sleep(0.2)

    def log_text(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def exited_before(self, needle: str) -> str:
        return f"launcher {super().exited_before(needle)}\n--- log ---\n{self.log_text()}"

    def orphans(self) -> list[int]:
        alive = []
        for pid in self.descendants:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        for pid in self.orphans():
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture
def start_launcher(tmp_path):
    started: list[Launcher] = []

    def start(*args: str, env: dict | None = None, python: str | Path | None = None) -> Launcher:
        launcher = Launcher(list(args), tmp_path, env, python)
        started.append(launcher)
        return launcher

    yield start
    for launcher in started:
        launcher.cleanup()


# The speculative server that tests which only read a server share (one per session):
# the 3-step chain with the draft built to be accepted nearly always (2..4 tokens per
# cycle), unprofiled. A test that stops, kills or reconfigures a server starts its own.
TARGET_DRAFT = "draft-mostly"
SPEC_SERVER_ARGS = ("--preset", "eagle3-3step", "--cpu")


@pytest.fixture(scope="session")
def spec_server(tiny_models, tmp_path_factory):
    launcher = Launcher(
        [
            *SPEC_SERVER_ARGS,
            "--model-path",
            str(tiny_models["target"]),
            "--draft-model-path",
            str(tiny_models[TARGET_DRAFT]),
        ],
        tmp_path_factory.mktemp("spec"),
        env={"EAGLE3_PROFILE": "0"},
    )
    try:
        launcher.wait_for("READY in")
        yield launcher
    finally:
        launcher.cleanup()
