"""The per-process profiler: cycles in, windows out (log line, JSON line, metrics)."""

from __future__ import annotations

import logging
import os
import time

from sgl_eagle_ext.profiling import record
from sgl_eagle_ext.profiling.names import LOGGER
from sgl_eagle_ext.profiling.record import Window
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.config import Config
from sgl_eagle_ext.profiling.recorder.cycles import Cycle, CycleTracker, Resolved

logger = logging.getLogger(LOGGER)
RESULT_ATTR = "_eagle_ext_cycle"  # set on GenerationBatchResult to join accept counts
# The scheduler's idle loop spins: a window is flushed once it has been idle this long
# (a short gap between batches does not split a window).
IDLE_FLUSH_S = 0.5


def current_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # no usable torch.distributed: a single rank
        return 0


class Profiler:
    def __init__(self, config: Config, clock, rank_fn=current_rank, metrics=None):
        self.config = config
        self.tracker = CycleTracker(clock)
        self.clock_kind = clock.kind
        self.rank_fn = rank_fn
        self.rank: int | None = None  # known at the first cycle (after dist init)
        self.active = True
        self.metrics = metrics
        self.window: list[Resolved] = []
        self.window_decode = 0  # decode cycles in the window (kept, not recounted)
        self.window_t0 = time.monotonic()
        self.records = 0
        self.idle_since: float | None = None
        self.sync_counted = "off"  # what syncs= counts (syncs.py), set by the instrumentor
        self.first_written = False  # the process's first decode cycle, a window of its own
        self._busy = 0  # inside poll/emit: a flush signal arriving then waits for them
        self._flush_wanted = False

    # -- hot path: marks only ------------------------------------------------
    def begin(self, kind: str, bs: int, draft_tokens: int) -> Cycle | None:
        if self.rank is None:
            self.rank = self.rank_fn()
            self.active = self.config.profiles_rank(self.rank)
        if not self.active:
            return None
        self.idle_since = None
        self.poll()
        return self.tracker.begin(kind, bs, draft_tokens)

    def mark(self, name: str) -> None:
        if self.tracker.current is not None:
            self.tracker.mark(name)

    def end(self) -> Cycle | None:
        return self.tracker.end()

    def count_sync(self) -> None:
        if self.tracker.current is not None:
            self.tracker.current.syncs += 1

    @staticmethod
    def join(cycle: Cycle, accepted: list[int]) -> None:
        cycle.accepted = list(accepted)

    # -- resolution, off the device's critical path ----------------------------
    def request_flush(self) -> None:
        """Write the window now (the server is stopping); deferred to the end of a poll
        it interrupts."""
        if self._busy:
            self._flush_wanted = True
            return
        self.emit()

    def _guarded(self, fn):
        self._busy += 1
        try:
            return fn()
        finally:
            self._busy -= 1
            if not self._busy and self._flush_wanted:
                self._flush_wanted = False
                self.request_flush()

    def poll(self) -> None:
        self._guarded(self._poll)

    def _poll(self, write: bool = True) -> None:
        done = self.tracker.poll()
        if done:
            self.window += done
            self.window_decode += sum(1 for c in done if c.kind == "decode")
            if self.metrics is not None:
                self.metrics.observe(done)
        due = (
            (self.window_decode >= self.config.cycles)
            if self.config.cycles > 0
            else (time.monotonic() - self.window_t0 >= self.config.interval_s)
        )
        # the first decode cycle carries JIT compilation and first allocations: a
        # window of its own, so the readers' warm-up rule can leave it out
        due = due or (not self.first_written and self.window_decode >= 1)
        if write and self.window and due:
            self._emit()

    def idle_starts(self) -> None:
        """The scheduler found no batch to run: the last cycle's gap ends now (what
        follows is waiting for requests, not host work), and it resolves now."""
        if self.active and self.tracker.close_gap():
            self.poll()

    def flush_idle(self, now: float | None = None) -> Window | None:
        """Called while the scheduler has no batch: once idle for IDLE_FLUSH_S, resolve
        what completed and write the partial window (a short run is logged too)."""
        if not self.active or self.rank is None:
            return None
        self.idle_starts()  # (the idle wrapper has ended the gap already)
        now = time.monotonic() if now is None else now
        if self.idle_since is None:
            self.idle_since = now
            return None
        if now - self.idle_since < IDLE_FLUSH_S:
            return None
        self.poll()
        if self.window and not self.tracker.pending:
            return self._guarded(self._emit)
        return None

    def emit(self) -> Window | None:
        """Write the window now (the server stops, or a test asks): a gap still open
        is closed with no host time (cycles.py), what completed is resolved."""

        def forced():
            self.tracker.close_gap(counted=False)
            self._poll(write=False)
            return self._emit()

        return self._guarded(forced)

    def _emit(self) -> Window | None:
        """Log the window: one record per (batch size, draft steps) of its decode
        cycles, so runs whose steps change at run time (adaptive) never mix; prefill
        counts go with the first. Returns the last record."""
        if not self.window:
            return None
        self.first_written = self.first_written or any(c.kind == "decode" for c in self.window)
        keyed: dict[tuple, list[Resolved]] = {}
        for c in self.window:
            if c.kind == "decode":
                keyed.setdefault((c.bs, c.steps), []).append(c)
        parts = list(keyed.values()) or [[]]
        parts[0] = parts[0] + [c for c in self.window if c.kind != "decode"]
        rec = None
        for part in parts:
            rec = window.summarize(part, self.rank or 0, self.clock_kind, self.tracker.dropped)
            rec.sync_counted = self.sync_counted
            rec.ts = time.time()
            self._write(rec)
        self.window, self.window_decode, self.window_t0 = [], 0, time.monotonic()
        return rec

    def _write(self, rec: Window) -> None:
        logger.info(record.log_line(rec))
        if self.config.file:
            path = self.config.file.replace("{rank}", str(self.rank or 0))
            line = record.json_line(rec)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:  # one write per record: appends from ranks never interleave
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        self.records += 1
