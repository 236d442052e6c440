"""Fault injection for the launcher's own tests (EAGLE_EXT_FAULT, common/contract.py):
"hang-scheduler" makes every scheduler process hang before SGLang starts in it, as a
stuck CUDA-graph capture does, so the watchdog must find and stop the whole tree."""

from __future__ import annotations

import time

from sgl_eagle_ext.common.contract import FAULT_ENV
from sgl_eagle_ext.in_sglang_base import registry


def _hang(ctx) -> None:
    while True:
        time.sleep(3600)


FEATURE = registry.register(
    registry.Feature(
        FAULT_ENV,
        enabled=lambda env: env.get(FAULT_ENV) == "hang-scheduler",
        hooks={registry.SCHEDULER: _hang},
        order=registry.FAULT,  # after the NCCL line, before any fix
        plugin=False,
    )
)
