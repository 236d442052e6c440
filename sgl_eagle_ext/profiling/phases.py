"""The phase table: what EAGLE3_PROFILE times, and which SGLang method it wraps for it.

A decode cycle is one call of the EAGLE worker's step method: draft -> target
verify forward -> accept/sample -> draft-extend. Each phase is the time between
two MARKS; a mark is taken when a wrapped SGLang method is called (CALL) or
returns (RETURN). A method is named by its ROLE here; which method a role is
in a given SGLang release and worker generation is that release's
`WorkerAnchors` row in common/releases.py (the only place that knows it), e.g.
for SGLang 0.5.23 (v2 worker):

    role            SGLang method
    step            eagle_worker_v2:EAGLEWorkerV2.forward_batch_generation
    draft           eagle_worker_v2:EagleDraftWorker.draft
    target_forward  tp_worker:TpModelWorker.forward_batch_generation (is_verify=True only)
    verify          eagle_worker_v2:EAGLEWorkerV2.verify
    draft_extend    eagle_worker_v2:EagleDraftWorker._draft_extend_for_decode
    accept_join     batch_result_processor:SchedulerBatchResultProcessor._resolve_spec_v2_tokens
    idle            scheduler:Scheduler.on_idle (no mark: flushes a partial window)

`where(phase, release)` prints that answer for any release; the recorder
(recorder/instrument.py, recorder/cycles.py) and the report read PHASES and
SPANS from here.
"""

from __future__ import annotations

from dataclasses import dataclass

CALL, RETURN = "call", "return"


@dataclass(frozen=True)
class Mark:
    name: str  # key in a cycle's marks
    role: str  # the wrapped SGLang method: a WorkerAnchors field (common/releases.py)
    at: str  # CALL: before the method runs; RETURN: after it returns (or raises)
    # Taken only for calls whose keyword argument of this name is true: the
    # target's forward runs for prefill and decode too, verify passes is_verify=True.
    only_if: str | None = None


STEP_START = Mark("step_start", "step", CALL)
STEP_END = Mark("step_end", "step", RETURN)
DRAFT_START = Mark("draft_start", "draft", CALL)
DRAFT_END = Mark("draft_end", "draft", RETURN)
FWD_START = Mark("fwd_start", "target_forward", CALL, only_if="is_verify")
FWD_END = Mark("fwd_end", "target_forward", RETURN, only_if="is_verify")
VERIFY_END = Mark("verify_end", "verify", RETURN)
EXTEND_START = Mark("extend_start", "draft_extend", CALL)
EXTEND_END = Mark("extend_end", "draft_extend", RETURN)


@dataclass(frozen=True)
class Phase:
    name: str  # "<name>_ms" in the log line, a row of the report
    opens: Mark
    closes: Mark
    what: str


PHASE_TABLE: tuple[Phase, ...] = (
    Phase("draft", DRAFT_START, DRAFT_END, "every draft step, CUDA-graph replay included"),
    Phase("verify_fwd", FWD_START, FWD_END, "the target model's forward over the draft tree"),
    Phase(
        "accept",
        FWD_END,
        VERIFY_END,
        "accept/sample: from the verify forward's return to verify's return",
    ),
    Phase("draft_extend", EXTEND_START, EXTEND_END, "the draft's extend after decode"),
)
# The whole cycle (a prefill is one step too, counted apart); "other" in the log
# line is the step minus the phases above, "host" the gap after the step (ROW_MEANING).
CYCLE = Phase("cycle", STEP_START, STEP_END, "one call of the worker's step method")

# What the two derived rows are, by the clock that timed them (a window's `clock`):
# on CUDA the marks are events on the forward stream, so both rows are GPU-timeline
# time; on the CPU harness (host clock) every kernel has finished when its call
# returns, so they are host time.
ROW_MEANING: dict[str, dict[str, str]] = {
    "cuda": {
        "other": "GPU-timeline time in the step that no phase covers: waits on the plan "
        "stream, gaps between kernels, launches the GPU waited for",
        "host": "the forward stream's wait for the host between steps: result processing "
        "and scheduling the next batch",
    },
    "host": {
        "other": "host work in the step between its phases (Python in the worker)",
        "host": "the scheduler's host work between steps: result processing and "
        "scheduling the next batch",
    },
}


def row_meaning(row: str, clocks) -> str | None:
    """What `row` ("other", "host") is for windows timed by `clocks`; both named when
    they differ; None for an unknown clock."""
    known = [c for c in sorted(set(clocks)) if c in ROW_MEANING]
    if not known:
        return None
    if len(known) == 1:
        return ROW_MEANING[known[0]][row]
    return "; ".join(f"{c} clock: {ROW_MEANING[c][row]}" for c in known)


# Roles wrapped without marks: the step wrapper opens/closes the cycle itself and
# reads accept counts (v1); accept_join reads them where v2 delivers them; idle
# (the scheduler's housekeeping while it has no batch) writes a partial window.
STEP_ROLE, ACCEPT_JOIN_ROLE, IDLE_ROLE = "step", "accept_join", "idle"

PHASES: tuple[str, ...] = tuple(p.name for p in PHASE_TABLE)  # in cycle order
SPANS: dict[str, tuple[str, str]] = {
    p.name: (p.opens.name, p.closes.name) for p in (*PHASE_TABLE, CYCLE)
}


def marks_of(role: str) -> tuple[str | None, str | None, str | None]:
    """(mark at call, mark at return, only_if keyword) of the wrapper on `role`."""
    marks = {m for p in PHASE_TABLE for m in (p.opens, p.closes) if m.role == role}
    at = {m.at: m.name for m in marks}
    filters = {m.only_if for m in marks}
    assert len(filters) <= 1, f"marks of {role} disagree on their filter"
    return at.get(CALL), at.get(RETURN), next(iter(filters), None)


# Roles whose wrapper only takes marks (every role a phase boundary names, but the step).
MARKED_ROLES: tuple[str, ...] = tuple(
    dict.fromkeys(m.role for p in PHASE_TABLE for m in (p.opens, p.closes) if m.role != STEP_ROLE)
)


def where(phase: str, release) -> list[str]:
    """Per worker of `release` (a releases.Release): which SGLang method opens and
    closes `phase`, e.g. where("verify_fwd", BY_VERSION["0.5.23"])."""
    p = next(x for x in (*PHASE_TABLE, CYCLE) if x.name == phase)

    def side(worker, m: Mark) -> str:
        cond = f" with {m.only_if}=True" if m.only_if else ""
        return f"{'call of' if m.at == CALL else 'return from'} {getattr(worker, m.role)}{cond}"

    return [
        f"{w.worker}: {phase} opens at {side(w, p.opens)}; closes at {side(w, p.closes)}"
        for w in release.workers
    ]
