"""benchmarks/gpu_check.py on a machine without a GPU: its CPU run claims nothing, its
verdicts (plain Python) judge right, and its whole CUDA path runs end to end against a
stand-in `torch.cuda` (host-clock events that complete one query late, a capture flag,
a sync-debug mode that raises) with real CPU tensors, through the project's real
patching base and recorder clock. What only a GPU can show (real events, real graphs,
torch's own sync detector) is left to the GPU run; the README says it has not run yet.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_cuda import FakeTorch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its anchors name it, as SGLang's modules are named
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)


def test_cpu_run_says_it_needs_cuda_and_claims_nothing():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("gpu_check: needs CUDA (")
    assert "nothing checked, nothing claimed" in p.stdout
    assert "PASS" not in p.stdout and "FAIL" not in p.stdout and not p.stderr.strip()


def test_phase_verdict(gc):
    ref = {"draft": 2.0, "verify_fwd": 3.0, "accept": 1.0, "draft_extend": 1.0, "cycle": 7.2}
    close = {k: v * 1.04 for k, v in ref.items()}
    far = close | {"accept": 1.2}
    assert gc.phase_check({"eager": (close, ref)}).ok
    bad = gc.phase_check({"eager": (close, ref), "graph": (far, ref)})
    assert not bad.ok and "graph: worst accept 20.00%" in bad.figure
    assert not gc.phase_check({}).ok  # nothing measured is no pass
    assert not gc.phase_check({"eager": ({"cycle": 1.0}, ref)}).ok  # a phase missing


def test_overlap_verdict(gc):
    assert gc.overlap_check(10, 10, [1] * 9 + [0], early=0, busy=5).ok
    assert not gc.overlap_check(10, 9, [1] * 9, early=0, busy=5).ok  # one never resolved
    assert not gc.overlap_check(10, 10, [0] * 10, early=1, busy=5).ok  # one read early
    assert not gc.overlap_check(10, 10, [0] * 10, early=0, busy=0).ok  # never ahead: blind


def test_summary_and_lines(gc):
    ok, bad = gc.Check("a", True, "1 ms"), gc.Check("b", False, "2 ms")
    assert ok.line() == "PASS a: 1 ms" and bad.line() == "FAIL b: 2 ms"
    assert gc.summary([ok], 1.0) == ("gpu_check: 1/1 checks passed in 1.0 s", 0)
    assert gc.summary([ok, bad], 1.0)[1] == 1
    assert gc.summary([], 1.0)[1] == 1  # no check run is no pass


# -- the CUDA path against a stand-in torch.cuda -------------------------------------


@pytest.mark.harness  # torch (CPU) for the tensors
def test_the_cuda_path_runs_end_to_end_on_a_stand_in(gc, monkeypatch, capsys):
    import torch

    from sgl_eagle_ext.in_sglang_base import patching
    from sgl_eagle_ext.profiling import phases
    from sgl_eagle_ext.profiling.recorder.clock import CudaEventClock

    fake = FakeTorch(torch)
    # the base asks the imported torch whether a capture runs: here, the stand-in
    monkeypatch.setattr(patching, "_capture_check", lambda: fake.cuda.is_current_stream_capturing)
    monkeypatch.setattr(gc, "TARGET_MS", {k: v / 4 for k, v in gc.TARGET_MS.items()})
    monkeypatch.setattr(gc, "EAGER_CYCLES", 6)
    monkeypatch.setattr(gc, "GRAPH_CYCLES", 8)
    checks = gc.run(fake, patching, phases, CudaEventClock, tokens=64, hidden=128)
    for c in checks:
        print(c.line())
    by = {c.name: c for c in checks}
    assert list(by) == ["no-sync", "capture", "phase-times", "overlap", "stream"]
    assert by["no-sync"].ok, by["no-sync"].figure  # the detector fired, the hot path did not
    assert fake.cuda.syncs_in_error_mode == 1  # the deliberate .item() only
    assert by["capture"].ok, by["capture"].figure
    assert "called 1x inside" in by["capture"].figure and "ran 0x there" in by["capture"].figure
    assert by["overlap"].ok, by["overlap"].figure  # events complete one query late
    assert "17/17 cycles" in by["overlap"].figure  # 3 warm-up + 6 eager + 8 graph
    # host timing on a shared CPU: the figures are printed, not judged here
    assert "eager, default stream" in by["phase-times"].figure
    assert "graph replay, side stream" in by["phase-times"].figure
    assert "ms by events on that stream" in by["stream"].figure
    assert not patching.resolve("gpu_check:SynthWorker.draft")[2].__class__.__name__.endswith(
        "Wrapper"
    )  # uninstalled


@pytest.mark.harness
def test_a_sync_in_the_hot_path_fails_the_check(gc, monkeypatch):
    import torch

    from sgl_eagle_ext.in_sglang_base import patching
    from sgl_eagle_ext.profiling import phases
    from sgl_eagle_ext.profiling.recorder.clock import CudaEventClock

    fake = FakeTorch(torch)
    monkeypatch.setattr(patching, "_capture_check", lambda: fake.cuda.is_current_stream_capturing)
    monkeypatch.setattr(gc, "TARGET_MS", {k: v / 4 for k, v in gc.TARGET_MS.items()})
    monkeypatch.setattr(gc, "EAGER_CYCLES", 3)
    original = gc.SynthWorker.draft_extend

    def syncing(self, batch, accepted):
        self.torch.cuda.synchronize()  # what the check must catch
        return original(self, batch, accepted)

    monkeypatch.setattr(gc.SynthWorker, "draft_extend", syncing)
    checks = {c.name: c for c in gc.run(fake, patching, phases, CudaEventClock, 64, 128)}
    assert not checks["no-sync"].ok
    assert "torch.cuda.synchronize" in checks["no-sync"].figure
    assert "(test_gpu_check.py:" in checks["no-sync"].figure  # where it was called
    assert fake.cuda.mode == 0  # the mode is reset after the failure


@pytest.mark.harness
def test_the_whole_run_writes_its_json(gc, monkeypatch, tmp_path, capsys):
    """main's sections on the stand-in: the premises, the real recorder's sections, the
    kernel section skipped without --kernels, one JSON file of figures."""
    import json

    import gpu_check_recorder as gr
    import torch

    from sgl_eagle_ext.in_sglang_base import patching

    fake = FakeTorch(torch)
    monkeypatch.setattr(patching, "_capture_check", lambda: fake.cuda.is_current_stream_capturing)
    monkeypatch.setattr(gc, "TARGET_MS", {k: v / 4 for k, v in gc.TARGET_MS.items()})
    monkeypatch.setattr(gc, "EAGER_CYCLES", 3)
    monkeypatch.setattr(gc, "GRAPH_CYCLES", 3)
    run = gc.run
    monkeypatch.setattr(gc, "run", lambda t, *a: run(t, *a, tokens=64, hidden=128))
    monkeypatch.setattr(gr, "CYCLES", 14)
    monkeypatch.setattr(gr, "WARMUP", 3)
    monkeypatch.setattr(gr.Worker, "__init__", _small(gr.Worker.__init__))
    monkeypatch.setattr(
        gr,
        "REGIMES",
        {k: ({p: ms / 10 for p, ms in ph.items()}, h) for k, (ph, h) in gr.REGIMES.items()},
    )
    out = tmp_path / "figures.json"
    gc.sections(out, None, 0.0, torch=fake)
    text = capsys.readouterr().out
    print(text)
    assert "SKIP kernels: no --kernels DIR" in text and f"figures in {out}" in text
    figures = json.loads(out.read_text())
    assert figures["device"]["imports"] == list(gc.IMPORTS)
    assert set(figures["sections"]) == {"premises", "recorder"}
    rec = figures["sections"]["recorder"]
    assert set(rec) == {"loop-gpu-bound", "loop-host-bound", "capture", "mark-cost", "sync-count"}
    assert all("error" not in v for v in rec.values()), rec
    assert rec["loop-host-bound"]["cycles_resolved"] == 14


def _small(init):
    def __init__(self, torch, hidden=64, tokens=32):
        init(self, torch, hidden, tokens)

    return __init__


def test_kernel_line_says_each_kernel_or_why_not(gc):
    row = {"bs": 4, "context": 2048, "chain": 4, "qk": 576, "v": 512, "heads": 8}
    row |= {"extend_ms": 0.2, "verify_mla_ms": 0.05, "verify_splitkv_ms": None}
    row |= {"verify_splitkv_refused": "its can_handle() refused this shape"}
    assert gc.kernel_line(row, 61) == (
        "INFO kernels bs=4 ctx=2048 chain=4 (576/512, 8 heads): ms per verify x61: "
        "extend 12.20, verify_mla 3.05, verify_splitkv refused"
    )
    row |= {"verify_mla_ms": None, "verify_mla_error": "CompilationError: ..."}
    assert gc.kernel_line(row, 61).endswith(
        "extend 12.20, verify_mla error, verify_splitkv refused"
    )


def test_out_in_a_missing_folder_is_refused(tmp_path):
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "nope" / "f.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"the folder {tmp_path / 'nope'} does not exist" in p.stderr
