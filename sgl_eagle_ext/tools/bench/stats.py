"""Summary statistics: mean, median, spread, 95% confidence interval, percentiles."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Two-sided 95% Student-t critical values by degrees of freedom (1..30);
# above 30 the normal value is within 2%.
# fmt: off
_T975 = (
    12.706,  4.303,  3.182,  2.776,  2.571,  2.447,  2.365,  2.306,  2.262,  2.228,  # df 1-10
     2.201,  2.179,  2.160,  2.145,  2.131,  2.120,  2.110,  2.101,  2.093,  2.086,  # df 11-20
     2.080,  2.074,  2.069,  2.064,  2.060,  2.056,  2.052,  2.048,  2.045,  2.042,  # df 21-30
)
# fmt: on
_Z975 = 1.960
PERCENTILES = (50, 90, 99)
STEADY_MAX_CV = 0.05  # default: runs spread more than 5% of the mean -> not steady
TREND_MIN_RUNS = 4


def t975(df: int) -> float:
    if df < 1:
        return math.nan
    return _T975[df - 1] if df <= len(_T975) else _Z975


@dataclass(frozen=True)
class Summary:
    """n, mean, median, min, max, stdev (sample), cv, and the mean's 95% CI (None
    where n is too small for it)."""

    n: int
    mean: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    stdev: float | None = None
    cv: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None


def summary(values) -> Summary:
    x = np.asarray(list(values), dtype=float)
    n = int(x.size)
    if n == 0:
        return Summary(0)
    mean = float(x.mean())
    stdev = float(x.std(ddof=1)) if n > 1 else None
    half = t975(n - 1) * stdev / math.sqrt(n) if stdev is not None else None
    return Summary(
        n=n,
        mean=mean,
        median=float(np.median(x)),
        min=float(x.min()),
        max=float(x.max()),
        stdev=stdev,
        cv=(stdev / mean) if stdev is not None and mean else None,
        ci95_low=mean - half if half is not None else None,
        ci95_high=mean + half if half is not None else None,
    )


def percentiles(values, ps=PERCENTILES) -> dict:
    """{"mean", "p50", "p90", "p99"} (None when there are no values)."""
    x = np.asarray(list(values), dtype=float)
    out = {"mean": float(x.mean()) if x.size else None}
    for p in ps:
        out[f"p{p}"] = float(np.percentile(x, p)) if x.size else None
    return out


def spread(values) -> dict:
    """std (population, as numpy and sglang.bench_serving), p95 and max (None if empty)."""
    x = np.asarray(list(values), dtype=float)
    if not x.size:
        return {"std": None, "p95": None, "max": None}
    return {"std": float(x.std()), "p95": float(np.percentile(x, 95)), "max": float(x.max())}


def trend(values) -> float | None:
    """Spearman rank correlation of the values with their order (-1..1)."""
    x = np.asarray(list(values), dtype=float)
    if x.size < TREND_MIN_RUNS or np.all(x == x[0]):
        return None
    ranks = np.argsort(np.argsort(x)).astype(float)
    order = np.arange(x.size, dtype=float)
    return float(np.corrcoef(order, ranks)[0, 1])


def steady_state_warnings(values, max_cv: float = STEADY_MAX_CV) -> list[str]:
    """Why a series of repeated runs does not look like a steady server."""
    s = summary(values)
    warnings = []
    if s.cv is not None and s.cv > max_cv:
        warnings.append(
            f"runs spread {s.cv * 100:.1f}% of the mean (stdev/mean; limit "
            f"{max_cv * 100:.0f}%): the server is not in a steady state (other "
            f"load, clocks or thermal throttling, too short a warm-up) or the "
            f"prompts differ a lot"
        )
    r = trend(values)
    if r is not None and abs(r) >= 0.9:
        way = "rising" if r > 0 else "falling"
        warnings.append(
            f"tok/s keeps {way} from run to run (rank correlation {r:+.2f}): "
            f"warm up longer (--warmup) or look for throttling"
        )
    return warnings
