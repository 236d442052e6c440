"""Candidate steps per batch-size bucket, from predictions; the adaptive config.

Per measured batch size: the best step count by predicted gain. If drafting does
not pay there (best is 0, or no step beats the baseline), the bucket is [0]. Else
it lists every step count from 1 up to the best that still pays (SGLang's
controller walks down this ladder as the accept-length EMA falls) and 0 as the
floor when the margin is thin (best gain below `floor_margin`) or the release
allows it and the batch is not a single stream; SGLang drops to 0 only when
almost no draft is accepted. Consecutive batch sizes with the same list share
one bucket (keyed by the smallest; bucket "1" always exists). The file itself is
written and checked by common/adaptive_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.tools.tune.model import Prediction

MAX_CANDIDATES = 4  # each candidate is a prebuilt runtime state (graphs, memory)


@dataclass
class Choice:
    bs: int
    steps: list[int]
    best: Prediction | None
    why: str


def choose(
    preds: list[Prediction], min_step: int = 0, floor_margin: float = 1.15, min_gain: float = 1.03
) -> Choice:
    """`min_gain`: a step count "pays" only above this predicted gain (noise margin)."""
    bs = preds[0].bs if preds else 0
    rated = [p for p in preds if p.gain is not None]
    if not rated:
        return Choice(bs, [], None, "no baseline at this batch size: not tuned")
    best = max(rated, key=lambda p: p.gain)
    if best.steps == 0 or best.gain <= min_gain:
        drafting = max((p for p in rated if p.steps > 0), key=lambda p: p.gain, default=None)
        shown = f"best drafting {drafting.steps} steps {drafting.gain:.2f}x" if drafting else ""
        if min_step > 0:
            return Choice(bs, [1], best, f"drafting does not pay ({shown}); 1 is the least here")
        return Choice(bs, [0], best, f"drafting does not pay ({shown}): no draft")
    paying = [p.steps for p in rated if 1 <= p.steps <= best.steps and p.gain > min_gain]
    ladder = sorted(set(paying) | {best.steps})
    if len(ladder) > MAX_CANDIDATES - 1:  # keep the best and an even spread below it
        keep = [
            ladder[round(i * (len(ladder) - 1) / (MAX_CANDIDATES - 2))]
            for i in range(MAX_CANDIDATES - 1)
        ]
        ladder = sorted(set(keep) | {best.steps})
    floor = min_step == 0 and (best.gain < floor_margin or bs > 1)
    steps = ([0] if floor else []) + ladder
    why = f"best {best.steps} steps ({best.gain:.2f}x predicted)"
    if floor:
        # SGLang probes the smallest positive step after each interval at 0, for as
        # many batches: with no draft accepted, half the batches run that step.
        probe = next((p for p in rated if p.steps == ladder[0]), None)
        zero = next((p for p in rated if p.steps == 0), None)
        why += "; 0 as the floor"
        if probe and zero and probe.baseline_ms and zero.cycle_ms + probe.cycle_ms > 0:
            # one token from each of the two cycles (no draft accepted)
            floor_gain = figures.gain(2, zero.cycle_ms + probe.cycle_ms, probe.baseline_ms)
            why += (
                f" (a useless draft would still probe {ladder[0]} step(s) half the time: "
                f"~{floor_gain:.2f}x the baseline)"
            )
    return Choice(bs, steps, best, why)


def buckets(choices: list[Choice]) -> dict[str, list[int]]:
    """Consecutive batch sizes with the same list share one bucket."""
    table: dict[str, list[int]] = {}
    last = None
    for c in sorted(choices, key=lambda c: c.bs):
        if not c.steps or c.steps == last:
            continue
        table["1" if not table else str(c.bs)] = c.steps
        last = c.steps
    return table
