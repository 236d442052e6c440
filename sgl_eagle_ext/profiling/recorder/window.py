"""A window of resolved cycles -> one summary: the profile record, a `record.Window`
(its log line and JSON form are written and read in profiling/record.py).

The record's fields: `cycle` is wall time, from a cycle's start to the next cycle's
start on the same stream (recorder/cycles.py says where a gap ends); `accept_len` is
tokens per request per verify cycle, bonus token included (SGLang's definition,
common/figures.py); `accept_hist` counts request-cycles by accepted tokens;
`tok_s` = accepted tokens / summed cycle time, the decode speed the window implies;
`share` is each row's percentage of summed cycle time: the phases, `other` (the step
minus its phases) and `host` (the gap after the step); what those two are depends on the
clock (phases.ROW_MEANING: on CUDA GPU-timeline time, on the CPU harness host time). `syncs` is off unless
EAGLE3_PROFILE_SYNC_CHECK=1; `syncs_counted` then says what was counted inside cycles
(recorder/syncs.py): `device-syncs` (CUDA: every synchronizing CUDA call, implicit
ones such as .cpu()/.tolist()/.item() included, via torch.cuda.set_sync_debug_mode) or
`explicit-synchronize-calls` (no CUDA: only torch.cuda synchronize() calls). A window is logged as
one line per (batch size, draft steps) it saw (profiler.py), so `bs` and `steps`
hold one value each; `steps=0` cycles (adaptive speculation stopped drafting)
are no-draft cycles: draft 0 ms, accept length 1. `steps` is absent when the
worker did not say.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.profiling.phases import PHASES
from sgl_eagle_ext.profiling.record import FORMAT_VERSION, Stats, Window, log_line
from sgl_eagle_ext.profiling.recorder.cycles import Resolved

__all__ = ["FORMAT_VERSION", "log_line", "summarize"]


def _stats(values, total: float) -> Stats:
    a = np.asarray(values, dtype=float)
    return Stats(
        mean=float(a.mean()),
        p50=float(np.percentile(a, 50)),
        p90=float(np.percentile(a, 90)),
        share=100 * float(a.sum()) / total if total else 0.0,
    )


def summarize(cycles: list[Resolved], rank: int, clock: str, dropped: int = 0) -> Window:
    """The record of a window (also the source of its log line)."""
    decode = [c for c in cycles if c.kind == "decode" and "cycle" in c.ms]
    prefill = [c for c in cycles if c.kind == "prefill" and "cycle" in c.ms]
    w = Window(
        rank=rank,
        cycles=len(decode),
        bs=dict(Counter(c.bs for c in decode)),
        draft_tokens=dict(Counter(c.draft_tokens for c in decode)),
        clock=clock,
        steps=dict(Counter(c.steps for c in decode if c.steps is not None)),
        prefill_n=len(prefill),
        prefill_ms=float(np.mean([c.ms["cycle"] for c in prefill])) if prefill else 0.0,
        syncs=sum(c.syncs for c in cycles),
        dropped=dropped,
        v=FORMAT_VERSION,
    )
    if not decode:
        return w
    wall = [c.ms["cycle"] for c in decode]
    total = float(sum(wall))
    rows = {p: [c.ms.get(p, 0.0) for c in decode] for p in PHASES}
    step = [c.ms.get("step", c.ms["cycle"]) for c in decode]
    rows["other"] = [s - sum(c.ms.get(p, 0.0) for p in PHASES) for s, c in zip(step, decode)]
    rows["host"] = [c.ms.get("host", 0.0) for c in decode]
    w.phases = {"cycle": _stats(wall, 0.0)}  # no share: it is the whole
    w.phases |= {p: _stats(v, total) for p, v in rows.items()}
    accepted = [a for c in decode for a in c.accepted]
    w.accept_len = figures.from_counts(sum(accepted), len(accepted))
    w.accept_hist = dict(Counter(accepted))
    w.tok_s = figures.tok_s(sum(accepted), total)
    return w
