"""Fault injection for the launcher's own tests (EAGLE_EXT_FAULT, common/contract.py),
inside SGLang's scheduler processes. Each fault makes a real server hang the way a stuck
GPU host does, so the watchdog must name the phase and stop the whole tree:

  hang-scheduler  every scheduler hangs before SGLang starts in it (as a stuck
                  CUDA-graph capture does): the log stops before HTTP is up
  hang-warmup     the scheduler hangs in its first batch, the warm-up generation
                  (as a hung rank or collective does): HTTP is up, /health_generate
                  keeps answering 503 and each poll is logged, and nothing else moves
"""

from __future__ import annotations

import time

from sgl_eagle_ext.common.contract import FAULT_ENV
from sgl_eagle_ext.in_sglang_base import registry

HANG_SCHEDULER, HANG_WARMUP = "hang-scheduler", "hang-warmup"


def hang() -> None:
    while True:
        time.sleep(3600)


def apply(fault: str | None) -> None:
    if fault == HANG_SCHEDULER:
        hang()
    elif fault == HANG_WARMUP:
        from sglang.srt.managers.scheduler import Scheduler

        def run_batch(self, *args, **kwargs):
            print(f"EAGLE_EXT_FAULT: {HANG_WARMUP}: the first batch hangs", flush=True)
            hang()

        Scheduler.run_batch = run_batch  # a test's server only: never undone


def _apply(ctx) -> None:
    import os

    apply(os.environ.get(FAULT_ENV))


FEATURE = registry.register(
    registry.Feature(
        FAULT_ENV,
        enabled=lambda env: env.get(FAULT_ENV) in (HANG_SCHEDULER, HANG_WARMUP),
        hooks={registry.SCHEDULER: _apply},
        order=registry.FAULT,  # after the NCCL line, before any fix
        plugin=False,
    )
)
