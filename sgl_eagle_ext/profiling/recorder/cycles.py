"""Speculation cycles: marks taken in the hot path, durations read later.

One `Cycle` is one call of the EAGLE worker's step: a decode cycle (draft ->
target verify forward -> accept/sample -> draft-extend) or a prefill (target
extend + draft extend, counted apart). Marks come from a clock (clock.py) and
are named in the phase table (profiling/phases.py); a
cycle is resolved only when all its marks have completed on the device and,
for decode, the accepted-token counts have been joined from the CPU side.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sgl_eagle_ext.profiling.phases import CYCLE, SPANS

MAX_PENDING = 256  # cycles waiting for their device marks or accept counts


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


@dataclass
class Resolved:
    kind: str
    bs: int
    draft_tokens: int
    ms: dict[str, float]  # SPANS names present -> milliseconds
    accepted: list[int]
    syncs: int
    steps: int | None = None


class CycleTracker:
    def __init__(self, clock):
        self.clock = clock
        self.current: Cycle | None = None
        self.pending: deque[Cycle] = deque()
        self.dropped = 0

    def begin(self, kind: str, bs: int, draft_tokens: int) -> Cycle:
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
        while len(self.pending) > MAX_PENDING:  # an accept count that never came
            old = self.pending.popleft()
            self.clock.release(*old.marks.values())
            self.dropped += 1
        return c

    def poll(self) -> list[Resolved]:
        """Cycles whose marks completed and whose accept counts arrived; never blocks."""
        done, keep = [], deque()
        for c in self.pending:
            joined = c.kind != "decode" or c.accepted is not None
            if joined and all(self.clock.ready(m) for m in c.marks.values()):
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
        self.clock.release(*c.marks.values())
        return Resolved(c.kind, c.bs, c.draft_tokens, ms, c.accepted or [], c.syncs, c.steps)
