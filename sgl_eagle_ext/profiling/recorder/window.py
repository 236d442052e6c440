"""A window of resolved cycles -> one summary: the profile record (its log line and
JSON form are written and read in profiling/record.py).

The record's fields: `accept_len` is tokens per request per verify cycle,
bonus token included (SGLang's definition); `accept_hist` counts requests by
accepted tokens; `tok_s` = accepted tokens / summed cycle time, the decode
speed the window implies; `share` is each phase's percentage of summed cycle
time, `other` the remainder (host work between phases). `syncs` is off unless
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

from sgl_eagle_ext.profiling.phases import PHASES
from sgl_eagle_ext.profiling.record import FORMAT_VERSION, log_line
from sgl_eagle_ext.profiling.recorder.cycles import Resolved

__all__ = ["FORMAT_VERSION", "log_line", "summarize"]


def _stats(values) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
    }


def summarize(cycles: list[Resolved], rank: int, clock: str, dropped: int = 0) -> dict:
    """The JSON record of a window (also the source of the log line)."""
    decode = [c for c in cycles if c.kind == "decode" and "cycle" in c.ms]
    prefill = [c for c in cycles if c.kind == "prefill" and "cycle" in c.ms]
    rec: dict = {
        "v": FORMAT_VERSION,
        "rank": rank,
        "clock": clock,
        "cycles": len(decode),
        "bs": dict(Counter(c.bs for c in decode)),
        "draft_tokens": dict(Counter(c.draft_tokens for c in decode)),
        "steps": dict(Counter(c.steps for c in decode if c.steps is not None)),
        "prefill": {
            "n": len(prefill),
            "ms_mean": float(np.mean([c.ms["cycle"] for c in prefill])) if prefill else 0.0,
        },
        "syncs": sum(c.syncs for c in cycles),
        "dropped": dropped,
    }
    if not decode:
        return rec
    total_cycle = sum(c.ms["cycle"] for c in decode)
    phases = {"cycle": _stats([c.ms["cycle"] for c in decode])}
    phase_sum = 0.0
    for p in PHASES:
        vals = [c.ms.get(p, 0.0) for c in decode]
        phases[p] = _stats(vals) | {"share": 100 * sum(vals) / total_cycle if total_cycle else 0}
        phase_sum += sum(vals)
    other = [c.ms["cycle"] - sum(c.ms.get(p, 0.0) for p in PHASES) for c in decode]
    phases["other"] = _stats(other) | {
        "share": 100 * (total_cycle - phase_sum) / total_cycle if total_cycle else 0
    }
    accepted = [a for c in decode for a in c.accepted]
    rec["phases"] = phases
    rec["accept_len"] = float(np.mean(accepted)) if accepted else None
    rec["accept_hist"] = dict(Counter(accepted))
    rec["tok_s"] = 1000 * sum(accepted) / total_cycle if total_cycle else None
    return rec
