"""What a sweep level's load is: its axis (concurrencies or request rates), the
open-loop arrivals, what each request asks for, the latency goals (SLO), and the
record fields and words naming a level."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sgl_eagle_ext.tools.bench import arrivals as arr
from sgl_eagle_ext.tools.bench import client as cl


@dataclass(frozen=True)
class Axis:
    """What a sweep's levels are: concurrencies (closed loop) or request rates (open)."""

    key: str  # record field holding the level
    short: str  # in messages: c=4, rate=2/s
    unit: str

    def tag(self, value: float) -> str:
        return f"{self.short}={value:g}{self.unit}"


CONCURRENCY = Axis("concurrency", "c", "")
RATE = Axis("request_rate", "rate", "/s")


@dataclass
class OpenLoop:
    """Open-loop levels: the sweep's levels are request rates (req/s); inf is a burst."""

    burstiness: float = 1.0  # gamma shape of the gaps; 1 = Poisson
    duration: float | None = None  # seconds of arrivals per level (else a request count)
    arrival: str = "poisson"  # poisson, gamma, constant, or trace (the times below)
    max_concurrency: int | None = None  # at most this many in flight (bench_serving's)
    times: list[float] | None = None  # a trace's own arrival times (seconds, as replayed)
    speed: float = 1.0  # a trace replayed this many times faster (--trace-speed)
    ramp: tuple[str, float, float] | None = None  # vLLM's --ramp-up-*: (strategy, from, to)

    def schedule(self, rate: float, n: int, seed: int) -> np.ndarray:
        if self.times is not None:
            return np.asarray(self.times, dtype=np.float64)
        kind = "constant" if self.arrival == "constant" else "gamma"
        if self.ramp is not None:
            strategy, start, end = self.ramp
            return arr.ramp(strategy, start, end, n, self.burstiness, seed, kind)
        if self.duration:
            return arr.schedule(rate, self.burstiness, seed, duration=self.duration, kind=kind)
        return arr.schedule(rate, self.burstiness, seed, count=n, kind=kind)

    def arrival_at(self, rate: float) -> str:
        if self.ramp is not None:
            strategy, start, end = self.ramp
            return f"{self.arrival}, {strategy} ramp-up {start:g}->{end:g}/s"
        return "burst" if rate == math.inf else self.arrival

    @property
    def shape(self) -> float | None:
        """The gamma shape, for the records: None where it plays no part."""
        return self.burstiness if self.arrival in ("poisson", "gamma") else None


@dataclass
class Load:
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0

    def request_seed(self, i: int) -> int | None:
        return self.seed + i if self.temperature > 0 else None


@dataclass
class SLO:
    """Latency goals (ms) a request must meet to count toward goodput: ttft, tpot and
    e2e (sglang.bench_serving's --goodput keys, e2el there), itl (every token's)."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    source: str = ""
    e2e_ms: float | None = None
    itl_ms: float | None = None

    @property
    def set(self) -> bool:
        return bool(self.goals())

    @classmethod
    def of(cls, goals: dict[str, float]) -> SLO:
        """From --slo's parsed goals ({"ttft": 500, ...}: goodput.parse_slo)."""
        return cls(**{f"{k}_ms": v for k, v in goals.items()})

    def met_by(self, ok: bool, ttft_ms, tpot_ms, e2e_ms, itl_ms: list) -> bool:
        """The one goodput rule: an answered request within every goal set (ms); an itl
        goal holds for each of its gaps (met by a request without any)."""
        if not ok:
            return False
        for goal, value in (
            (self.ttft_ms, ttft_ms),
            (self.tpot_ms, tpot_ms),
            (self.e2e_ms, e2e_ms),
        ):
            if goal is not None and (value is None or value > goal):
                return False
        return self.itl_ms is None or max(itl_ms, default=0.0) <= self.itl_ms

    def met(self, r: cl.RequestResult) -> bool:
        def ms(s):
            return None if s is None else s * 1e3

        return self.met_by(r.ok, ms(r.ttft), ms(r.tpot), ms(r.e2e), [g * 1e3 for g in r.itls])

    def goals(self) -> dict:
        """The goals set, by their field names (tpot_ms, ttft_ms, e2e_ms, itl_ms)."""
        keys = ("tpot_ms", "ttft_ms", "e2e_ms", "itl_ms")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def describe(self) -> str:
        words = {
            "tpot_ms": "TPOT <= {:.1f} ms",
            "ttft_ms": "TTFT <= {:.0f} ms",
            "e2e_ms": "E2E <= {:.0f} ms",
            "itl_ms": "every ITL <= {:.1f} ms",
        }
        parts = [words[k].format(v) for k, v in self.goals().items()]
        return " and ".join(parts) + (f" ({self.source})" if self.source else "")

    def record(self) -> dict:
        out = {"tpot_ms": self.tpot_ms, "ttft_ms": self.ttft_ms, "source": self.source}
        out.update(
            {k: v for k, v in (("e2e_ms", self.e2e_ms), ("itl_ms", self.itl_ms)) if v is not None}
        )
        return out


def level_key(value: float, open_loop: OpenLoop | None, n: int | None = None) -> dict:
    """The record fields naming a level. A burst (rate inf) has no rate a JSON number
    can hold: it is recorded as arrival "burst", request_rate null, and its concurrency
    is what it kept in flight (--max-concurrency, else all `n` of its requests)."""
    if open_loop is None:
        return {"concurrency": value}
    shape = {
        "arrival": open_loop.arrival_at(value),
        "burstiness": open_loop.shape if value != math.inf else None,
        "max_concurrency": open_loop.max_concurrency,
    }
    if value == math.inf:
        return {"concurrency": open_loop.max_concurrency or n, "request_rate": None, **shape}
    return {"concurrency": None, "request_rate": value, **shape}


def describe_levels(
    levels: list[float], open_loop: OpenLoop | None, closed_duration: float | None = None
) -> str:
    text = ",".join(f"{v:g}" for v in levels)
    if open_loop is not None and open_loop.times is not None:
        t = open_loop.times
        pace = "own times" if open_loop.speed == 1 else f"times x{open_loop.speed:g} speed"
        return (
            f"trace replay: {len(t)} request(s) at the trace's {pace} over "
            f"{t[-1] - t[0]:.1f} s (mean {text} req/s)"
        )
    if open_loop is None:
        span = f", {closed_duration:g} s each" if closed_duration else ""
        return f"concurrency {text} (closed loop{span})"
    how = (
        "constant arrivals"
        if open_loop.arrival == "constant"
        else "Poisson arrivals"
        if open_loop.burstiness == 1
        else f"gamma arrivals, burstiness {open_loop.burstiness:g}"
    )
    if open_loop.ramp is not None:
        how = f"{open_loop.arrival_at(levels[-1])} over the level's requests"
    if levels and levels[-1] == math.inf:
        how = "inf = a burst, every request at once" + (f"; {how}" if len(levels) > 1 else "")
    cap = f", at most {open_loop.max_concurrency} in flight" if open_loop.max_concurrency else ""
    span = f", {open_loop.duration:g} s each" if open_loop.duration else ""
    return f"request rates {text} req/s (open loop, {how}{cap}{span})"
