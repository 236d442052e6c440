"""Silent JIT builds count as startup progress for the stall watchdog.

A first start on a new GPU compiles kernels (Triton, Marlin MoE through nvcc, DeepGEMM,
SGLang's own JIT kernels) and SGLang logs those builds at debug level only: the server's
log can stay quiet for minutes while work goes on, and a watchdog that kills the build
makes every restart repeat it. So, at each readiness poll, two signs of a build count as
progress and are named in the phase:

- a compiler process in the server's tree (COMPILERS: nvcc and its stages, ptxas,
  ninja, the host C/C++ compiler that Triton and torch extensions run), found with psutil;
- growth of a JIT cache folder (cache_dirs: Triton's, torch extensions', SGLang's own
  cache root, which holds DeepGEMM's and the CuTe AOT cache by default in 0.5.23,
  FlashInfer's, TorchInductor's, tvm-ffi's), seen as a newer modification time among
  the folder and its first two levels of subfolders (a new kernel is a new file or folder
  there). Bounded: at most MAX_ENTRIES entries are looked at per folder and poll.

A hang with neither (a stuck collective, a deadlock) still stops the server after the
stall limit. Which folders a given GPU host's first start fills is [unmeasured].
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

# process names (psutil's name(): the executable's, as the kernel reports it)
COMPILERS = frozenset(
    {
        "nvcc",
        "cicc",
        "ptxas",
        "cudafe++",
        "fatbinary",
        "nvlink",
        "nvdisasm",
        "ninja",
        "cc1",
        "cc1plus",
        "gcc",
        "g++",
        "c++",
        "cc",
        "clang",
        "clang++",
        "ld",
        "hipcc",
    }
)
MAX_ENTRIES = 4000


def cache_dirs(env: dict | None = None) -> list[Path]:
    """The JIT cache folders of a server started with `env` (its overrides, else the
    defaults of Triton, torch, SGLang 0.5.23, FlashInfer, TorchInductor and tvm-ffi)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    user = env.get("USER") or env.get("LOGNAME") or "root"

    def pick(name: str, default: Path) -> Path:
        return Path(env[name]).expanduser() if env.get(name) else default

    dirs = [
        pick("TRITON_CACHE_DIR", home / ".triton" / "cache"),
        pick("TORCH_EXTENSIONS_DIR", home / ".cache" / "torch_extensions"),
        pick("SGLANG_CACHE_DIR", home / ".cache" / "sglang"),
        pick("FLASHINFER_WORKSPACE_BASE", home / ".cache") / "flashinfer",
        pick("TORCHINDUCTOR_CACHE_DIR", Path("/tmp") / f"torchinductor_{user}"),
        pick("TVM_FFI_CACHE_DIR", home / ".cache" / "tvm-ffi"),
    ]
    if env.get("SGLANG_DG_CACHE_DIR"):
        dirs.append(Path(env["SGLANG_DG_CACHE_DIR"]).expanduser())
    return list(dict.fromkeys(dirs))


def newest_mtime(root: Path, depth: int = 2, budget: int = MAX_ENTRIES) -> int:
    """The newest modification time (ns) of `root` and its subfolders `depth` levels
    down (0: absent); at most `budget` entries read."""
    try:
        newest = root.stat().st_mtime_ns
    except OSError:
        return 0
    level = [root]
    for _ in range(depth):
        below = []
        for folder in level:
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        budget -= 1
                        if budget < 0:
                            return newest
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime_ns)
                                below.append(Path(entry.path))
                        except OSError:
                            continue
            except OSError:
                continue
        level = below
    return newest


class BuildWatch:
    """What a readiness poll sees of builds; `poll` answers a phase note or None."""

    def __init__(self, env: dict | None = None, dirs: list[Path] | None = None):
        self.dirs = cache_dirs(env) if dirs is None else list(dirs)
        self.seen = {d: newest_mtime(d) for d in self.dirs}  # at the server's start

    def compilers(self, pids) -> list[str]:
        names = []
        for pid in sorted(pids):
            try:
                name = psutil.Process(pid).name()
            except psutil.Error:
                continue
            if name in COMPILERS:
                names.append(f"{name} (pid {pid})")
        return names

    def grown(self) -> list[Path]:
        out = []
        for d in self.dirs:
            now = newest_mtime(d)
            if now > self.seen[d]:
                out.append(d)
                self.seen[d] = now
        return out

    def poll(self, pids) -> str | None:
        running = self.compilers(pids)
        grown = self.grown()
        if not (running or grown):
            return None
        parts = []
        if running:
            parts.append(
                "JIT build: " + ", ".join(running[:4]) + (" ..." if len(running) > 4 else "")
            )
        if grown:
            parts.append("JIT cache growing: " + ", ".join(str(d) for d in grown))
        return "; ".join(parts)
