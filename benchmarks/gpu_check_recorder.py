"""gpu_check's recorder section: the REAL recorder in an SGLang-shaped overlap loop.

What runs is the project's own recorder, unchanged: the wrappers of
profiling/recorder/instrument.py (WRAPPERS: step, the marked phases, accept_join, idle),
its Profiler, CycleTracker and CudaEventClock, installed through the patching base on a
synthetic worker and scheduler shaped like SGLang 0.5.23's overlap scheduler
(Scheduler.event_loop_overlap with EAGLEWorkerV2):

  - a forward stream and a schedule stream (the default one); the forward stream waits
    on the schedule stream before each batch, as SGLang's run_batch does
  - batch N+1 is launched before result N is processed (the result queue)
  - each result's accept counts leave the GPU by a non-blocking device-to-host copy with
    its `copy_done` event, which processing waits for by query() (SGLang calls
    copy_done.synchronize(); query() polling waits the same without a call the sync
    detector may count); the counts reach the recorder through the accept_join wrapper
  - when no batch is left the scheduler calls on_idle (the idle wrapper), which closes
    the last cycle's gap with a mark on the schedule stream: another stream than the
    cycle's own

in two regimes: GPU-bound (a 10 ms step, 0.5 ms of host work: the host waits on the GPU)
and host-bound (a 0.5 ms step, 4 ms of host work: the GPU waits on the host), every
cycle under torch.cuda.set_sync_debug_mode("error"). Independent references: the
calibrated GPU time of each phase's work (measured apart, before), the host's wall
clock between launches (time.perf_counter), and event pairs of our own around the run.

Sections (figures in the JSON; a verdict per check):
  loop-<regime>   cycles resolved, accept counts joined, the last gap closed from the
                  schedule stream, no synchronization; the recorder's cycle time against
                  the host's launch period, its phase times against the calibrated work,
                  its host time against wall time minus GPU time
  capture         a wrapped method called inside a CUDA-graph capture (the wrapper steps
                  aside) and a mark taken inside one (its cycle is dropped)
  mark-cost       the GPU and host cost of the recorder's marks per cycle
  sync-count      which synchronizing calls the sync check (recorder/syncs.py) counts,
                  and that a cycle with one .item() shows syncs=1 through the real path

Everything takes `torch` as an argument: tests/test_gpu_check.py runs the same loop on
CPU against a stand-in torch.cuda (its events complete one query late).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

# regime -> (GPU ms per phase, host ms per loop iteration: schedule + process)
REGIMES = {
    "gpu-bound": (  # 10 ms steps: 9.5 ms of slack for the host's own stalls
        {"draft": 2.0, "verify_fwd": 6.0, "accept": 1.0, "draft_extend": 1.0},
        {"schedule": 0.25, "process": 0.25},
    ),
    "host-bound": (
        {"draft": 0.1, "verify_fwd": 0.3, "accept": 0.05, "draft_extend": 0.05},
        {"schedule": 2.0, "process": 2.0},
    ),
}
CYCLES = 120
WARMUP = 10  # cycles left out of the figures (first allocations, cuBLAS handles)
BATCH = 8
ACCEPTED_DRAFTS = 2  # every request accepts 2 drafts per cycle: accept length 3
TOL = 0.05  # recorder vs host wall clock
PHASE_TOL = 0.10  # recorder phase vs calibrated work (launch jitter on short phases)
MARKS_PER_CYCLE = 10  # step 2, draft 2, verify fwd 2, verify end 1, extend 2, gap end 1
MODULE = __name__


# -- the synthetic SGLang: what the wrappers wrap ----------------------------------------


class Mode:
    """ForwardMode's questions (what instrument._kind asks)."""

    def __init__(self, kind: str):
        self.kind = kind

    def is_idle(self):
        return self.kind == "idle"

    def is_decode(self):
        return self.kind == "decode"

    def is_extend(self):
        return self.kind == "extend"


@dataclass
class Batch:
    reqs: list
    forward_mode: Mode = field(default_factory=lambda: Mode("decode"))
    is_extend_in_batch: bool = False


class Result:
    """GenerationBatchResult's part the loop uses (the recorder sets its own attribute)."""

    def __init__(self, accepted_gpu):
        self.accepted_gpu = accepted_gpu
        self.accepted_cpu = None
        self.copy_done = None


class Worker:
    """EAGLEWorkerV2-shaped: step = draft -> verify (target forward, accept) -> draft-extend;
    each phase `reps[phase]` units of GPU work (a matmul and a tanh)."""

    speculative_num_steps = 3
    speculative_num_draft_tokens = 4

    def __init__(self, torch, hidden: int = 2048, tokens: int = 1024):
        self.torch = torch
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        g = torch.Generator(device="cuda").manual_seed(0)
        self.w = [
            torch.randn(hidden, hidden, device="cuda", dtype=dtype, generator=g) * hidden**-0.5
            for _ in range(2)
        ]
        self.x = torch.randn(tokens, hidden, device="cuda", dtype=dtype, generator=g)
        self.reps = {"draft": 1, "verify_fwd": 1, "accept": 1, "draft_extend": 1}
        self.sync_in_step: int | None = None  # cycle index with a deliberate .item()
        self.steps_run = 0

    def units(self, x, n: int):
        for i in range(n):
            x = self.torch.tanh(x @ self.w[i % 2])
        return x

    def forward_batch_generation(self, batch):  # role step
        h = self.draft(batch)
        accepted = self.verify(batch, h)
        self.draft_extend(batch, accepted)
        if self.sync_in_step == self.steps_run:
            self.deliberate_sync(accepted)  # what the sync check must count
        self.steps_run += 1
        return Result(accepted)

    @staticmethod
    def deliberate_sync(t):
        t.sum().item()

    def draft(self, batch):  # role draft
        return self.units(self.x, self.reps["draft"])

    def target_forward(self, h, is_verify: bool = False):  # role target_forward
        return self.units(h, self.reps["verify_fwd"])

    def verify(self, batch, h):  # role verify
        logits = self.target_forward(h, is_verify=True)
        y = self.units(logits, self.reps["accept"])
        # accepted drafts per request, computed on the GPU from the work (no host read)
        zero = (y[: len(batch.reqs), 0] * 0).to(self.torch.int32)
        return zero + ACCEPTED_DRAFTS

    def draft_extend(self, batch, accepted):  # role draft_extend
        self.units(self.x, self.reps["draft_extend"])


class Scheduler:
    """The two scheduler methods the recorder wraps."""

    def resolve(self, result):  # role accept_join (SGLang: _resolve_spec_v2_tokens)
        return result

    def on_idle(self):  # role idle
        pass


ANCHORS = {
    "step": "Worker.forward_batch_generation",
    "draft": "Worker.draft",
    "target_forward": "Worker.target_forward",
    "verify": "Worker.verify",
    "draft_extend": "Worker.draft_extend",
    "accept_join": "Scheduler.resolve",
    "idle": "Scheduler.on_idle",
}


# -- the real recorder, installed on the synthetic classes ---------------------------------


class Collected:
    """The Profiler's metrics hook: every resolved cycle, as the Prometheus counters see
    them (profiling/recorder/metrics.py observe())."""

    def __init__(self):
        self.cycles = []

    def observe(self, done):
        self.cycles += done


@dataclass
class Recorder:
    instrument: object
    profiler: object
    collected: Collected
    patches: object
    lines: list


def install(torch, sync_check: bool = False) -> Recorder:
    """The recorder's own wrappers (instrument.WRAPPERS) on this module's classes, its
    Profiler on the CUDA-event clock, through the patching base."""
    from sgl_eagle_ext.in_sglang_base import patching
    from sgl_eagle_ext.profiling.recorder import instrument, syncs
    from sgl_eagle_ext.profiling.recorder.clock import CudaEventClock
    from sgl_eagle_ext.profiling.recorder.config import Config
    from sgl_eagle_ext.profiling.recorder.profiler import Profiler

    collected = Collected()
    config = Config(True, None, 1e9, 0, None, sync_check)
    prof = Profiler(config, CudaEventClock(torch), rank_fn=lambda: 0, metrics=collected)
    lines: list = []
    patches = patching.Patches("GPU_CHECK", say=lines.append)
    wraps = [
        patching.Wrap(f"{MODULE}:{anchor}", instrument.WRAPPERS[role], label=role)
        for role, anchor in ANCHORS.items()
    ]
    if not patches.install(wraps):
        raise RuntimeError("; ".join(lines) or "the patching base refused")
    instrument.PROFILER = prof
    if sync_check:
        prof.sync_counted = syncs.DEVICE
        instrument.SYNC_WATCH = syncs.FirstDecode(prof.count_sync, torch)
    return Recorder(instrument, prof, collected, patches, lines)


def uninstall(rec: Recorder) -> None:
    if rec.instrument.SYNC_WATCH is not None:
        rec.instrument.SYNC_WATCH.disarm()
        rec.instrument.SYNC_WATCH = None
    rec.instrument.PROFILER = None
    rec.patches.uninstall()


# -- the loop ---------------------------------------------------------------------------


def spin(ms: float) -> None:
    """Host work of a known length (busy, as a scheduler's Python is)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def wait_done(event, timeout_s: float = 30.0) -> None:
    """Wait for an event by query() (never a synchronizing call)."""
    end = time.perf_counter() + timeout_s
    while not event.query():
        if time.perf_counter() > end:
            raise TimeoutError("a copy_done event did not complete in 30 s")


@dataclass
class LoopRun:
    launches: list = field(default_factory=list)  # host time at each launch (s)
    launch_s: list = field(default_factory=list)  # host time inside each launch call
    idle_at: float = 0.0  # host time of the on_idle call
    ref_step_end: object = None  # our own event after the last step, forward stream
    syncs_raised: str | None = None
    ref_start: object = None  # our own events: first launch, on the forward stream
    ref_end: object = None  # ... and at on_idle, on the schedule stream
    ref_after_idle: object = None  # ... and just after on_idle returns (brackets its mark)
    copy: str = "to"  # how results reach the CPU (copy_to_host)


def overlap_loop(
    torch,
    worker: Worker,
    sched: Scheduler,
    n: int,
    host_ms: dict,
    accept_attr: str,
    sync_mode="error",
) -> LoopRun:
    """SGLang's event_loop_overlap, reduced to what the recorder sees."""
    run = LoopRun()
    fwd = torch.cuda.Stream()
    default = torch.cuda.current_stream()
    queue: deque = deque()
    last = None
    if sync_mode is not None:
        torch.cuda.set_sync_debug_mode(sync_mode)
    try:
        for i in range(n + 2):
            spin(host_ms["schedule"])  # receive requests, get_next_batch_to_run
            batch = Batch(reqs=[None] * BATCH) if i < n else None
            if batch is not None:
                fwd.wait_stream(default)
                with torch.cuda.stream(fwd):
                    t = time.perf_counter()
                    if run.ref_start is None:
                        run.ref_start = torch.cuda.Event(enable_timing=True)
                        run.ref_start.record()
                    result = worker.forward_batch_generation(batch)
                    run.ref_step_end = torch.cuda.Event(enable_timing=True)
                    run.ref_step_end.record()
                    result.accepted_cpu = copy_to_host(torch, result.accepted_gpu, run)
                    result.copy_done = torch.cuda.Event()
                    result.copy_done.record()
                    run.launch_s.append(time.perf_counter() - t)
                    run.launches.append(t)
                queue.append(result)
            if last is not None:  # process result N after launching N+1
                result = queue.popleft()
                wait_done(result.copy_done)
                setattr(result, accept_attr, result.accepted_cpu.tolist())
                sched.resolve(result)
                spin(host_ms["process"])
            elif batch is None:
                run.idle_at = time.perf_counter()
                run.ref_end = torch.cuda.Event(enable_timing=True)
                run.ref_end.record()  # on the schedule stream, as on_idle's mark
                sched.on_idle()
                run.ref_after_idle = torch.cuda.Event(enable_timing=True)
                run.ref_after_idle.record()
            last = batch
    except RuntimeError as e:
        run.syncs_raised = str(e).splitlines()[0] if str(e) else repr(e)
    finally:
        if sync_mode is not None:
            torch.cuda.set_sync_debug_mode(0)
    return run


def copy_to_host(torch, t, run: LoopRun):
    """SGLang's copy of a result to the CPU: `.to("cpu", non_blocking=True)`. Should this
    torch's detector call that a synchronization (a finding: SGLang's own copy would be
    counted each cycle), a copy into pinned memory stands in and the run says so."""
    if run.copy == "to":
        try:
            return t.to("cpu", non_blocking=True)
        except RuntimeError as e:
            run.copy = f"pinned copy_ (to('cpu', non_blocking=True) raised: {e})"
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    return out


def drain(rec: Recorder, want: int, timeout_s: float = 30.0) -> None:
    """Resolve what is left by polling (outside the measured loop)."""
    end = time.perf_counter() + timeout_s
    while len(rec.collected.cycles) < want and time.perf_counter() < end:
        rec.profiler.poll()
        time.sleep(0.001)


# -- calibration and verdicts ----------------------------------------------------------------


def calibrate(torch, units) -> float:
    """GPU ms of one unit of work, `units(n)` running n of them (outside the loop:
    synchronizing is fine here). gpu_check.py's synthetic worker calibrates here too."""
    units(4)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    units(40)
    b.record()
    b.synchronize()
    return max(a.elapsed_time(b) / 40, 1e-4)


def rel(a: float, b: float) -> float:
    return abs(a - b) / b if b > 0 else (0.0 if a == 0 else float("inf"))


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def loop_figures(
    cycles,
    run: LoopRun,
    phase_ms: dict,
    host_ms: dict,
    n: int,
    span_ms: float | None,
    last_gap_ms: tuple[float, float] | None,
) -> dict:
    """Figures and verdicts of one regime (plain Python: tested on CPU)."""
    from sgl_eagle_ext.common import figures
    from sgl_eagle_ext.profiling.phases import PHASES
    from sgl_eagle_ext.profiling.recorder import window

    steady = cycles[WARMUP:-1]  # the last cycle's gap is closed by on_idle: apart
    periods = [(b - a) * 1000 for a, b in zip(run.launches[WARMUP:], run.launches[WARMUP + 1 :])]
    rec_cycle = mean(c.ms["cycle"] for c in steady)
    wall_cycle = mean(periods)
    phases = {p: mean(c.ms.get(p, 0.0) for c in steady) for p in PHASES}
    step = mean(c.ms["step"] for c in steady)
    host = mean(c.ms["host"] for c in steady)
    expected_step = sum(phase_ms.values())
    gpu_bound = expected_step > sum(host_ms.values())
    last = cycles[-1] if cycles else None
    total_rec = sum(c.ms["cycle"] for c in cycles)
    f = {
        "cycles_launched": len(run.launches),
        "cycles_resolved": len(cycles),
        "accept_len": window.summarize(cycles, 0, "cuda").accept_len if cycles else None,
        "sync_error": run.syncs_raised,
        "result_copy": "to('cpu', non_blocking=True)" if run.copy == "to" else run.copy,
        "recorder_cycle_ms": rec_cycle,
        "host_launch_period_ms": wall_cycle,
        "recorder_step_ms": step,
        "recorder_host_ms": host,
        "recorder_phase_ms": phases,
        "calibrated_phase_ms": phase_ms,
        "host_work_ms": sum(host_ms.values()),
        "last_cycle": {
            "recorder_ms": last.ms["cycle"] if last else None,
            "recorder_host_ms": last.ms.get("host") if last else None,
            "independent_gap_ms": last_gap_ms[0] if last_gap_ms else None,
            "independent_gap_after_idle_ms": last_gap_ms[1] if last_gap_ms else None,
        },
        "recorder_total_ms": total_rec,
        "independent_span_ms": span_ms,
        "launch_host_ms": mean(s * 1000 for s in run.launch_s),
    }
    checks = {
        "no_sync": run.syncs_raised is None,
        "all_resolved": len(cycles) == n == len(run.launches),
        "accept_joined": f["accept_len"] == figures.per_cycle(ACCEPTED_DRAFTS),
        "cycle_vs_wall": rel(rec_cycle, wall_cycle) <= TOL,
        "total_vs_independent_events": span_ms is not None and rel(total_rec, span_ms) <= TOL,
    }
    if gpu_bound:  # the GPU's own time: phases as calibrated, no host gap
        checks["phases_vs_calibrated"] = all(
            rel(phases[p], ms) <= PHASE_TOL for p, ms in phase_ms.items()
        )
        checks["host_near_zero"] = host <= TOL * rec_cycle
    else:  # the GPU waits for the host: the gap is the host's work
        checks["host_vs_wall_minus_step"] = rel(host, wall_cycle - step) <= TOL
    # the last gap: from the last step's end (forward stream) to on_idle's mark on the
    # schedule stream; between our own events just before and just after the on_idle call
    # (5% or 20 us of slack each side), so a host descheduled inside the call (a crowded
    # CI host) widens the bracket rather than failing a correct mark
    lg = last.ms.get("host", -1.0) if last is not None else -1.0
    if last_gap_ms is None:
        checks["last_gap_closed_from_schedule_stream"] = False
    else:
        lo, hi = last_gap_ms
        checks["last_gap_closed_from_schedule_stream"] = (
            lo - max(TOL * lo, 0.02) <= lg <= hi + max(TOL * hi, 0.02)
        )
    f["checks"] = checks
    f["ok"] = all(checks.values())
    return f


# -- sections ---------------------------------------------------------------------------------


def run_regime(torch, name: str, n: int | None = None) -> dict:
    n = n or CYCLES
    phase_ms, host_ms = REGIMES[name]
    worker = Worker(torch)
    unit = calibrate(torch, lambda n: worker.units(worker.x, n))
    worker.reps = {p: max(1, round(ms / unit)) for p, ms in phase_ms.items()}
    calibrated = {p: worker.reps[p] * unit for p in phase_ms}
    rec = install(torch)
    try:
        run = overlap_loop(torch, worker, Scheduler(), n, host_ms, rec.instrument._accept_attr)
        drain(rec, n if run.syncs_raised is None else 0)  # a stopped loop has no idle call
        torch.cuda.synchronize()
        done = run.ref_end is not None and run.ref_start is not None
        span = run.ref_start.elapsed_time(run.ref_end) if done else None
        # no event after the call when on_idle raised (a sync in "error" mode): no bracket
        ends = (run.ref_end, run.ref_after_idle)
        gap = (
            tuple(max(0.0, run.ref_step_end.elapsed_time(e)) for e in ends)
            if done and run.ref_after_idle is not None
            else None
        )
        cycles = [c for c in rec.collected.cycles if c.kind == "decode"]
    finally:
        uninstall(rec)
    f = loop_figures(cycles, run, calibrated, host_ms, n, span, gap)
    f["unit_ms"] = unit
    f["regime"] = name
    return f


def capture_section(torch) -> dict:
    """A wrapped method inside a CUDA-graph capture, and a mark taken inside one."""
    worker = Worker(torch)
    rec = install(torch)
    inside = {"wrapped_marks": None, "direct_mark": None}
    try:
        warm = torch.cuda.Stream()
        warm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm):
            worker.units(worker.x, 2)
        torch.cuda.current_stream().wait_stream(warm)
        prof = rec.profiler
        prof.begin("decode", BATCH, 4)  # a cycle opened outside the capture
        before = dict(prof.tracker.current.marks)
        pending = len(prof.tracker.pending)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            worker.draft(Batch([None]))  # wrapped: the base steps aside in capture
            inside["wrapped_marks"] = sorted(set(prof.tracker.current.marks) - set(before))
            prof.mark("draft_start")  # past the base: the clock gives None
            inside["direct_mark"] = prof.tracker.current.marks.get("draft_start")
        graph.replay()
        ended = prof.end()
        dropped = ended is None and len(prof.tracker.pending) == pending
        torch.cuda.synchronize()
    finally:
        uninstall(rec)
    ok = inside["wrapped_marks"] == [] and inside["direct_mark"] is None and dropped
    return {
        "ok": ok,
        "wrapped_call_in_capture_marks": inside["wrapped_marks"],
        "mark_in_capture": repr(inside["direct_mark"]),
        "cycle_dropped": dropped,
    }


def mark_cost_section(torch, pairs: int = 3, n: int = 60) -> dict:
    """GPU time per cycle with and without the recorder (GPU-bound loop, alternated),
    the host time of a launch with and without, and one event record's GPU cost."""
    phase_ms, host_ms = REGIMES["gpu-bound"]
    worker = Worker(torch)
    unit = calibrate(torch, lambda n: worker.units(worker.x, n))
    worker.reps = {p: max(1, round(ms / unit)) for p, ms in phase_ms.items()}
    from sgl_eagle_ext.profiling.recorder import instrument

    attr = instrument._accept_attr
    per = {"with": [], "without": []}
    launch = {"with": [], "without": []}
    for _ in range(pairs):
        for arm in ("with", "without"):
            rec = install(torch) if arm == "with" else None
            try:
                run = overlap_loop(torch, worker, Scheduler(), n, host_ms, attr, sync_mode=None)
                torch.cuda.synchronize()
            finally:
                if rec is not None:
                    uninstall(rec)
            per[arm].append(run.ref_start.elapsed_time(run.ref_end) / n)
            launch[arm].append(mean(s * 1000 for s in run.launch_s[WARMUP:]))
    # one event record between GPU-bound kernels: its cost on the GPU timeline
    k = 200
    small = worker.x
    times = {}
    for arm in ("plain", "events"):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(k)]
        worker.units(worker.x, max(1, round(20.0 / unit)))  # 20 ms queued: the host
        a.record()  # runs ahead, so the interval below is the GPU's own time
        for i in range(k):
            worker.units(small, 1)
            if arm == "events":
                evs[i].record()
        b.record()
        b.synchronize()
        times[arm] = a.elapsed_time(b)
    per_event_us = (times["events"] - times["plain"]) / k * 1000
    return {
        "gpu_ms_per_cycle_with": per["with"],
        "gpu_ms_per_cycle_without": per["without"],
        "gpu_ms_per_cycle_delta": mean(per["with"]) - mean(per["without"]),
        "launch_host_ms_with": mean(launch["with"]),
        "launch_host_ms_without": mean(launch["without"]),
        "launch_host_ms_delta": mean(launch["with"]) - mean(launch["without"]),
        "event_record_gpu_us": per_event_us,
        "marks_per_cycle": MARKS_PER_CYCLE,
        "marks_gpu_us_per_cycle": per_event_us * MARKS_PER_CYCLE,
        "note": "a kernel of ~unit work between records; deltas under the run-to-run "
        "spread are noise",
    }


def sync_candidates(torch):
    """name -> a call that may synchronize (what SGLang's code does somewhere)."""
    x = torch.ones(4, device="cuda")
    s = torch.cuda.current_stream()
    e = torch.cuda.Event()
    e.record()
    return {
        "torch.cuda.synchronize()": lambda: torch.cuda.synchronize(),
        "Stream.synchronize()": lambda: s.synchronize(),
        "Event.synchronize()": lambda: e.synchronize(),
        "Event.query()": lambda: e.query(),
        "tensor.item()": lambda: x.sum().item(),
        "tensor.tolist()": lambda: x.tolist(),
        "tensor.cpu()": lambda: x.cpu(),
        "tensor.to('cpu', non_blocking=True)": lambda: x.to("cpu", non_blocking=True),
        "bool(tensor)": lambda: bool(x[0]),
        "torch.nonzero(tensor)": lambda: torch.nonzero(x),
    }


def sync_section(torch) -> dict:
    """What the sync check counts, call by call, through recorder/syncs.py; then a loop
    whose 3rd cycle calls .item(): syncs per cycle through the real path."""
    from sgl_eagle_ext.profiling.recorder import syncs

    counted: dict[str, int] = {}
    box = [0]
    undo = syncs.watch_device_syncs(lambda: box.__setitem__(0, box[0] + 1), torch)
    try:
        for name, call in sync_candidates(torch).items():
            box[0] = 0
            try:
                call()
            except Exception as e:  # a call this torch cannot make: said, not counted
                counted[name] = f"raised {type(e).__name__}"
                continue
            counted[name] = box[0]
    finally:
        undo()
    worker = Worker(torch)
    worker.sync_in_step = 2
    rec = install(torch, sync_check=True)
    try:
        run = overlap_loop(
            torch,
            worker,
            Scheduler(),
            5,
            {"schedule": 0.0, "process": 0.0},
            rec.instrument._accept_attr,
            sync_mode=None,
        )
        drain(rec, 5)
        per_cycle = [c.syncs for c in rec.collected.cycles if c.kind == "decode"]
    finally:
        uninstall(rec)
    ok = per_cycle == [0, 0, 1, 0, 0] and counted.get("tensor.item()") == 1
    return {
        "ok": ok,
        "counted_per_call": counted,
        "loop_syncs_per_cycle": per_cycle,
        "loop_error": run.syncs_raised,
    }


def run_all(torch, say=print) -> dict:
    """Every recorder section; a section that cannot run is a failure with its reason."""
    out: dict = {}
    for name, fn in (
        ("loop-gpu-bound", lambda: run_regime(torch, "gpu-bound")),
        ("loop-host-bound", lambda: run_regime(torch, "host-bound")),
        ("capture", lambda: capture_section(torch)),
        ("mark-cost", lambda: mark_cost_section(torch)),
        ("sync-count", lambda: sync_section(torch)),
    ):
        t = time.monotonic()
        try:
            out[name] = fn()
        except Exception as e:
            out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out[name]["seconds"] = round(time.monotonic() - t, 2)
        say(summary_line(name, out[name]))
    return out


def summary_line(name: str, f: dict) -> str:
    if "error" in f:
        return f"FAIL recorder {name}: {f['error']}"
    if name.startswith("loop"):
        bad = [k for k, v in f["checks"].items() if not v]
        return (
            f"{'PASS' if f['ok'] else 'FAIL'} recorder {name}: {f['cycles_resolved']}/"
            f"{f['cycles_launched']} cycles, recorder cycle {f['recorder_cycle_ms']:.3f} ms vs "
            f"launch period {f['host_launch_period_ms']:.3f} ms, host {f['recorder_host_ms']:.3f}"
            f" ms, accept_len {f['accept_len']}" + (f"; failed: {', '.join(bad)}" if bad else "")
        )
    if name == "mark-cost":
        return (
            f"INFO recorder mark-cost: GPU {f['gpu_ms_per_cycle_delta'] * 1000:+.1f} us/cycle "
            f"(loop with vs without), {f['event_record_gpu_us']:.2f} us per event record, "
            f"host {f['launch_host_ms_delta'] * 1000:+.1f} us per launch"
        )
    return f"{'PASS' if f.get('ok') else 'FAIL'} recorder {name}: " + ", ".join(
        f"{k}={v}" for k, v in f.items() if k not in ("ok", "seconds")
    )
