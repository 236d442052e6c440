"""EAGLE3_PROFILE=1: per-phase timing of SGLang's EAGLE worker, in the server log.

Modules: config (switches), clock (CUDA events / host clock, no syncs),
cycles (marks -> durations), window (summary, log line format), profiler
(per-process state), metrics (Prometheus), syncs (what the sync check counts),
instrument (the wrappers). FEATURE registers it in the in-process registry
(in_sglang_base/registry.py): every scheduler, through the launcher's server or SGLang's
plugin entry point; the launcher's server also flushes the schedulers' last windows.
"""

from __future__ import annotations

import os

from sgl_eagle_ext.common.contract import PROFILE_ENV, profile_enabled
from sgl_eagle_ext.in_sglang_base import registry


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


def _flush_before_sglang_kills(ctx) -> None:
    from sgl_eagle_ext.in_sglang_base import profile_flush

    profile_flush.install_parent()  # the last profile window survives a stop


def _flush_on_exit(ctx) -> None:
    from sgl_eagle_ext.in_sglang_base import profile_flush

    profile_flush.flush_schedulers()


FEATURE = registry.register(
    registry.Feature(
        PROFILE_ENV,
        enabled=profile_enabled,
        hooks={
            registry.SCHEDULER: lambda ctx: install_from_env(server_args=ctx.server_args),
            registry.LAUNCH: _flush_before_sglang_kills,
            registry.EXIT: _flush_on_exit,
        },
        order=registry.MEASURE,
    )
)
