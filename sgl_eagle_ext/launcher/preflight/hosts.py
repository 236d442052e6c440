"""The host a GPU launch is planned for, when preflight runs somewhere else.

SGLang resolves a launch from the device it finds: its memory (chunked prefill size,
CUDA-graph batch sizes, mem_fraction_static) and compute capability (kernels, backends).
On a machine without that GPU, the probe (sglang_probe.as_host) makes SGLang's own
parser and resolution answer as on the host described here; the memory plan
(memory_plan.py) divides the same card's memory.

    EAGLE_EXT_TARGET_HOST=h100-80gb-x8   plan for another host (names: HOSTS)
    EAGLE_EXT_TARGET_HOST=local          never describe: SGLang asks this machine

Without the variable a GPU launch planned on a machine with no NVIDIA GPU is planned
for DEFAULT (the project's host: 8 x RTX PRO 6000 Blackwell); on a machine with one,
SGLang reads the real device.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sgl_eagle_ext.common.contract import CPU_ENV
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv

ENV = "EAGLE_EXT_TARGET_HOST"
PROBE_ENV = "EAGLE_EXT_PROBE_HOST"  # the description handed to the probe (sglang_probe.py)
LOCAL = "local"


@dataclass(frozen=True)
class Host:
    key: str
    name: str  # the GPU model, as nvidia-smi names it
    memory_mib: int  # nvidia-smi's memory.total, what SGLang's get_device_memory_capacity reads
    capability: tuple[int, int]  # CUDA compute capability
    count: int  # GPUs in the host
    interconnect: str

    @property
    def label(self) -> str:
        sm = f"SM{self.capability[0]}{self.capability[1]}"
        gib = self.memory_mib / 1024
        return f"{self.count} x {self.name} ({sm}, {gib:.1f} GiB, {self.interconnect})"

    def probe_description(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "memory_mib": self.memory_mib,
                "capability": list(self.capability),
                "count": self.count,
            },
            sort_keys=True,
        )


# memory_mib: nvidia-smi's memory.total for the card (public reports of each card,
# not read on this project's machines).
HOSTS = {
    h.key: h
    for h in (
        Host("sm120-96gb-x8", "NVIDIA RTX PRO 6000 Blackwell", 97887, (12, 0), 8, "PCIe"),
        Host("h100-80gb-x8", "NVIDIA H100 80GB HBM3", 81559, (9, 0), 8, "NVLink"),
        Host("h200-141gb-x8", "NVIDIA H200", 143771, (9, 0), 8, "NVLink"),
    )
}
DEFAULT = HOSTS["sm120-96gb-x8"]


def named(name: str) -> Host:
    try:
        return HOSTS[name]
    except KeyError:
        raise UserError(
            f"{ENV}={name}: not a host this project describes",
            f"use one of {', '.join(HOSTS)} (or {LOCAL}: SGLang reads this machine's GPU)",
        ) from None


def accelerator_here() -> bool:
    """Whether this machine has an NVIDIA GPU SGLang could read (its driver's tool)."""
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidia0")


def is_gpu_launch(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    if env.get(CPU_ENV) == "1":
        return False
    return (ServerArgv(list(argv)).value("device") or "cuda") == "cuda"


def for_launch(argv: Sequence[str], env: Mapping[str, str]) -> Host | None:
    """The host SGLang is asked to resolve this launch as on (None: this machine as it is)."""
    if not is_gpu_launch(argv, env):
        return None
    name = env.get(ENV) or os.environ.get(ENV)
    if name == LOCAL:
        return None
    if name:
        return named(name)
    return None if accelerator_here() else DEFAULT
