"""The first-GPU check of the profiler's premises: torch + CUDA only, no SGLang.

    python3 benchmarks/gpu_check.py [--kernels DIR] [--out FILE]   # exit 0 when all pass

docs/gpu-check.md says how to run it on the GPU host. Sections, in order: the premises
below; the real recorder in an SGLang-shaped overlap loop (gpu_check_recorder.py); with
--kernels DIR (made by `gpu_check_kernels.py prepare DIR` where SGLang is installed),
SGLang's own verify-attention kernels at Kimi-K2.5 TP 8 shapes (gpu_check_kernels.py).
Figures go to one JSON file (--out, default ./gpu_check.json), rewritten after each.

The premises:

A synthetic EAGLE cycle (draft steps as small matmuls replayed from a CUDA graph,
the target's verify forward, accept on the GPU, draft-extend) is wrapped through the
project's own patching base (sgl_eagle_ext/in_sglang_base/patching.py) and timed with the
recorder's own clock (profiling/recorder/clock.py), role by role as the recorder wraps
SGLang's EAGLE worker (the marks of profiling/phases.py). Checks:

  no-sync       the wrapped cycles (eager on the default stream, graph replay on a side
                stream) and their non-blocking read-back run under
                torch.cuda.set_sync_debug_mode("error"); a deliberate .item() proves
                the detector fires on this machine
  capture       a wrapped method called inside torch.cuda.graph capture: the wrapper
                steps aside (its body never runs there), clock.mark() gives None
  stream        a cycle on a side stream while the default stream is busy: the marks
                time the side stream's work (events on the stream the work runs on)
  phase-times   per-phase sums from the wrappers' marks within 5% of independent
                torch.cuda.Event pairs recorded inside the methods, on both streams
  overlap       marks are read back only after query() says done: resolved a cycle or
                more behind the host, none read early, every cycle resolved

Without CUDA (no torch, or torch.cuda.is_available() False) it prints that it needs
CUDA and exits 0, claiming nothing. It needs no package index: torch, plus wrapt and
packaging (the patching base's imports), all in common GPU images (IMPORTS lists what the
whole run needs). A watchdog ends it (non-zero) after WATCHDOG_S.
"""

from __future__ import annotations

import faulthandler
import json
import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "benchmarks"):  # run from a checkout, the package not installed
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

TOLERANCE = 0.05  # phase times: wrappers vs independent events
PHASES = ("draft", "verify_fwd", "accept", "draft_extend", "cycle")
# GPU time per phase, ms (calibrated to this GPU): large against the host's launch
# cost, so the host runs ahead and every event timestamp is the GPU's own.
TARGET_MS = {"draft": 2.0, "verify_fwd": 3.0, "accept": 1.0, "draft_extend": 1.0}
EAGER_CYCLES, GRAPH_CYCLES = 20, 60
WATCHDOG_S = 280  # the whole run, kernels' JIT builds included, inside 5 minutes
# What the GPU image must have: the only imports of gpu_check*.py and the project
# modules they load (no SGLang, no package index).
IMPORTS = ("torch", "triton", "numpy", "wrapt", "packaging", "psutil")


# -- verdicts: plain Python (tests/test_gpu_check.py runs them on CPU) ----------------


@dataclass
class Check:
    name: str
    ok: bool
    figure: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.name}: {self.figure}"


def relative(measured: float, reference: float) -> float:
    if reference <= 0:
        return math.inf if measured > 0 else 0.0
    return abs(measured - reference) / reference


def phase_check(runs: dict[str, tuple[dict, dict]], tol: float = TOLERANCE) -> Check:
    """runs: label -> (wrapper sums, reference sums), ms per phase over all cycles."""
    worst, parts, ok = 0.0, [], bool(runs)
    for label, (ours, ref) in runs.items():
        devs = {}
        for p in PHASES:
            if p not in ref or p not in ours:
                ok = False
                devs[p] = math.inf
                continue
            devs[p] = relative(ours[p], ref[p])
        label_worst = max(devs.values(), default=math.inf)
        worst = max(worst, label_worst)
        ok = ok and label_worst <= tol
        top = max(devs, key=devs.get)
        parts.append(
            f"{label}: worst {top} {devs[top] * 100:.2f}% "
            f"(cycle {ours.get('cycle', 0):.1f} vs {ref.get('cycle', 0):.1f} ms)"
        )
    return Check(
        "phase-times",
        ok,
        f"within {tol * 100:.0f}% of independent events: " + "; ".join(parts)
        if parts
        else "no cycles measured",
    )


def overlap_check(launched: int, resolved: int, lags: list[int], early: int, busy: int) -> Check:
    """Marks read only after query() said done, behind the host, all resolved."""
    lag_hist = {k: lags.count(k) for k in sorted(set(lags))}
    ok = resolved == launched and early == 0 and busy > 0 and launched > 0
    return Check(
        "overlap",
        ok,
        f"{resolved}/{launched} cycles resolved after query() said done, {early} read early; "
        f"resolved at host lag (cycles: count) {lag_hist}; previous cycle still running "
        f"at {busy} poll(s)",
    )


def summary(checks: list[Check], seconds: float) -> tuple[str, int]:
    passed = sum(c.ok for c in checks)
    code = 0 if checks and passed == len(checks) else 1
    return f"gpu_check: {passed}/{len(checks)} checks passed in {seconds:.1f} s", code


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    except Exception as e:  # a broken install raises OSError, RuntimeError, ...
        return f"torch cannot be imported: {type(e).__name__}: {e}"
    version = getattr(torch, "__version__", "(no version: a stand-in?)")
    try:
        if not torch.cuda.is_available():
            return f"torch {version}: torch.cuda.is_available() is False"
    except Exception as e:  # a broken driver install, a stub torch without torch.cuda
        return f"torch {version}: {type(e).__name__}: {e}"
    return None


# -- the synthetic worker (its methods are what the wrappers wrap) -----------------


@dataclass
class Batch:
    size: int


class RefTimer:
    """Independent timing: event pairs recorded inside the methods on the current stream
    (not the recorder's clock, not its pool)."""

    def __init__(self, torch):
        self.torch = torch
        self.cycles: list[dict] = []
        self.on = False

    def begin(self):
        if self.on:
            self.cycles.append({})

    def record(self, key: str):
        if self.on and not self.torch.cuda.is_current_stream_capturing():
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            self.cycles[-1][key] = ev

    def sums(self) -> dict[str, float]:
        out = dict.fromkeys(PHASES, 0.0)
        for c in self.cycles:
            for p in PHASES:
                out[p] += c[p + ">"].elapsed_time(c[p + "<"])
        return out


class SynthWorker:
    """Stands in for SGLang's EAGLE worker: one step = draft -> verify (target forward,
    accept) -> draft-extend. Each phase is `reps` units of GPU work (a matmul and a tanh)."""

    def __init__(self, torch, tokens: int, hidden: int, reps: dict[str, int], ref: RefTimer):
        self.torch = torch
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        g = torch.Generator(device="cuda").manual_seed(0)
        scale = hidden**-0.5
        self.w = [
            torch.randn(hidden, hidden, device="cuda", dtype=dtype, generator=g) * scale
            for _ in range(4)
        ]
        self.static_in = torch.randn(tokens, hidden, device="cuda", dtype=dtype, generator=g)
        self.draft_tokens = torch.randint(0, hidden, (tokens,), device="cuda", generator=g)
        self.reps = reps
        self.ref = ref
        self.graph = None
        self.static_out = None
        self.calls_in_capture = 0
        self.unit_ms = 0.0

    def units(self, x, n: int):
        for i in range(n):
            x = self.torch.tanh(x @ self.w[i % len(self.w)])
        return x

    # role step
    def forward_batch_generation(self, batch: Batch):
        self.ref.begin()
        self.ref.record("cycle>")
        h = self.draft(batch)
        accepted = self.verify(batch, h)
        self.draft_extend(batch, accepted)
        self.ref.record("cycle<")
        return accepted

    # role draft: every draft step, CUDA-graph replay included
    def draft(self, batch: Batch):
        self.ref.record("draft>")
        if self.graph is not None:
            self.graph.replay()
            h = self.static_out
        else:
            h = self.draft_forward(self.static_in)
        self.ref.record("draft<")
        return h

    # captured into the graph (like SGLang's draft forward inside its graph runner)
    def draft_forward(self, x):
        if self.torch.cuda.is_current_stream_capturing():
            self.calls_in_capture += 1
        return self.units(x, self.reps["draft"])

    # role target_forward (marks only when is_verify=True, as in SGLang)
    def target_forward(self, h, is_verify: bool = False):
        self.ref.record("verify_fwd>")
        logits = self.units(h, self.reps["verify_fwd"])
        self.ref.record("verify_fwd<")
        return logits

    # role verify: target forward, then accept on the GPU (no host read: no sync)
    def verify(self, batch: Batch, h):
        logits = self.target_forward(h, is_verify=True)
        self.ref.record("accept>")
        x = self.units(logits, self.reps["accept"])
        predicted = x.argmax(dim=-1)
        missed = (predicted != self.draft_tokens).to(self.torch.int32)
        accepted = missed.argmax()  # the first rejected draft token: a reduction, no scan
        self.ref.record("accept<")
        return accepted

    # role draft_extend
    def draft_extend(self, batch: Batch, accepted):
        self.ref.record("draft_extend>")
        self.units(self.static_in, self.reps["draft_extend"])
        self.ref.record("draft_extend<")


# -- the wrappers: marks only, as the recorder's (profiling/recorder/instrument.py) ------


class Marks:
    """Cycles of marks from the recorder's clock; resolved without ever blocking."""

    def __init__(self, clock, spans: dict[str, tuple[str, str]]):
        self.clock = clock
        self.spans = {p: spans[p] for p in PHASES}
        self.current: dict | None = None
        self.pending: deque = deque()
        self.launched = 0
        self.resolved: list[dict[str, float]] = []
        self.lags: list[int] = []
        self.early = 0
        self.busy = 0  # hot-path polls that found the oldest pending cycle still running

    def begin(self):
        self.current = {"i": self.launched, "marks": {}}

    def mark(self, name: str):
        if self.current is not None:
            self.current["marks"][name] = self.clock.mark()

    def end(self):
        c, self.current = self.current, None
        if c is None:
            return
        if any(m is None for m in c["marks"].values()):  # a mark fell inside a capture
            self.clock.release(*c["marks"].values())
            return
        self.pending.append(c)
        self.launched += 1

    def poll(self) -> bool:
        """Resolve the completed cycles, oldest first; True when one is still running."""
        while self.pending:
            c = self.pending[0]
            if not all(self.clock.ready(m) for m in c["marks"].values()):
                return True
            self.pending.popleft()
            self.lags.append(self.launched - 1 - c["i"])
            self.resolved.append(self._read(c["marks"]))
        return False

    def _read(self, marks: dict) -> dict[str, float]:
        out = {}
        for p, (a, b) in self.spans.items():
            if not (marks[a].query() and marks[b].query()):
                self.early += 1  # never: poll() waited for ready()
            out[p] = self.clock.elapsed_ms(marks[a], marks[b])
        self.clock.release(*marks.values())
        return out

    def sums(self, first: int) -> dict[str, float]:
        out = dict.fromkeys(PHASES, 0.0)
        for r in self.resolved[first:]:
            for p in PHASES:
                out[p] += r[p]
        return out


@dataclass
class Seen:
    body_runs: int = 0
    body_in_capture: int = 0
    lines: list = field(default_factory=list)


def wrappers(marks: Marks, phases, seen: Seen, torch):
    """role -> wrapt wrapper, the marks each takes from the phase table."""

    def step(wrapped, instance, args, kwargs):
        marks.begin()
        marks.mark(phases.CYCLE.opens.name)
        try:
            return wrapped(*args, **kwargs)
        finally:
            marks.mark(phases.CYCLE.closes.name)
            marks.end()

    def phase(role):
        start, end, only_if = phases.marks_of(role)

        def wrapper(wrapped, instance, args, kwargs):
            if only_if is not None and not kwargs.get(only_if):
                return wrapped(*args, **kwargs)
            if start:
                marks.mark(start)
            try:
                return wrapped(*args, **kwargs)
            finally:
                if end:
                    marks.mark(end)

        return wrapper

    def captured(wrapped, instance, args, kwargs):  # on the method the graph captures
        seen.body_runs += 1
        if torch.cuda.is_current_stream_capturing():
            seen.body_in_capture += 1  # the base should have stepped aside
        m = marks.clock.mark()
        if m is not None:
            marks.clock.release(m)
        return wrapped(*args, **kwargs)

    out = {"forward_batch_generation": step, "draft_forward": captured}
    out |= {"draft": phase("draft"), "verify": phase("verify")}
    out |= {"target_forward": phase("target_forward"), "draft_extend": phase("draft_extend")}
    return out


# -- the run ------------------------------------------------------------------------------


def drain(torch, marks: Marks, timeout_s: float = 60.0) -> None:
    """Resolve what is left by polling query(), never blocking on an event."""
    t0 = time.monotonic()
    while marks.pending and time.monotonic() - t0 < timeout_s:
        marks.poll()
        time.sleep(0.001)


def run_cycles(torch, worker, marks: Marks, ref: RefTimer, n: int) -> None:
    batch = Batch(4)
    for _ in range(n):
        worker.forward_batch_generation(batch)
        if marks.poll():  # overlap style: read what completed, never wait
            marks.busy += 1


TORCH_FRAMES = ("/torch/", "/wrapt/", "/tests/fakes/")  # the last: the tests' stand-in torch


def where(e: BaseException) -> str:
    """The error's first line and the innermost frame outside torch and wrapt: the
    caller of the synchronizing operation."""
    import traceback

    ours = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not any(p in f.filename.replace("\\", "/") for p in TORCH_FRAMES)
    ]
    at = f" at {ours[-1].name} ({Path(ours[-1].filename).name}:{ours[-1].lineno})" if ours else ""
    return f"{(str(e).splitlines() or [repr(e)])[0]}{at}"


def sync_detector_fires(torch) -> bool:
    x = torch.ones(1, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        x.item()
    except RuntimeError:
        return True
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return False


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="benchmarks/gpu_check.py", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--kernels",
        type=Path,
        help="SGLang's kernels, copied by "
        "benchmarks/gpu_check_kernels.py prepare DIR (the kernel section)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path("gpu_check.json"),
        help="the JSON file of figures (default: ./gpu_check.json)",
    )
    args = ap.parse_args(argv)
    if not args.out.parent.is_dir():
        ap.error(f"--out {args.out}: the folder {args.out.parent} does not exist")
    t0 = time.monotonic()
    why = no_cuda_reason()
    if why is not None:
        print(f"gpu_check: needs CUDA ({why}): nothing checked, nothing claimed")
        return 0
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)  # never hang a lease
    code = sections(args.out, args.kernels, t0)
    faulthandler.cancel_dump_traceback_later()
    return code


def sections(out: Path, kernels: Path | None, t0: float, torch=None) -> int:
    """Every section in order; the JSON is rewritten after each (a watchdog stop keeps
    what was measured). `torch`: tests pass a stand-in."""
    import gpu_check_recorder

    if torch is None:
        import torch

    figures: dict = {"device": {}, "sections": {}}

    def save():
        figures["seconds"] = round(time.monotonic() - t0, 1)
        out.write_text(json.dumps(figures, indent=1, default=str) + "\n")

    try:
        from sgl_eagle_ext.in_sglang_base import patching
        from sgl_eagle_ext.profiling import phases
        from sgl_eagle_ext.profiling.recorder.clock import CudaEventClock
    except Exception as e:  # e.g. wrapt or packaging missing on this machine
        print(f"FAIL setup: the project's patching base or recorder clock: {e!r}")
        return 1
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    figures["device"] = {
        "name": props.name,
        "sm": f"{props.major}{props.minor}",
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "imports": IMPORTS,
    }
    print(
        f"gpu_check: {props.name} (sm_{props.major}{props.minor}), torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}"
    )
    try:
        checks = run(torch, patching, phases, CudaEventClock)
    except Exception as e:  # a check that could not run is a failure, said in one line
        import traceback

        traceback.print_exc()
        checks = [Check("run", False, f"stopped by {e!r}")]
    for c in checks:
        print(c.line(), flush=True)
    figures["sections"]["premises"] = {c.name: {"ok": c.ok, "figure": c.figure} for c in checks}
    save()
    rec = gpu_check_recorder.run_all(torch, say=lambda line: print(line, flush=True))
    figures["sections"]["recorder"] = rec
    checks += [Check(f"recorder {k}", v.get("ok", True), "") for k, v in rec.items()]
    save()
    if kernels is not None:
        checks.append(kernel_section(torch, kernels, figures, t0, save))
        save()
    else:
        print("SKIP kernels: no --kernels DIR (docs/gpu-check.md says how to prepare it)")
    text, code = summary(checks, time.monotonic() - t0)
    print(text)
    print(f"gpu_check: figures in {out}")
    return code


def kernel_line(r: dict, layers: int) -> str:
    """One shape's figures: each kernel x layers (one verify forward), or why none."""

    def one(k):
        if r.get(f"{k}_ms"):
            return f"{k} {r[f'{k}_ms'] * layers:.2f}"
        return (
            f"{k} {'refused' if r.get(f'{k}_refused') else 'error'}"
            if (r.get(f"{k}_refused") or r.get(f"{k}_error"))
            else ""
        )

    parts = [p for p in map(one, ("extend", "verify_mla", "verify_splitkv", "decode")) if p]
    return (
        f"INFO kernels bs={r['bs']} ctx={r['context']} chain={r['chain']} "
        f"({r['qk']}/{r['v']}, {r['heads']} heads): ms per verify x{layers}: " + ", ".join(parts)
    )


def kernel_section(torch, folder: Path, figures: dict, t0: float, save) -> Check:
    import gpu_check_kernels as gk
    import triton

    try:
        mods, manifest = gk.load(folder)
    except gk.KernelsError as e:
        return Check("kernels", False, str(e))
    budget = max(30.0, WATCHDOG_S - 40 - (time.monotonic() - t0))

    def partial(out):  # saved and printed after each shape: a watchdog stop keeps them
        figures["sections"]["kernels"] = out | {"sglang": manifest.get("sglang")}
        save()
        r = out["gqa_rows"][-1] if out["gqa_rows"] else out["rows"][-1]  # the newest
        print(kernel_line(r, gk.LAYERS), flush=True)

    try:
        out = gk.run(torch, triton, mods, budget_s=budget, on_row=partial)
    except Exception as e:
        return Check("kernels", False, f"stopped by {type(e).__name__}: {e}")
    out["sglang"] = manifest.get("sglang")
    figures["sections"]["kernels"] = out
    return Check(
        "kernels",
        bool(out["rows"]),
        f"{len(out['rows'])} shapes timed, {len(out['skipped_for_time'])} skipped for time "
        f"(SGLang {out['sglang']} kernels)",
    )


def run(torch, patching, phases, CudaEventClock, tokens=2048, hidden=4096) -> list[Check]:
    """Every check, in order (the CUDA run; tests drive it with a stand-in torch)."""
    checks: list[Check] = []
    ref = RefTimer(torch)
    worker = SynthWorker(torch, tokens, hidden, dict.fromkeys(TARGET_MS, 1), ref)
    import gpu_check_recorder  # beside this file: the one calibration

    worker.unit_ms = gpu_check_recorder.calibrate(
        torch, lambda n: worker.units(worker.static_in, n)
    )
    worker.reps = {p: max(2, round(ms / worker.unit_ms)) for p, ms in TARGET_MS.items()}
    clock = CudaEventClock(torch)
    marks = Marks(clock, phases.SPANS)
    seen = Seen()
    module = __name__  # the anchors name this module's class, as the release table
    wraps = [  # names SGLang's
        patching.Wrap(f"{module}:SynthWorker.{name}", w, label=name)
        for name, w in wrappers(marks, phases, seen, torch).items()
    ]
    patches = patching.Patches("GPU_CHECK", say=seen.lines.append)
    if not patches.install(wraps):
        return [Check("setup", False, "; ".join(seen.lines) or "patching refused")]
    try:
        checks += hot_path(torch, worker, marks, ref, seen, clock)
        checks.append(stream_check(torch, worker, marks, ref))
    finally:
        torch.cuda.set_sync_debug_mode(0)
        patches.uninstall()
    return checks


def hot_path(torch, worker, marks, ref, seen, clock) -> list[Check]:
    fired = sync_detector_fires(torch)
    # warm-up (eager), outside the measurement: allocator, cuBLAS handles
    run_cycles(torch, worker, marks, ref, 3)
    torch.cuda.synchronize()
    drain(torch, marks)
    runs: dict[str, tuple[dict, dict]] = {}
    error = None
    n_eager = n_graph = 0

    def measured(label: str, n: int, stream) -> None:
        first = len(marks.resolved)
        ref.cycles.clear()
        ref.on = True
        try:
            with torch.cuda.stream(stream):
                torch.cuda.set_sync_debug_mode("error")
                run_cycles(torch, worker, marks, ref, n)
        finally:
            torch.cuda.set_sync_debug_mode(0)
            ref.on = False
            marks.current = None
        drain(torch, marks)
        if len(marks.resolved) - first == n and len(ref.cycles) == n:
            torch.cuda.current_stream().synchronize()
            runs[label] = (marks.sums(first), ref.sums())

    try:
        measured("eager, default stream", EAGER_CYCLES, torch.cuda.current_stream())
        n_eager = EAGER_CYCLES
    except RuntimeError as e:
        error = f"eager cycles: {where(e)}"
    capture = capture_check(torch, worker, seen, clock)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    if error is None and worker.graph is not None:
        try:
            measured("graph replay, side stream", GRAPH_CYCLES, side)
            n_graph = GRAPH_CYCLES
        except RuntimeError as e:
            error = f"graph cycles: {where(e)}"
    torch.cuda.current_stream().wait_stream(side)
    if error is not None:
        nosync = Check("no-sync", False, f"a synchronizing call in the hot path: {error}")
    elif not fired:
        nosync = Check(
            "no-sync", False, "the detector did not fire on a deliberate .item(): check blind"
        )
    else:
        nosync = Check(
            "no-sync",
            True,
            f"{n_eager} eager + {n_graph} graph-replay wrapped cycles and their read-back "
            "under set_sync_debug_mode('error'): 0 synchronizations (a deliberate .item() "
            "raised)",
        )
    overlap = overlap_check(
        marks.launched, len(marks.resolved), marks.lags, marks.early, marks.busy
    )
    return [nosync, capture, phase_check(runs), overlap]


def capture_check(torch, worker, seen: Seen, clock) -> Check:
    """Capture the draft steps through the wrapped method, as SGLang's graph runner does."""
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):  # warm-up on a side stream before capture
        for _ in range(3):
            worker.draft_forward(worker.static_in)
    torch.cuda.current_stream().wait_stream(warm)
    outside = seen.body_runs
    graph = torch.cuda.CUDAGraph()
    in_capture: list = []
    try:
        with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
            out = worker.draft_forward(worker.static_in)
            in_capture.append(clock.mark())
    except Exception as e:
        return Check("capture", False, f"capture failed: {e!r}")
    worker.graph, worker.static_out = graph, out
    ok = worker.calls_in_capture >= 1 and seen.body_in_capture == 0 and in_capture == [None]
    return Check(
        "capture",
        ok,
        f"wrapped draft_forward called {worker.calls_in_capture}x inside torch.cuda.graph "
        f"capture: wrapper body ran {seen.body_in_capture}x there ({outside}x outside); "
        f"clock.mark() in capture -> {in_capture[0] if in_capture else 'not reached'}",
    )


def stream_check(torch, worker, marks: Marks, ref: RefTimer) -> Check:
    """One cycle on a side stream while the default stream runs ~30 ms of other work:
    marks on the wrong stream would time that work (or nothing), not the cycle."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    busy_units = max(1, round(30.0 / worker.unit_ms))
    first = len(marks.resolved)
    worker.units(worker.static_in, busy_units)  # the default stream: busy
    ref.cycles.clear()
    ref.on = True
    with torch.cuda.stream(side):
        worker.forward_batch_generation(Batch(1))
        end_mark = marks.pending[-1]["marks"][marks.spans["cycle"][1]]
        pending = not marks.clock.ready(end_mark)
    ref.on = False
    drain(torch, marks)
    torch.cuda.synchronize()
    if len(marks.resolved) - first != 1 or len(ref.cycles) != 1:
        return Check("stream", False, "the side-stream cycle was not resolved")
    ours, theirs = marks.resolved[first]["cycle"], ref.sums()["cycle"]
    dev = relative(ours, theirs)
    return Check(
        "stream",
        dev <= TOLERANCE,
        f"cycle on a side stream, default stream busy: {ours:.2f} ms by the wrappers' marks vs "
        f"{theirs:.2f} ms by events on that stream ({dev * 100:.2f}%); end mark still "
        f"pending right after the call: {'yes' if pending else 'no'}",
    )


def entry(argv: list[str] | None = None) -> int:
    """The command line (main's parser: --help, --kernels, --out; unknown arguments
    refused, exit 2); an output that cannot be written (a full disk, a closed pipe) one
    `error:` line and exit 1."""
    from sgl_eagle_ext.common.errors import cli

    return cli("gpu_check")(_checked_main)(argv)


def _checked_main(argv) -> int:
    """main(), anything it did not catch itself one `error:` line (a stub torch whose
    torch.cuda says available but has no device API), not a traceback."""
    from sgl_eagle_ext.common.errors import OUTPUT_ERRNOS

    try:
        return main(argv)
    except OSError as e:
        if e.errno in OUTPUT_ERRNOS:
            raise  # the output itself: cli() says so
        error = e
    except Exception as e:
        error = e
    print(f"gpu_check: error: stopped by {type(error).__name__}: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(entry())
