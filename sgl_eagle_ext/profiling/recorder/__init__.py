"""EAGLE3_PROFILE=1: per-phase timing of SGLang's EAGLE worker, in the server log.

Modules: config (switches), clock (CUDA events / host clock, no syncs),
cycles (marks -> durations), window (summary, log line format), profiler
(per-process state), metrics (Prometheus), syncs (what the sync check counts),
instrument (the wrappers).
"""

from __future__ import annotations

import os


def install_from_env(version: str | None = None, server_args=None) -> bool:
    """Instrument this process if EAGLE3_PROFILE=1. Decided once per process: the
    scheduler entry and SGLang's plugin entry point (0.5.13+) both call it, and the
    second call neither patches nor registers the Prometheus counters again."""
    from sgl_eagle_ext.profiling.recorder import config, instrument, metrics

    if instrument.decided() is not None:
        return instrument.decided()
    cfg = config.from_env()
    if not cfg.enabled:
        return False
    device_is_cuda = None
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        device_is_cuda = False
    return instrument.instrument(
        cfg,
        version=version,
        device_is_cuda=device_is_cuda,
        metrics=metrics.from_environment,  # made only when profiling goes on
        server_args=server_args,
    )
