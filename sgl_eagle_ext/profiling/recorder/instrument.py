"""Version-gated, idempotent, reversible wrappers on SGLang's EAGLE workers.

Modelled on instrumentation libraries (an instrumentor with instrument()/
uninstrument() on the patching base, in_sglang_base/patching.py): every anchor comes
from the release table (releases.WorkerAnchors); if the release is unknown or any
anchor is missing, nothing is patched and one log line says why (fail closed), and
SGLang serves as usual. Wrappers only take marks (clock.py) and never synchronize.
"""

from __future__ import annotations

import atexit
import logging

from sgl_eagle_ext.common import figures, releases
from sgl_eagle_ext.in_sglang_base import patching
from sgl_eagle_ext.in_sglang_base.patching import resolve as resolve_anchor  # noqa: F401 (tests)
from sgl_eagle_ext.profiling import phases
from sgl_eagle_ext.profiling.names import LOGGER, TAG
from sgl_eagle_ext.profiling.recorder import syncs
from sgl_eagle_ext.profiling.recorder.clock import make_clock
from sgl_eagle_ext.profiling.recorder.config import Config
from sgl_eagle_ext.profiling.recorder.profiler import RESULT_ATTR, Profiler

logger = logging.getLogger(LOGGER)
SYNC_ANCHORS = (
    "torch.cuda:synchronize",
    "torch.cuda:Event.synchronize",
    "torch.cuda:Stream.synchronize",
)

# Server flags that make SGLang run an EAGLE worker no anchor wraps: profiling
# would say "on" and record nothing, so it fails closed instead.
UNWRAPPED_WORKERS = {"enable_multi_layer_eagle": "MultiLayerEagleWorkerV2"}

PROFILER: Profiler | None = None
SYNC_WATCH: syncs.FirstDecode | None = None  # CUDA sync check: armed at the first decode
PATCHES = patching.Patches(TAG, logger=LOGGER, off="disabled, serving unprofiled")
# The release's GenerationBatchResult field with the accept counts (Release.accept_counts_attr).
_accept_attr = releases.PRIMARY.accept_counts_attr
# This process's decision (True: instrumented, False: refused), made once: the
# scheduler entry and SGLang's plugin entry point (0.5.13+) both ask.
_decision: bool | None = None


# -- batch facts (no device reads) ---------------------------------------------
def _batch_of(args, kwargs):
    if args:
        return args[0]
    for key in ("batch", "model_worker_batch"):
        if kwargs.get(key) is not None:
            return kwargs[key]
    return None


def _kind(batch, worker=None) -> str | None:
    mode = getattr(batch, "forward_mode", None)
    if mode is None or mode.is_idle():
        return None
    if getattr(batch, "is_extend_in_batch", False) and not (
        # SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION (0.5.21+): a decode rank drafts and
        # verifies while another rank extends: a decode cycle with accept counts.
        mode.is_decode() and getattr(worker, "enable_dp_spec_prefill_coordination", False)
    ):
        # DP attention: another rank extends, so this decode batch takes the worker's
        # prefill path (no verify, no accept counts to join).
        return "prefill"
    if mode.is_decode():
        return "decode"
    if mode.is_extend():
        return "prefill"
    return None


def _batch_size(batch) -> int:
    reqs = getattr(batch, "reqs", None)
    if reqs is not None:
        return len(reqs)
    return int(batch.seq_lens.shape[0])


def _accepted_from(result) -> list[int] | None:
    """Per-request tokens per cycle, bonus included (SGLang's accept length unit)."""
    drafts = getattr(result, _accept_attr, None)  # accepted drafts, bonus excluded
    if drafts is not None:
        return [figures.per_cycle(d) for d in drafts]
    return None


def _int_attr(obj, name: str) -> int | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) else None


# -- wrappers ----------------------------------------------------------------------
def _step(wrapped, instance, args, kwargs):
    prof = PROFILER
    kind = _kind(_batch_of(args, kwargs), instance) if prof is not None else None
    if kind is None:
        if prof is not None:  # an idle batch (DP attention): no host work of a cycle
            prof.idle_starts()
        return wrapped(*args, **kwargs)
    cycle = prof.begin(
        kind,
        _batch_size(_batch_of(args, kwargs)),
        int(getattr(instance, "speculative_num_draft_tokens", 0) or 0),
    )
    if cycle is not None and SYNC_WATCH is not None:  # a profiled rank's cycle
        SYNC_WATCH.cycle(kind)
    try:
        result = wrapped(*args, **kwargs)
    finally:
        if cycle is not None:  # what this cycle ran: adaptive switches at its start
            cycle.steps = _int_attr(instance, "speculative_num_steps")
            cycle.draft_tokens = _int_attr(instance, "speculative_num_draft_tokens") or 0
        prof.end()
    if cycle is not None and kind == "decode" and result is not None:
        accepted = _accepted_from(result)  # v1: already on the CPU in the result
        if accepted is not None:
            prof.join(cycle, accepted)
            prof.poll()
        else:  # v2: joined when the scheduler resolves this result
            try:
                setattr(result, RESULT_ATTR, cycle)
            except AttributeError:
                pass
    return result


def _phase(start: str | None, end: str | None, only_if: str | None = None):
    """The wrapper of a role that only takes marks (phases.marks_of)."""

    def wrapper(wrapped, instance, args, kwargs):
        prof = PROFILER
        if prof is None or (only_if is not None and not kwargs.get(only_if)):
            return wrapped(*args, **kwargs)
        if start:
            prof.mark(start)
        try:
            return wrapped(*args, **kwargs)
        finally:
            if end:
                prof.mark(end)

    return wrapper


def _accept_join(wrapped, instance, args, kwargs):
    out = wrapped(*args, **kwargs)
    result = args[0] if args else kwargs.get("result")
    cycle = getattr(result, RESULT_ATTR, None)
    if cycle is not None and PROFILER is not None:
        accepted = _accepted_from(result)
        if accepted is not None:
            PROFILER.join(cycle, accepted)
            # The scheduler has waited for this result's copy to the CPU, so the
            # cycle's events are normally complete: resolve now, still non-blocking.
            PROFILER.poll()
    return out


def _count_sync(wrapped, instance, args, kwargs):
    if PROFILER is not None:
        PROFILER.count_sync()
    return wrapped(*args, **kwargs)


def _idle(wrapped, instance, args, kwargs):
    """The scheduler has no batch: the last cycle's gap ends here (before SGLang's idle
    sleep), and the partial window is written (a short run logs too)."""
    if PROFILER is not None:
        PROFILER.idle_starts()
    try:
        return wrapped(*args, **kwargs)
    finally:
        if PROFILER is not None:
            PROFILER.flush_idle()


# role (a WorkerAnchors field) -> its wrapper; the marks come from the phase table.
WRAPPERS = {
    phases.STEP_ROLE: _step,
    **{role: _phase(*phases.marks_of(role)) for role in phases.MARKED_ROLES},
    phases.ACCEPT_JOIN_ROLE: _accept_join,
    phases.IDLE_ROLE: _idle,
}


# -- instrumentor ----------------------------------------------------------------------
def is_instrumented() -> bool:
    return PATCHES.installed


def decided() -> bool | None:
    """This process's decision so far (None: not asked yet)."""
    return _decision


def instrument(
    config: Config,
    version: str | None = None,
    device_is_cuda: bool | None = None,
    metrics=None,
    server_args=None,
) -> bool:
    """Patch the installed SGLang for profiling. Idempotent (decided once per process,
    one log line); False when refused. `metrics`: the counters, or a callable making
    them (called only when profiling goes on)."""
    global _decision
    if _decision is None:
        _decision = _instrument(config, version, device_is_cuda, metrics, server_args)
    return _decision


def _instrument(config, version, device_is_cuda, metrics, server_args) -> bool:
    global PROFILER, SYNC_WATCH, _accept_attr
    if PATCHES.installed:
        return True
    for flag, worker in UNWRAPPED_WORKERS.items():
        if getattr(server_args, flag, False):
            return PATCHES.refuse(
                f"--{flag.replace('_', '-')} runs {worker}, which profiling does not wrap"
            )
    release = PATCHES.release(version)
    if release is None:
        return False
    wraps = [
        patching.Wrap(anchor, WRAPPERS[role], label=f"{worker.worker} worker, phase '{role}'")
        for worker in release.workers
        for role, anchor in worker.anchors().items()
    ]
    plan = PATCHES.resolve(wraps, release=release.version)  # all anchors, before anything
    if plan is None:
        return False
    if device_is_cuda is None:
        import torch

        device_is_cuda = torch.cuda.is_available()
    sync_counted = syncs.select(config.sync_check, device_is_cuda)
    if sync_counted == syncs.EXPLICIT:
        counted = PATCHES.resolve([patching.Wrap(a, _count_sync) for a in SYNC_ANCHORS])
        if counted is None:
            return False
        plan += counted
    if callable(metrics):
        metrics = metrics()
    _accept_attr = release.accept_counts_attr
    PROFILER = Profiler(config, make_clock(device_is_cuda), metrics=metrics)
    PROFILER.sync_counted = sync_counted
    if not PATCHES.install(plan):  # refused during a CUDA-graph capture (one line said)
        PROFILER = None
        return False
    if sync_counted == syncs.DEVICE:  # not now: loading and capture synchronize by design
        SYNC_WATCH = syncs.FirstDecode(PROFILER.count_sync)
    atexit.register(flush)  # the partial window, when the scheduler exits normally
    _on_flush_signal()  # ... and when the server process asks before SGLang's SIGKILL
    ranks = "all" if config.ranks is None else ",".join(map(str, sorted(config.ranks)))
    PATCHES.say(
        logging.INFO,
        f"{TAG}: on (SGLang {release.version}, workers "
        f"{'+'.join(w.worker for w in release.workers)}, clock {PROFILER.clock_kind}, "
        f"ranks {ranks}, sync check {sync_counted})",
    )
    return True


def _on_flush_signal() -> None:
    """FLUSH_SIGNAL (in_sglang_base/profile_flush.py): write the window now. Python runs the
    handler between bytecodes of the main thread; a poll it interrupts finishes first."""
    import signal

    from sgl_eagle_ext.in_sglang_base.profile_flush import FLUSH_SIGNAL

    def handler(signum, frame):
        if PROFILER is not None:
            PROFILER.request_flush()

    try:
        signal.signal(FLUSH_SIGNAL, handler)
    except (ValueError, OSError):  # not the main thread: atexit and idle flushes remain
        pass


def flush() -> None:
    """Write what was measured (process exit); never raises."""
    try:
        if PROFILER is not None:
            PROFILER.poll()
            PROFILER.emit()
    except Exception:  # at exit, logging may be half torn down
        pass


def uninstrument() -> None:
    """Restore every original, newest patch first; flush what was measured."""
    global PROFILER, SYNC_WATCH, _decision
    _decision = None
    if SYNC_WATCH is not None:
        SYNC_WATCH.disarm()
        SYNC_WATCH = None
    if PROFILER is not None:
        PROFILER.poll()
        PROFILER.emit()
    PATCHES.uninstall()
    PROFILER = None
