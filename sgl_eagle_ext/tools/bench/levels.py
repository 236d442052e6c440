"""A sweep's load levels from its flags: concurrencies (closed loop) or request rates
(open loop, with the arrival process), and the range checks every count flag shares."""

from __future__ import annotations

import math
from collections.abc import Callable

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import limits, loads
from sgl_eagle_ext.tools.bench import sweep as sw

DEFAULT_CONCURRENCY = ",".join(map(str, sw.DEFAULT_LEVELS))


def _values(text, flag: str, parse, what: str, fix: str) -> list:
    """A comma-separated list of `parse`d values, sorted and without repeats."""
    try:
        return sorted({parse(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise UserError(f"{flag} {text}: not a comma-separated list of {what}.", fix=fix) from None


def levels(text: str, flag: str = "--concurrency") -> list[int]:
    fix = f"e.g. {flag} 1,2,5,10,30"
    values = _values(text, flag, int, "integers", fix)
    if not values or values[0] < 1:
        raise UserError(f"{flag} {text}: levels must be integers >= 1.", fix=fix)
    limits.check_concurrency(values[-1], flag)
    return values


INF = math.inf
ARRIVALS = ("poisson", "gamma", "constant")


def rates(text: str, flag: str = "--request-rate") -> list[float]:
    """Request rates (req/s); `inf` is a burst: every request sent at once."""
    fix = f"e.g. {flag} 4, {flag} 1,2,4,8 or {flag} inf (a burst)"
    values = _values(text, flag, float, "numbers", fix)
    if not values or values[0] <= 0 or math.isnan(values[0]) or math.isnan(values[-1]):
        raise UserError(
            f"{flag} {text}: request rates must be positive numbers (req/s) or inf.", fix=fix
        )
    return values


def _closed_only(sweep) -> None:
    for flag, value, why in (
        ("--burstiness", sweep.burstiness, "shapes the gaps between open-loop arrivals"),
        ("--arrival", sweep.arrival, "shapes open-loop arrivals"),
        (
            "--max-concurrency",
            sweep.max_concurrency,
            "caps an open-loop level; with --concurrency the level is the cap",
        ),
    ):
        if value is not None:
            raise UserError(
                f"{flag} {why}: it needs --request-rate.",
                fix="add --request-rate R (e.g. 4, 1,2,4 or inf), or drop it",
            )


def arrival_kind(kind: str | None, burst: float | None) -> tuple[str, float]:
    """(arrival process, gamma shape) from --arrival and --burstiness."""
    if burst == INF:  # vLLM's spelling of even gaps: a gamma of infinite shape
        if kind not in (None, "constant"):
            raise UserError(
                f"--arrival {kind} with --burstiness inf: infinite burstiness is constant "
                "arrivals (every gap 1/rate).",
                fix="use --arrival constant (or --burstiness inf alone)",
            )
        return "constant", 1.0
    if burst is not None:
        positive("--burstiness", burst)
    if kind is None:
        kind = "poisson" if burst in (None, 1.0) else "gamma"
    if kind == "poisson" and burst not in (None, 1.0):
        raise UserError(
            f"--arrival poisson with --burstiness {burst:g}: Poisson is burstiness 1.",
            fix="use --arrival gamma --burstiness B, or drop --burstiness",
        )
    if kind == "constant" and burst is not None:
        raise UserError(
            "--arrival constant has no burstiness (every gap is 1/rate).",
            fix="drop --burstiness, or use --arrival gamma",
        )
    return kind, (1.0 if burst is None else burst)


def load_levels(sweep) -> tuple[list[float], loads.OpenLoop | None]:
    """The sweep's levels: concurrencies (closed loop) or request rates (open loop)."""
    rate_flag, text = "--request-rate", sweep.request_rate
    if sweep.duration is not None:
        positive("--duration", sweep.duration)
    if text is None:
        _closed_only(sweep)
        return levels(sweep.concurrency or DEFAULT_CONCURRENCY), None
    if sweep.concurrency is not None:
        raise UserError(
            f"--concurrency and {rate_flag} both given: a sweep's levels are one or the other.",
            fix="closed loop: --concurrency 1,2,4; open loop: --request-rate 1,2,4 "
            "(with --max-concurrency N to cap what is in flight)",
        )
    values = rates(text, rate_flag)
    kind, burst = arrival_kind(sweep.arrival, sweep.burstiness)
    cap = sweep.max_concurrency
    if cap is not None:
        positive("--max-concurrency", cap)
        limits.check_concurrency(cap, "--max-concurrency")
    if sweep.duration is not None and values[-1] == INF:
        raise UserError(
            f"{rate_flag} inf with --duration: a burst sends every request at once; "
            "it has no arrivals to spread over a duration.",
            fix="give a finite rate with --duration, or --concurrency N --duration S "
            "(closed loop for S seconds)",
        )
    return values, loads.OpenLoop(burst, sweep.duration, kind, cap, ramp=sweep.ramp_up)


# Upper bounds where a server would accept nonsense (a 20-digit --max-tokens makes
# SGLang generate until the context ends, or overflow): far above any real use.
MOST = {"--max-tokens": 1 << 20, "--runs": 100_000, "--num-prompts": 10_000_000}


def positive(name: str, value: float, zero_ok: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise UserError(
            f"{name} {value:g}: must be {'>= 0' if zero_ok else '> 0'}.",
            fix=f"pass a {'non-negative' if zero_ok else 'positive'} {name}",
        )
    if name in MOST and value > MOST[name]:
        raise UserError(f"{name} {value}: too large.", fix=f"pass at most {MOST[name]}")


def above(low: float, zero_ok: bool = False) -> Callable:
    """check=: a number > low (>= with zero_ok), and under levels.MOST where it has a cap."""

    def check(name: str, value):
        if value is not None:
            positive(name, value, zero_ok=zero_ok)
        return value

    return check
