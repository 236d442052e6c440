"""Speculation cycles: marks taken in the hot path, durations read later.

One `Cycle` is one call of the EAGLE worker's step: a decode cycle (draft ->
target verify forward -> accept/sample -> draft-extend) or a prefill (target
extend + draft extend, counted apart). Marks come from a clock (clock.py) and
are named in the phase table (profiling/phases.py).

Wall time: a cycle lasts from its step's start to the NEXT step's start on the same
stream (CUDA events on the forward stream; the host clock on CPU). The part after its
step returned is `host`: the scheduler's work between cycles (processing this
result, receiving requests, scheduling the next batch); on a GPU, the time the stream
waited for the host. The gap rule: a gap ends at the next step's start, or at the
scheduler's first idle call after the step (instrument._idle, before SGLang's idle
sleep; or a step with an idle batch under DP attention): it found no batch to run, so
what follows is waiting for requests, not host work; the gap up to there is counted.
A gap still open when a window is forced out (the server stops) is closed with no
host time. A cycle is resolved only when all its marks have completed on the
device (read once query() says so: never a synchronize), its gap is closed and,
for decode, its accepted-token counts have been joined from the CPU side.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sgl_eagle_ext.profiling.phases import CYCLE, SPANS

MAX_PENDING = 256  # cycles waiting for their device marks, gap or accept counts
GAP_END = "next_start"  # mark: the next step's start (or the scheduler's idle call)


@dataclass
class Cycle:
    kind: str  # "decode" or "prefill"
    bs: int
    draft_tokens: int
    marks: dict = field(default_factory=dict)
    accepted: list[int] | None = None  # per request, tokens incl. the bonus token
    syncs: int = 0  # explicit synchronize calls seen inside (sync check)
    captured: bool = False  # a mark fell inside CUDA-graph capture: not timed
    # Draft steps the cycle ran (adaptive speculation changes them at run time;
    # 0 = no drafting, a plain decode through the 1-token verify). None: unknown.
    steps: int | None = None
    gap_closed: bool = False  # the gap after the step has ended (GAP_END, or no host)


@dataclass
class Resolved:
    kind: str
    bs: int
    draft_tokens: int
    # SPANS names present -> milliseconds; "step" the step alone, "host" the gap after
    # it, "cycle" their sum (wall: start to next start)
    ms: dict[str, float]
    accepted: list[int]
    syncs: int
    steps: int | None = None


class CycleTracker:
    def __init__(self, clock):
        self.clock = clock
        self.current: Cycle | None = None
        self.open: Cycle | None = None  # the last ended cycle, its gap still running
        self.pending: deque[Cycle] = deque()
        self.dropped = 0

    def close_gap(self, counted: bool = True) -> bool:
        """End the open cycle's gap now (`counted`: its host time runs until now);
        whether there was one."""
        c, self.open = self.open, None
        if c is None:
            return False
        if counted:
            m = self.clock.mark()
            if m is not None:  # None: inside a CUDA-graph capture, no host time
                c.marks[GAP_END] = m
        c.gap_closed = True
        return True

    def begin(self, kind: str, bs: int, draft_tokens: int) -> Cycle:
        self.close_gap()
        self.current = Cycle(kind, bs, draft_tokens)
        self.mark(CYCLE.opens.name)
        return self.current

    def mark(self, name: str) -> None:
        c = self.current
        if c is None:
            return
        m = self.clock.mark()
        if m is None:
            c.captured = True
        c.marks[name] = m

    def end(self) -> Cycle | None:
        c = self.current
        if c is None:
            return None
        self.mark(CYCLE.closes.name)
        self.current = None
        if c.captured:
            self.clock.release(*c.marks.values())
            return None
        self.pending.append(c)
        self.open = c
        while len(self.pending) > MAX_PENDING:  # an accept count that never came
            old = self.pending.popleft()
            if old is self.open:
                self.open = None
            self.clock.release(*old.marks.values())
            self.dropped += 1
        return c

    def poll(self) -> list[Resolved]:
        """Cycles whose marks completed, gap closed and accept counts arrived; never
        blocks."""
        done, keep = [], deque()
        for c in self.pending:
            joined = c.kind != "decode" or c.accepted is not None
            if joined and c.gap_closed and all(self.clock.ready(m) for m in c.marks.values()):
                done.append(self._resolve(c))
            else:
                keep.append(c)
        self.pending = keep
        return done

    def _resolve(self, c: Cycle) -> Resolved:
        ms = {}
        for name, (a, b) in SPANS.items():
            if a in c.marks and b in c.marks:
                ms[name] = self.clock.elapsed_ms(c.marks[a], c.marks[b])
        end = CYCLE.closes.name
        host = 0.0
        if GAP_END in c.marks and end in c.marks:
            host = max(0.0, self.clock.elapsed_ms(c.marks[end], c.marks[GAP_END]))
        if "cycle" in ms:
            ms["step"] = ms["cycle"]
            ms["host"] = host
            ms["cycle"] = ms["step"] + host
        self.clock.release(*c.marks.values())
        return Resolved(c.kind, c.bs, c.draft_tokens, ms, c.accepted or [], c.syncs, c.steps)
