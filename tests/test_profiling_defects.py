"""Issue 10's profiling defects, each at the unit it lives in (the server-level proof is
tests/test_server_cpu.py, the presets started profiled): an unwrapped worker fails closed, DP-attention extend
batches are prefill cycles, `syncs=` says what it counts, installing twice is one
install, the partial window is flushed when the scheduler goes idle, and the advisory
spec check never stops a ready server."""

from __future__ import annotations

import http.server
import logging
import threading
import types
import warnings

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.profiling import record
from sgl_eagle_ext.profiling.recorder import config, instrument, syncs, window
from sgl_eagle_ext.profiling.recorder.clock import HostClock
from sgl_eagle_ext.profiling.recorder.profiler import IDLE_FLUSH_S, Profiler

ON = config.from_env({"EAGLE3_PROFILE": "1"})


@pytest.fixture
def clean():
    instrument.uninstrument()
    yield
    instrument.uninstrument()


def test_multi_layer_eagle_fails_closed_with_one_line(clean, caplog):
    caplog.set_level(logging.WARNING, logger="sgl_eagle_ext.profile")
    args = types.SimpleNamespace(enable_multi_layer_eagle=True)
    for _ in range(2):  # the scheduler entry and the plugin entry point both ask
        assert not instrument.instrument(ON, device_is_cuda=False, server_args=args)
    (line,) = [r.message for r in caplog.records]
    assert "disabled" in line and "MultiLayerEagleWorkerV2" in line
    assert "--enable-multi-layer-eagle" in line
    assert not instrument.is_instrumented()


@pytest.mark.harness
def test_install_twice_is_one_install_and_one_metrics_registration(clean, monkeypatch, tmp_path):
    from sgl_eagle_ext.profiling import recorder
    from sgl_eagle_ext.profiling.recorder import metrics

    monkeypatch.setenv("EAGLE3_PROFILE", "1")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    made = []
    monkeypatch.setattr(metrics, "PrometheusMetrics", lambda: made.append(1) or object())
    monkeypatch.setattr(metrics, "_made", None)
    assert recorder.install_from_env()
    assert recorder.install_from_env()  # plugin entry point after the scheduler entry
    assert made == [1]


@pytest.mark.harness
def test_metrics_made_once_per_process(monkeypatch, tmp_path):
    """Without the cache the second registration raises DuplicateTimeseries."""
    from prometheus_client import REGISTRY

    from sgl_eagle_ext.profiling.recorder import metrics

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(metrics, "_made", None)
    first = metrics.from_environment()
    try:
        assert first is not None and metrics.from_environment() is first
    finally:  # the process-wide registry outlives this test
        for counter in vars(first).values():
            REGISTRY.unregister(counter)


class _Mode:
    def __init__(self, decode):
        self.decode = decode

    def is_idle(self):
        return False

    def is_decode(self):
        return self.decode

    def is_extend(self):
        return not self.decode


def test_dp_attention_extend_in_batch_is_a_prefill_cycle():
    decode = types.SimpleNamespace(forward_mode=_Mode(True), is_extend_in_batch=False)
    mixed = types.SimpleNamespace(forward_mode=_Mode(True), is_extend_in_batch=True)
    assert instrument._kind(decode) == "decode"
    assert instrument._kind(mixed) == "prefill"  # resolved without accept counts


def test_dp_spec_prefill_coordination_decode_rank_is_a_decode_cycle():
    """SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=1 (0.5.21+): a decode rank drafts and
    verifies inside an is_extend_in_batch batch; its cycle keeps its accept counts."""
    coordinated = types.SimpleNamespace(enable_dp_spec_prefill_coordination=True)
    mixed = types.SimpleNamespace(forward_mode=_Mode(True), is_extend_in_batch=True)
    extending = types.SimpleNamespace(forward_mode=_Mode(False), is_extend_in_batch=True)
    assert instrument._kind(mixed, coordinated) == "decode"
    assert instrument._kind(extending, coordinated) == "prefill"
    uncoordinated = types.SimpleNamespace(enable_dp_spec_prefill_coordination=False)
    assert instrument._kind(mixed, uncoordinated) == "prefill"


@pytest.mark.harness  # reads the harness venvs' SGLang sources
def test_the_coordination_attribute_is_the_workers_own():
    """The attribute _kind reads is the one EAGLEWorkerV2 sets (installed release)."""
    from sgl_eagle_ext.common import wheels

    pkg = wheels.installed_source()
    if releases.version_key(wheels.source_version(pkg)) < releases.version_key("0.5.21"):
        return  # no coordination before 0.5.21
    source = (pkg / "srt" / "speculative" / "eagle_worker_v2.py").read_text()
    assert "self.enable_dp_spec_prefill_coordination =" in source


def test_prefill_path_cycle_is_not_dropped():
    prof = Profiler(ON, HostClock(), rank_fn=lambda: 0)
    prof.begin("prefill", 2, 4)  # what _step opens for an is_extend_in_batch decode batch
    prof.end()
    prof.flush_idle(now=0.0)  # the scheduler goes idle: the cycle's gap ends
    prof.poll()
    assert prof.window and not prof.tracker.pending and prof.tracker.dropped == 0


def test_partial_window_flushed_when_idle(caplog):
    caplog.set_level(logging.INFO, logger="sgl_eagle_ext.profile")
    prof = Profiler(
        config.from_env({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_CYCLES": "10"}), HostClock()
    )
    prof.rank_fn = lambda: 0
    prof.first_written = True  # (the process's first cycle would be a window of its own)
    for _ in range(3):  # a short run: fewer cycles than a window
        cycle = prof.begin("decode", 1, 4)
        prof.end()
        prof.join(cycle, [2])
    prof.poll()
    assert prof.records == 0
    assert prof.flush_idle(now=100.0) is None  # idle starts
    assert prof.flush_idle(now=100.0 + IDLE_FLUSH_S / 2) is None  # a gap between batches
    rec = prof.flush_idle(now=100.0 + IDLE_FLUSH_S)
    assert rec is not None and rec.cycles == 3 and prof.records == 1
    assert [r for r in caplog.records if "EAGLE3_PROFILE v=2" in r.message]
    assert prof.flush_idle(now=200.0) is None  # nothing new: no empty windows


def test_sync_check_selection():
    assert syncs.select(False, True) == syncs.OFF
    assert syncs.select(True, True) == syncs.DEVICE
    assert syncs.select(True, False) == syncs.EXPLICIT


def test_device_sync_warnings_are_counted_and_swallowed(monkeypatch):
    modes = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(set_sync_debug_mode=modes.append))
    passed = []
    monkeypatch.setattr(warnings, "showwarning", lambda *a, **k: passed.append(a[0]))
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    counted = []
    syncs.watch_device_syncs(lambda: counted.append(1), torch=fake_torch)
    assert modes == ["warn"]
    for _ in range(2):  # the same call site twice: counted twice ("always")
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
    warnings.warn("something else", UserWarning, stacklevel=1)
    assert len(counted) == 2
    assert [str(m) for m in passed] == ["something else"]


@pytest.mark.harness
def test_explicit_sync_check_on_cpu_wraps_synchronize(clean):
    cfg = config.from_env({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_SYNC_CHECK": "1"})
    assert instrument.instrument(cfg, device_is_cuda=False)
    assert instrument.PROFILER.sync_counted == syncs.EXPLICIT
    import torch
    import wrapt

    assert isinstance(vars(torch.cuda)["synchronize"], wrapt.FunctionWrapper)


def test_syncs_field_says_what_was_counted():
    prof = Profiler(ON, HostClock(), rank_fn=lambda: 0)
    prof.begin("prefill", 1, 4)
    prof.end()
    prof.poll()
    off = window.log_line(prof.emit())
    assert " syncs=off " in off and "syncs_counted" not in off
    prof.sync_counted = syncs.EXPLICIT
    prof.begin("prefill", 1, 4)
    prof.end()
    prof.poll()
    line = window.log_line(prof.emit())
    assert " syncs=0 syncs_counted=explicit-synchronize-calls " in line


class _Failing(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(500)
        self.end_headers()
        self.wfile.write(b"boom")

    def log_message(self, *args):
        pass


def test_advisory_spec_check_warns_and_never_stops_the_server(capsys):
    from sgl_eagle_ext.launcher import cli

    srv = http.server.HTTPServer(("127.0.0.1", 0), _Failing)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        assert cli.spec_check(f"http://127.0.0.1:{srv.server_port}", None) is None
    finally:
        srv.shutdown()
    err = capsys.readouterr().err
    assert "warning: spec check skipped" in err and "500" in err


def test_flush_signal_writes_the_window_even_mid_poll(caplog):
    """Defect 4: SGLang SIGKILLs the schedulers; the server asks them first (FLUSH_SIGNAL)."""
    import os
    import signal

    from sgl_eagle_ext.in_sglang_base.profile_flush import FLUSH_SIGNAL

    prof = Profiler(ON, HostClock(), rank_fn=lambda: 0)
    for _ in range(3):
        prof.begin("prefill", 1, 4)
        prof.end()
    previous = signal.signal(FLUSH_SIGNAL, lambda s, f: prof.request_flush())
    try:
        with caplog.at_level(logging.INFO):
            prof._busy = 1  # as if the signal interrupted a poll: deferred, not doubled
            os.kill(os.getpid(), FLUSH_SIGNAL)
            assert prof.records == 0 and prof._flush_wanted
            prof._busy = 0
            prof.poll()
        assert prof.records == 1 and "prefill=3/" in caplog.text
    finally:
        signal.signal(FLUSH_SIGNAL, previous)


@pytest.mark.harness  # setproctitle (SGLang's dependency, in the harness)
def test_server_asks_only_schedulers_to_flush(tmp_path):
    """The parent signals processes titled sglang::scheduler* under it, never the others
    (the signal's default action would kill them). The parent is a process of its own:
    the test process has other servers' schedulers below it (the session's shared server)."""
    import subprocess
    import sys

    child = (
        "import signal, sys, time, setproctitle\n"
        "setproctitle.setproctitle(sys.argv[1])\n"
        "signal.signal(signal.SIGUSR2, lambda s, f: open(sys.argv[2], 'w').write('flushed'))\n"
        "open(sys.argv[2] + '.ready', 'w').close()\n"
        "time.sleep(30)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        "from pathlib import Path\n"
        "from sgl_eagle_ext.in_sglang_base import profile_flush\n"
        "child, tmp = sys.argv[1], Path(sys.argv[2])\n"
        "marks = {t: tmp / t.replace(':', '_') for t in ('sglang::scheduler_TP0', 'other')}\n"
        "procs = [subprocess.Popen([sys.executable, '-c', child, t, str(m)])\n"
        "         for t, m in marks.items()]\n"
        "deadline = time.monotonic() + 60\n"
        "while not all(m.with_name(m.name + '.ready').exists() for m in marks.values()):\n"
        "    assert time.monotonic() < deadline\n"
        "    time.sleep(0.05)\n"
        "asked = profile_flush.flush_schedulers(grace_s=0.5)\n"
        "alive = procs[1].poll() is None\n"
        "for p in procs:\n"
        "    p.kill()\n"
        "    p.wait()\n"
        "print(asked, alive)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", parent, child, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "True"]  # one scheduler asked; the other lives on
    assert (tmp_path / "sglang__scheduler_TP0").read_text() == "flushed"
    assert not (tmp_path / "other").exists()


class _KindMode:
    def __init__(self, kind):
        self.kind = kind

    def is_idle(self):
        return False

    def is_decode(self):
        return self.kind == "decode"

    def is_extend(self):
        return self.kind == "prefill"


def _batch(kind):
    return types.SimpleNamespace(forward_mode=_KindMode(kind), reqs=[1], is_extend_in_batch=False)


@pytest.mark.parametrize("rank,armed", [(0, True), (1, False)])
def test_device_sync_check_starts_at_the_first_decode_of_a_profiled_rank(
    clean, monkeypatch, rank, armed
):
    """Issue 24: set_sync_debug_mode is set at the first decode cycle, on profiled ranks
    only, not at scheduler start (weight loading and graph capture synchronize)."""
    modes = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(set_sync_debug_mode=modes.append))
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    cfg = config.from_env({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_SYNC_CHECK": "1"})
    prof = Profiler(cfg, HostClock(), rank_fn=lambda: rank)  # profiles rank 0 only
    monkeypatch.setattr(instrument, "PROFILER", prof)
    watch = syncs.FirstDecode(prof.count_sync, torch=fake_torch)
    monkeypatch.setattr(instrument, "SYNC_WATCH", watch)
    worker = types.SimpleNamespace(speculative_num_steps=3, speculative_num_draft_tokens=4)
    instrument._step(lambda b: None, worker, (_batch("prefill"),), {})
    assert modes == []  # startup and prefill: not yet
    instrument._step(lambda b: None, worker, (_batch("decode"),), {})
    instrument._step(lambda b: None, worker, (_batch("decode"),), {})
    assert modes == (["warn"] if armed else []) and watch.armed is armed
    monkeypatch.setattr(instrument, "PROFILER", None)
    instrument.uninstrument()  # disarms: the mode is reset, showwarning restored
    assert modes == (["warn", 0] if armed else [])


def test_the_gap_ends_before_sglangs_idle_sleep(monkeypatch):
    """A cycle's host time runs to the scheduler's idle call, not through it: SGLang's
    on_idle sleeps, and the first run of this counted ~1 s of that sleep as host work."""
    import time

    prof = Profiler(ON, HostClock(), rank_fn=lambda: 0)
    prof.first_written = True  # (the first cycle would be a window of its own)
    monkeypatch.setattr(instrument, "PROFILER", prof)
    cycle = prof.begin("decode", 1, 4)
    prof.end()
    prof.join(cycle, [2])
    instrument._idle(lambda: time.sleep(0.3), None, (), {})  # SGLang's idle housekeeping
    (res,) = prof.window
    assert res.ms["host"] < 100.0, res.ms  # not the 300 ms sleep
    assert res.ms["cycle"] == res.ms["step"] + res.ms["host"]


def test_the_first_decode_cycle_is_a_window_of_its_own():
    """It carries JIT compilation: alone, the readers' warm-up rule can leave it out (in
    a window of 4 it raised the demo's mean cycle by 10%, under the rule's 2x)."""
    from sgl_eagle_ext.profiling.aggregate import Profile

    prof = Profiler(
        config.from_env({"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_CYCLES": "4"}), FakeClock()
    )
    prof.rank_fn = lambda: 0
    written = []
    prof._write = written.append
    for ms in (2000.0, 400.0, 410.0, 390.0, 420.0, 400.0):
        prof.tracker.clock.step = ms
        cycle = prof.begin("decode", 1, 4)
        prof.end()
        prof.join(cycle, [2])
    prof.emit()
    assert [w.cycles for w in written] == [1, 5]  # (the last resolves once its gap ends)
    cell = Profile.read(record.log_line(w) for w in written).cells()[1, 3]
    assert cell.cycles == 5 and cell.mean("cycle") < 500


class FakeClock(HostClock):
    """Each step lasts `step` ms, the gaps nothing."""

    step = 0.0

    def __init__(self):
        self.now, self.marks = 0.0, 0

    def mark(self):
        self.marks += 1
        if self.marks % 2 == 0:  # a step's end (a begin's mark comes first)
            self.now += self.step
        return self.now

    def elapsed_ms(self, start, end):
        return end - start
