"""Predicted tokens/s per (batch size, draft steps) against the baseline.

Acceptance: per-position conditional acceptance alpha_j (the chance that draft j is
accepted once drafts 1..j-1 were), pooled over every measured batch size and
step count from the windows' accept histograms (acceptance is a property of the
draft and the traffic, not of the batch). A chain of s steps then yields

    E[accept length | s] = 1 + sum_{j=1..s} alpha_1 * ... * alpha_j

tokens per request per cycle (bonus included; positions beyond the measured ones
reuse the last measured alpha). Cycle time: measured where (bs, s) was run,
else a straight line in s fitted to the steps measured at that batch size (one
point: its draft time per step as the slope); 0 steps not run: the baseline's
time per token plus the measured draft-extend pass (SGLang keeps it). Then

    predicted gain  = E[accept length | s] * baseline ms/token / cycle ms(s)
    break-even tau* = cycle ms(s) / baseline ms/token
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.profiling.aggregate import Cell


def position_acceptance(cells: dict[tuple[int, int], Cell]) -> list[float]:
    """alpha_1..alpha_K from every cell with steps >= 1 (K: the deepest measured),
    each cell's (reached, accepted) counts pooled position by position."""
    pooled: list[list[int]] = []
    for (_, steps), cell in cells.items():
        for j, counts in enumerate(figures.position_counts(cell.hist, steps)):
            if j == len(pooled):
                pooled.append([0, 0])
            pooled[j][0] += counts[0]
            pooled[j][1] += counts[1]
    return figures.conditional_acceptance([(r, a) for r, a in pooled])


expected_accept_len = figures.chain_accept_length


@dataclass
class Prediction:
    bs: int
    steps: int
    accept_len: float
    cycle_ms: float
    measured: bool  # cycle time measured at this (bs, steps), not fitted
    baseline_ms: float | None
    baseline_proxy: bool = False  # the baseline is the measured 0-step cycle

    @property
    def tok_s(self) -> float:
        return figures.cycle_tok_s(self.accept_len, self.bs, self.cycle_ms) or 0.0

    @property
    def break_even(self) -> float | None:
        return figures.break_even(self.cycle_ms, self.baseline_ms)

    @property
    def gain(self) -> float | None:
        return figures.gain(self.accept_len, self.cycle_ms, self.baseline_ms)


def cycle_model(bs_cells: dict[int, Cell]):
    """steps -> cycle ms at one batch size (None where it cannot be predicted)."""
    points = sorted((s, c.mean("cycle")) for s, c in bs_cells.items() if c.cycles)
    drafting = [(s, c) for s, c in bs_cells.items() if s > 0 and c.cycles]
    if len({s for s, _ in points}) >= 2:
        slope, icept = np.polyfit([s for s, _ in points], [m for _, m in points], 1)
        if slope < 0:  # noise larger than the draft cost: no trend to extrapolate
            slope, icept = 0.0, float(np.mean([m for _, m in points]))
    elif drafting:
        s, c = drafting[0]
        slope = c.mean("draft") / s
        icept = c.mean("cycle") - slope * s
    else:
        return lambda steps: bs_cells[0].mean("cycle") if steps == 0 and 0 in bs_cells else None

    def predict(steps: int) -> float:
        if steps in bs_cells and bs_cells[steps].cycles:
            return bs_cells[steps].mean("cycle")
        return float(icept + slope * steps)

    return predict


def predict(
    cells: dict[tuple[int, int], Cell],
    baseline: dict[int, float],
    max_steps: int,
    one_stream_ms: float | None = None,
) -> dict[int, list[Prediction]]:
    """bs -> predictions for steps 0..max_steps (those whose cycle time can be predicted)."""
    alphas = position_acceptance(cells)
    by_bs: dict[int, dict[int, Cell]] = {}
    for (bs, steps), cell in cells.items():
        by_bs.setdefault(bs, {})[steps] = cell
    out: dict[int, list[Prediction]] = {}
    for bs, bs_cells in sorted(by_bs.items()):
        model = cycle_model(bs_cells)
        base, proxy = baseline.get(bs), False
        if base is None and bs == 1 and one_stream_ms:
            base = one_stream_ms
        if base is None and 0 in bs_cells:  # no baseline at this size: the 0-step cycle
            base, proxy = bs_cells[0].mean("cycle"), True
        # 0 steps not run here: a baseline decode plus the draft-extend pass SGLang keeps
        drafting = [c for s, c in bs_cells.items() if s > 0 and c.cycles]
        extend = np.mean([c.mean("draft_extend") for c in drafting]) if drafting else 0.0
        preds = []
        for steps in range(max_steps + 1):
            cycle = model(steps)
            if steps == 0 and 0 not in bs_cells and base and not proxy:
                cycle = base + float(extend)
            if cycle is None or cycle <= 0:
                continue
            acc = expected_accept_len(alphas, steps)
            if steps in bs_cells and bs_cells[steps].accept_len is not None:
                acc = bs_cells[steps].accept_len  # measured here: use it
            preds.append(
                Prediction(bs, steps, acc, cycle, steps in bs_cells, base, baseline_proxy=proxy)
            )
        out[bs] = preds
    return out
