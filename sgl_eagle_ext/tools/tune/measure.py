"""What the logs measured, per (batch size, draft steps): cycle time, phase times,
accept-length histogram; and the speculative settings of the server that wrote them.

Reads the same inputs as the report: EAGLE3_PROFILE log lines or JSON records
(steps from `steps=`, or draft tokens - 1 for windows of a chain without it),
SGLang's "Decode batch" lines of a baseline log, and SGLang's `server_args=`
line (speculative_num_steps / eagle_topk / num_draft_tokens / adaptive).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sgl_eagle_ext.common import chain
from sgl_eagle_ext.profiling.record import BAD_LINE, checked, find_record, read_lines
from sgl_eagle_ext.profiling.report import DECODE_BATCH

SERVER_ARGS = re.compile(r"server_args=(?:ServerArgs\()?(?P<body>\{.*\})")
SPEC_KEYS = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_adaptive",
    "speculative_draft_model_path",
)


@dataclass
class Cell:
    """All decode cycles of one (batch size, steps)."""

    cycles: int = 0
    ms: Counter = field(default_factory=Counter)  # phase -> summed mean*n (ms)
    hist: Counter = field(default_factory=Counter)  # accepted tokens per request -> count

    def mean(self, phase: str) -> float:
        return self.ms[phase] / self.cycles if self.cycles else 0.0

    @property
    def accept_len(self) -> float | None:
        n = sum(self.hist.values())
        return sum(k * v for k, v in self.hist.items()) / n if n else None


@dataclass
class Run:
    """One server log (or JSONL file)."""

    path: Path
    spec: dict = field(default_factory=dict)  # SPEC_KEYS found in server_args
    cells: dict = field(default_factory=dict)  # (bs, steps) -> Cell
    decode_tps: dict = field(default_factory=dict)  # bs -> [SGLang gen throughput]

    @property
    def setting(self) -> tuple[int, int, int] | None:
        s = self.spec
        keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        if all(isinstance(s.get(k), int) for k in keys):
            return tuple(s[k] for k in keys)
        return None


def _spec_from(line: str) -> dict:
    m = SERVER_ARGS.search(line)
    if not m:
        return {}
    try:
        args = ast.literal_eval(m["body"])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return {}  # not SGLang's dict (a list key is unhashable, a set has no keys)
    if not isinstance(args, dict):
        return {}
    return {k: args.get(k) for k in SPEC_KEYS if k in args}


def add_window(cells: dict, rec: dict, spec: dict | None = None) -> tuple[int, int] | None:
    """Add one profile window (a record from profiling/report.py's parser) to
    `cells` under its (batch size, steps); the key, or None for a window without
    decode cycles. `spec`: the server's speculative settings (older windows carry
    no steps: a chain's steps are its draft tokens - 1)."""
    if not rec.get("cycles") or (rec["phases"].get("cycle") or {}).get("mean", 1) <= 0:
        return None  # no cycle, or a cycle_ms=0 window: nothing measured
    spec = spec or {}
    bs_mix = {int(k): v for k, v in rec["bs"].items()}
    bs = max(bs_mix, key=bs_mix.get)
    steps_mix = {int(k): v for k, v in (rec.get("steps") or {}).items()}
    if steps_mix:
        steps = max(steps_mix, key=steps_mix.get)
    else:
        dt = {int(k): v for k, v in rec["draft_tokens"].items()}
        topk = spec.get("speculative_eagle_topk")
        steps = spec.get("speculative_num_steps")
        if topk == 1 or steps is None:
            steps = chain.steps_of(max(dt, key=dt.get))
    cell = cells.setdefault((bs, steps), Cell())
    n = rec["cycles"]
    cell.cycles += n
    for p, s in rec["phases"].items():
        cell.ms[p] += s["mean"] * n
    cell.hist.update({int(k): v for k, v in rec["accept_hist"].items()})
    return bs, steps


def read(path: Path) -> Run:
    run = Run(path)
    for line in read_lines(path):  # streamed twice: logs run to gigabytes
        if "server_args=" in line and not run.spec:
            run.spec = _spec_from(line)
            break
    for line in read_lines(path):
        try:
            rec = find_record(line)
            if rec is not None:
                add_window(run.cells, rec, run.spec)
            elif "Decode batch" in line and (m := DECODE_BATCH.search(line)):
                run.decode_tps.setdefault(int(m["bs"]), []).append(checked(float(m["tps"])))
        except BAD_LINE:
            continue  # a truncated line, or NaN / infinity (never averaged in)
    return run


def baseline_ms(runs: list[Run]) -> dict[int, float]:
    """Per-stream ms per token at each batch size, from baselines' Decode batch lines
    (their median: a line after an idle gap or a prefill reports a stray rate)."""
    tps: dict[int, list[float]] = {}
    for run in runs:
        for bs, values in run.decode_tps.items():
            tps.setdefault(bs, []).extend(v for v in values if v > 0)
    return {bs: 1000 * bs / float(np.median(v)) for bs, v in tps.items() if v}
