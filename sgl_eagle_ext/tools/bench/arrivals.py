"""Open-loop arrival schedules: when each request of a request-rate level is sent.

Gaps between arrivals are gamma-distributed with shape = burstiness and mean
1/rate, as sglang.bench_serving draws them: burstiness 1 is a Poisson process
(exponential gaps), below 1 burstier, above 1 more regular. The first request
goes at 0. A schedule depends only on (seed, rate, burstiness), so every arm of
an A/B or compare run sees the same arrivals.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK = 4096  # gaps drawn per step while filling a --duration


def _rng(seed: int, rate: float, burstiness: float) -> np.random.Generator:
    # Exact float bits in the seed: rates 1.5 and 1.50001 get different streams.
    bits = [int(x) for x in np.array([rate, burstiness], dtype=np.float64).view(np.uint64)]
    return np.random.default_rng([seed, *bits])


def gaps(rng: np.random.Generator, n: int, rate: float, burstiness: float) -> np.ndarray:
    """`n` inter-arrival gaps in seconds, mean 1/rate, shape `burstiness`."""
    return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


def schedule(
    rate: float,
    burstiness: float = 1.0,
    seed: int = 0,
    *,
    count: int | None = None,
    duration: float | None = None,
) -> np.ndarray:
    """Send times (seconds from the level's start) of `count` arrivals, or of every
    arrival before `duration` seconds when a duration is given."""
    if not (rate > 0 and math.isfinite(rate)) or not burstiness > 0:
        raise ValueError("rate and burstiness must be positive and finite")
    rng = _rng(seed, rate, burstiness)
    if duration is None:
        if not count:
            return np.zeros(0)
        return np.concatenate(([0.0], np.cumsum(gaps(rng, count - 1, rate, burstiness))))
    times = [np.zeros(1)]
    last = 0.0
    while last < duration:
        block = last + np.cumsum(gaps(rng, BLOCK, rate, burstiness))
        times.append(block)
        last = float(block[-1])
    out = np.concatenate(times)
    return out[out < duration]
