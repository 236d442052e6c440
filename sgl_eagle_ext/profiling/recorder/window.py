"""A window of resolved cycles -> one summary: the log line and the JSON record.

Log line format (stable; one line per window per profiled rank; fields are
space-separated key=value, lists are comma-separated, mean/p50/p90 triplets are
slash-separated, times in ms):

  EAGLE3_PROFILE v=1 rank=0 cycles=40 bs=1:40 draft_tokens=16:40 steps=2:40
    cycle_ms=25.10/24.90/27.00 draft_ms=... verify_fwd_ms=... accept_ms=...
    draft_extend_ms=... other_ms=...
    share=draft:4.0,verify_fwd:90.0,accept:2.0,draft_extend:3.0,other:1.0
    accept_len=2.05 accept_hist=1:10,2:20,3:10 tok_s=81.70
    prefill=3/120.00 syncs=0 syncs_counted=device-syncs dropped=0 clock=cuda

(printed on one line). `accept_len` is tokens per request per verify cycle,
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

from sgl_eagle_ext.profiling.names import TAG
from sgl_eagle_ext.profiling.phases import PHASES
from sgl_eagle_ext.profiling.recorder.cycles import Resolved

FORMAT_VERSION = 1


def _stats(values) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
    }


def _mix(counter: Counter) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(counter.items()))


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


def _triplet(s: dict) -> str:
    return f"{s['mean']:.2f}/{s['p50']:.2f}/{s['p90']:.2f}"


def log_line(rec: dict) -> str:
    parts = [
        TAG,
        f"v={rec['v']}",
        f"rank={rec['rank']}",
        f"cycles={rec['cycles']}",
        f"bs={_mix(Counter(rec['bs']))}",
        f"draft_tokens={_mix(Counter(rec['draft_tokens']))}",
    ]
    if rec.get("steps"):
        parts.append(f"steps={_mix(Counter(rec['steps']))}")
    if rec["cycles"]:
        ph = rec["phases"]
        parts.append(f"cycle_ms={_triplet(ph['cycle'])}")
        parts += [f"{p}_ms={_triplet(ph[p])}" for p in (*PHASES, "other")]
        parts.append("share=" + ",".join(f"{p}:{ph[p]['share']:.1f}" for p in (*PHASES, "other")))
        acc = rec["accept_len"]
        parts.append(f"accept_len={acc:.2f}" if acc is not None else "accept_len=na")
        parts.append(f"accept_hist={_mix(Counter(rec['accept_hist']))}")
        parts.append(f"tok_s={rec['tok_s']:.2f}" if rec["tok_s"] is not None else "tok_s=na")
    parts.append(f"prefill={rec['prefill']['n']}/{rec['prefill']['ms_mean']:.2f}")
    counted = rec.get("sync_counted", "off")
    parts.append(
        "syncs=off" if counted == "off" else f"syncs={rec['syncs']} syncs_counted={counted}"
    )
    parts += [f"dropped={rec['dropped']}", f"clock={rec['clock']}"]
    return " ".join(parts)
