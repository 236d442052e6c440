"""Open-loop arrival schedules: when each request of a request-rate level is sent.

poisson/gamma: gaps between arrivals are gamma-distributed with shape =
burstiness and mean 1/rate, as vLLM's --burstiness draws them: burstiness 1 is
a Poisson process (exponential gaps, sglang.bench_serving's only process), below 1
burstier, above 1 more regular. constant: every gap is exactly 1/rate. A rate of inf is a burst:
every request at 0 (sglang.bench_serving's --request-rate inf). The first request
goes at 0. A schedule depends only on (seed, rate, burstiness, kind), so every
arm of an A/B or compare run sees the same arrivals.
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
    kind: str = "gamma",
) -> np.ndarray:
    """Send times (seconds from the level's start) of `count` arrivals, or of every
    arrival before `duration` seconds when a duration is given. kind: "gamma" (or
    "poisson", burstiness 1) or "constant"."""
    if rate == math.inf and duration is None:
        return np.zeros(count or 0)  # a burst
    if not (rate > 0 and math.isfinite(rate)) or not burstiness > 0:
        raise ValueError("rate and burstiness must be positive and finite")
    if kind == "constant":
        n = (count or 0) if duration is None else math.ceil(duration * rate)
        times = np.arange(n, dtype=np.float64) / rate
        return times if duration is None else times[times < duration]
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


def ramp(
    strategy: str,
    start: float,
    end: float,
    n: int,
    burstiness: float = 1.0,
    seed: int = 0,
    kind: str = "gamma",
) -> np.ndarray:
    """vLLM's --ramp-up-*: send times of `n` arrivals whose rate goes from `start` to `end`
    req/s, request i at start + (end - start) * i/(n-1) (linear) or start * (end/start) **
    (i/(n-1)) (exponential); each gap drawn at its request's rate."""
    if n <= 1:
        return np.zeros(max(n, 0))
    progress = np.arange(1, n) / (n - 1)
    rates = (
        start + (end - start) * progress
        if strategy == "linear"
        else start * (end / start) ** progress
    )
    if kind == "constant":
        steps = 1.0 / rates
    else:
        rng = _rng(seed, end, burstiness)
        steps = rng.gamma(shape=burstiness, size=n - 1) / (rates * burstiness)
    return np.concatenate(([0.0], np.cumsum(steps)))
