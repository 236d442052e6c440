"""What the project installs inside SGLang's processes, in one place.

`in_server_process` runs in the HTTP server process before SGLang starts;
`in_scheduler_process` runs first thing in every scheduler process.
Each step is gated by its own environment switch and is idempotent.
"""

from __future__ import annotations

import os

CPU_ENV = "EAGLE_EXT_CPU"  # set by the CPU harness overlay (launch/cpu.toml)


def cpu_harness_enabled() -> bool:
    return os.environ.get(CPU_ENV) == "1"


def in_server_process() -> None:
    if cpu_harness_enabled():
        from sgl_eagle_ext.cpu import harness

        harness.install_server()


def in_scheduler_process() -> None:
    if cpu_harness_enabled():
        from sgl_eagle_ext.cpu import harness

        harness.install_scheduler()
