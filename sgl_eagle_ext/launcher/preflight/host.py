"""Host checks: GPUs (count, compute capability, free memory and who holds it), the
server port, IOMMU/ACS hints for peer-to-peer traffic over PCIe, and NCCL settings of
the server's environment known to break multi-GPU launches.

GPU facts come from nvidia-smi (no CUDA context is created, so a check never
takes GPU memory itself); without it the GPU checks are skipped with a note.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding

GPU_QUERY = "index,uuid,name,compute_cap,memory.total,memory.free"
APP_QUERY = "gpu_uuid,pid,used_memory"
DEFAULT_FRACTION = 0.8  # SGLang's static pool is most of each GPU; below this it will not fit
HARDWARE_CC = {"sm120": "12.0"}


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    cc: str
    total_mib: int
    free_mib: int


def _smi(args: list[str]) -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row]


def parse_gpus(text: str) -> list[Gpu]:
    out = []
    for r in _rows(text):
        try:
            out.append(Gpu(int(r[0]), r[1], r[2], r[3], int(float(r[4])), int(float(r[5]))))
        except (ValueError, IndexError):
            continue
    return out


def parse_apps(text: str) -> dict[str, list[tuple[int, int]]]:
    """{gpu uuid: [(pid, MiB used)]}"""
    out: dict[str, list[tuple[int, int]]] = {}
    for r in _rows(text):
        try:
            out.setdefault(r[0], []).append((int(r[1]), int(float(r[2]))))
        except (ValueError, IndexError):
            continue
    return out


def visible(gpus: list[Gpu], env) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves, in its order."""
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus
    out = []
    for tok in (t.strip() for t in spec.split(",")):
        if not tok:
            continue
        match = [g for g in gpus if str(g.index) == tok or g.uuid.startswith(tok)]
        if not match:
            break  # CUDA stops at the first invalid entry
        out.append(match[0])
    return out


def _who(pid: int) -> str:
    try:
        import psutil

        p = psutil.Process(pid)
        cmd = " ".join(p.cmdline()) or p.name()
        return f"pid {pid} ({cmd[:60]})"
    except Exception:
        return f"pid {pid}"


def check_gpus(
    env,
    tp: int,
    hardware: str | None,
    fraction: float | None,
    gpu_text: str | None = None,
    app_text: str | None = None,
) -> list[Finding]:
    gpu_text = (
        gpu_text
        if gpu_text is not None
        else _smi([f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    )
    gpus = parse_gpus(gpu_text or "")
    if not gpus:
        return [
            Finding(
                "host.no-gpu",
                INFO,
                "no NVIDIA GPU found (nvidia-smi missing or "
                "silent): GPU count, capability and memory checks skipped.",
            )
        ]
    used = visible(gpus, env)[: max(tp, 1)]
    found = [
        Finding(
            "host.gpus",
            INFO,
            f"{len(visible(gpus, env))} GPU(s) visible: "
            + "; ".join(
                f"{g.index}: {g.name} sm {g.cc}, {g.free_mib} of {g.total_mib} MiB free"
                for g in used
            )
            + (" ..." if len(visible(gpus, env)) > len(used) else ""),
        )
    ]
    n_visible = len(visible(gpus, env))
    if n_visible < tp:
        found.append(
            Finding(
                "host.gpu-count",
                ERROR,
                f"--tp-size {tp} needs {tp} GPUs; {n_visible} visible"
                + (
                    f" (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')})"
                    if env.get("CUDA_VISIBLE_DEVICES") is not None
                    else ""
                )
                + ".",
                "lower --tp-size or make more GPUs visible",
            )
        )
    want = HARDWARE_CC.get(hardware or "")
    odd = [g for g in used if want and g.cc != want]
    if odd:
        found.append(
            Finding(
                "host.compute-capability",
                WARNING,
                f"the preset is written for {hardware} (compute capability {want}) "
                f"but GPU {odd[0].index} is {odd[0].name} (sm {odd[0].cc}).",
                "use a preset made for these GPUs",
            )
        )
    apps = parse_apps(
        (
            app_text
            if app_text is not None
            else _smi([f"--query-compute-apps={APP_QUERY}", "--format=csv,noheader,nounits"])
        )
        or ""
    )
    need = fraction or DEFAULT_FRACTION
    for g in used:
        holders = ", ".join(f"{_who(pid)} {mib} MiB" for pid, mib in apps.get(g.uuid, []))
        if g.free_mib < need * g.total_mib:
            found.append(
                Finding(
                    "host.gpu-memory",
                    ERROR,
                    f"GPU {g.index} has {g.free_mib} of {g.total_mib} MiB free, below the "
                    f"{need:.0%} SGLang's static pool needs"
                    + (f"; held by {holders}" if holders else "")
                    + ".",
                    "stop the process holding it (an old server that did not exit: its scheduler "
                    "processes keep the memory), or lower --mem-fraction-static",
                )
            )
        elif holders:
            found.append(
                Finding(
                    "host.gpu-busy",
                    WARNING,
                    f"GPU {g.index} is shared with {holders}.",
                    "stop it if it is an old server",
                )
            )
    return found


def check_port(host: str, port: int) -> list[Finding]:
    from sgl_eagle_ext.common.http import check_port_free

    try:
        check_port_free(host, port)
    except UserError as e:
        return [Finding("host.port", ERROR, e.message, e.fix)]
    return []


def check_p2p(
    tp: int,
    cmdline: str | None = None,
    groups: Path = Path("/sys/kernel/iommu_groups"),
    lspci: str | None = None,
) -> list[Finding]:
    """IOMMU in translated mode and ACS redirection slow down or hang P2P over PCIe."""
    if tp < 2:
        return []
    found = []
    try:
        cmdline = cmdline if cmdline is not None else Path("/proc/cmdline").read_text()
        iommu_on = groups.is_dir() and any(groups.iterdir())
    except OSError:
        return []
    if iommu_on and not re.search(r"\biommu=pt\b|\b(intel|amd)_iommu=off\b", cmdline):
        found.append(
            Finding(
                "host.iommu",
                WARNING,
                "the IOMMU is on in translated mode (no iommu=pt on the "
                "kernel command line): GPU peer-to-peer over PCIe may be slow or hang NCCL.",
                "boot with iommu=pt (or disable the IOMMU), or set NCCL_P2P_DISABLE=1 "
                "(slower all-reduce)",
                file="/proc/cmdline",
            )
        )
    if lspci is None and shutil.which("lspci"):
        try:
            lspci = subprocess.run(
                ["lspci", "-vvv"], capture_output=True, text=True, timeout=20
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            lspci = None
    redirected = len(re.findall(r"ACSCtl:[^\n]*SrcValid\+", lspci or ""))
    if redirected:
        found.append(
            Finding(
                "host.acs",
                WARNING,
                f"ACS is enabled on {redirected} PCIe bridge(s): peer-to-peer "
                f"traffic is redirected through the root complex (slow, or NCCL hangs).",
                "disable ACS on the switches between the GPUs (BIOS or setpci), or set "
                "NCCL_P2P_DISABLE=1",
            )
        )
    return found


def check_nccl_env(env: Mapping[str, str], tp: int) -> list[Finding]:
    """The server's environment (preset and shell): an empty NCCL_GRAPH_FILE, and two NCCL
    libraries in one process (SGLang's pynccl loads SGLANG_NCCL_SO_PATH, torch's process
    group the one LD_PRELOAD names): the rules of the RTX PRO 6000 community's runbooks."""
    if tp < 2:
        return []
    found = []
    if "NCCL_GRAPH_FILE" in env and not env["NCCL_GRAPH_FILE"].strip():
        found.append(
            Finding(
                "host.nccl-graph-file",
                WARNING,
                "NCCL_GRAPH_FILE is set but empty: NCCL takes it as a topology file to read "
                "(never set it empty, as the RTX PRO 6000 runbooks say).",
                "unset NCCL_GRAPH_FILE, or give it the path of a topology XML",
            )
        )
    so = env.get("SGLANG_NCCL_SO_PATH", "").strip()
    preloaded = [x for x in re.split(r"[: ]", env.get("LD_PRELOAD", "")) if "libnccl" in x]
    if so and preloaded and all(_real(x) != _real(so) for x in preloaded):
        found.append(
            Finding(
                "host.nccl-library",
                WARNING,
                f"two NCCL libraries in each rank: SGLang's pynccl loads SGLANG_NCCL_SO_PATH "
                f"{so}, torch's process group the LD_PRELOAD one ({preloaded[0]}).",
                "point SGLANG_NCCL_SO_PATH and LD_PRELOAD at the same libnccl .so",
            )
        )
    return found


def _real(path: str) -> str:
    return str(Path(path).resolve())
