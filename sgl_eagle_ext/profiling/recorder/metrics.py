"""Prometheus counters under the `sglang_ext:` prefix (never SGLang's `sglang:`).

Created only when SGLang's metrics are on (`--enable-metrics`): SGLang then runs
prometheus_client in multiprocess mode (PROMETHEUS_MULTIPROC_DIR), so counters
made in a scheduler process show up on the server's /metrics.
"""

from __future__ import annotations

import os

from sgl_eagle_ext.profiling.phases import PHASES


class PrometheusMetrics:
    def __init__(self):
        from prometheus_client import Counter

        self.cycles = Counter("sglang_ext:eagle_cycles", "Profiled speculation cycles", ["kind"])
        self.seconds = Counter(
            "sglang_ext:eagle_phase_seconds",
            "Time in each phase of the speculation cycle",
            ["phase"],
        )
        self.request_cycles = Counter(
            "sglang_ext:eagle_request_cycles", "Requests verified, summed over cycles"
        )
        self.accepted = Counter(
            "sglang_ext:eagle_accepted_tokens", "Tokens accepted per verify, bonus included, summed"
        )

    def observe(self, resolved) -> None:
        for c in resolved:
            self.cycles.labels(kind=c.kind).inc()
            phases = (*PHASES, "host", "cycle") if c.kind == "decode" else ("cycle",)
            for p in phases:
                if p in c.ms:
                    name = "prefill" if c.kind == "prefill" else p
                    self.seconds.labels(phase=name).inc(c.ms[p] / 1000)
            if c.kind == "decode":
                self.request_cycles.inc(len(c.accepted))
                self.accepted.inc(sum(c.accepted))


_made: PrometheusMetrics | None = None


def from_environment():
    """The process's counters (made once: a second registration would raise
    DuplicateTimeseries in prometheus_client's registry)."""
    global _made
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    if _made is None:
        try:
            _made = PrometheusMetrics()
        except ImportError:
            return None
    return _made
