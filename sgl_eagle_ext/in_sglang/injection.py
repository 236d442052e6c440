"""What the project installs inside SGLang's processes, in one place.

`in_server_process` runs in the HTTP server process before SGLang starts;
`in_scheduler_process` runs first thing in every scheduler process.
Each step is gated by its own environment switch and is idempotent.
"""

from __future__ import annotations

import os

from sgl_eagle_ext.common.contract import (
    ADAPTIVE_BACKOFF_ENV,
    CPU_ENV,
    FAULT_ENV,
    SCHEDULE_FILE_ENV,
)
from sgl_eagle_ext.profiling import names as profile_names


def cpu_harness_enabled() -> bool:
    return os.environ.get(CPU_ENV) == "1"


def in_server_process() -> None:
    if cpu_harness_enabled():
        from sgl_eagle_ext.cpu import harness

        harness.install_server()


def in_scheduler_process(tp_rank="?", server_args=None) -> None:
    from sgl_eagle_ext.in_sglang import nccl_report

    nccl_report.report_rank(tp_rank)  # the NCCL settings this rank really has
    if os.environ.get(FAULT_ENV):  # the launcher's own tests (in_sglang/faults.py)
        from sgl_eagle_ext.in_sglang import faults

        faults.apply(os.environ[FAULT_ENV])
    if cpu_harness_enabled():
        from sgl_eagle_ext.cpu import harness

        harness.install_scheduler()
    if profile_names.enabled(os.environ):  # per-phase profiling of the EAGLE worker
        from sgl_eagle_ext.profiling import recorder

        recorder.install_from_env(server_args=server_args)
    if os.environ.get(ADAPTIVE_BACKOFF_ENV):  # the eagle3-adaptive preset's probe backoff
        from sgl_eagle_ext.in_sglang import adaptive_backoff

        adaptive_backoff.install_from_env(os.environ)
    if os.environ.get(SCHEDULE_FILE_ENV):  # tune --live: the steps the tuner asks for
        from sgl_eagle_ext.in_sglang import schedule_control

        schedule_control.install_from_env(os.environ)
