"""What EAGLE3_PROFILE_SYNC_CHECK=1 counts inside a speculation cycle (`syncs=`).

On CUDA, torch's own detector: torch.cuda.set_sync_debug_mode("warn") makes every
synchronizing CUDA call warn -- explicit synchronize() and the implicit ones SGLang
makes (.cpu(), .tolist() and .item() on device tensors, in v1 verify, grammar masks,
...). Those warnings are counted (inside a cycle) and swallowed. torch documents the
mode as experimental: torch.distributed and torch.sparse calls are not covered.

The detector is armed at the first decode cycle of a profiled rank (FirstDecode),
not at scheduler start: weight loading, KV-cache allocation and CUDA-graph capture
synchronize by design, and a rank that does not profile has no cycle to count in.

Without CUDA (the CPU harness) there is no such detector: only explicit
torch.cuda synchronize() calls are counted (instrument.SYNC_ANCHORS), and the log
line says so (`syncs_counted=explicit-synchronize-calls`).
"""

from __future__ import annotations

import warnings

OFF, DEVICE, EXPLICIT = "off", "device-syncs", "explicit-synchronize-calls"
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch (c10/cuda) warning text


def select(enabled: bool, device_is_cuda: bool) -> str:
    """The detector for this process."""
    if not enabled:
        return OFF
    return DEVICE if device_is_cuda else EXPLICIT


def watch_device_syncs(count, torch=None, warnings_module=warnings):
    """Count every synchronizing CUDA call torch reports; other warnings pass through.
    Returns a function that undoes it."""
    if torch is None:
        import torch
    warnings_module.filterwarnings("always", message=".*" + SYNC_WARNING)  # each, not once
    shown = warnings_module.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if SYNC_WARNING in str(message):
            count()
            return
        shown(message, category, filename, lineno, file, line)

    warnings_module.showwarning = showwarning
    torch.cuda.set_sync_debug_mode("warn")

    def undo() -> None:
        torch.cuda.set_sync_debug_mode(0)
        if warnings_module.showwarning is showwarning:
            warnings_module.showwarning = shown

    return undo


class FirstDecode:
    """Arms watch_device_syncs at the first decode cycle it is shown (the recorder shows
    it only the cycles of profiled ranks), so the detector covers serving only."""

    def __init__(self, count, torch=None, warnings_module=warnings):
        self._arm = lambda: watch_device_syncs(count, torch, warnings_module)
        self._undo = None
        self.armed = False

    def cycle(self, kind: str) -> None:
        if not self.armed and kind == "decode":
            self.armed = True
            self._undo = self._arm()

    def disarm(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None
