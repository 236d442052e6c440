"""Entry point of the `sglang.srt.plugins` group (SGLang 0.5.13+).

SGLang calls `register()` in every process it starts (HTTP server, scheduler,
detokenizer, DP controller). We act only when EAGLE3_PROFILE=1 and only when
called from `run_scheduler_process`, so other processes never import the worker.
"""

from __future__ import annotations

import os
import sys

from sgl_eagle_ext.profiling import names


def _scheduler_frame(max_depth: int = 12):
    """SGLang's run_scheduler_process frame above us, or None."""
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        if frame.f_code.co_name == "run_scheduler_process":
            return frame
        frame = frame.f_back
    return None


def _called_from_scheduler(max_depth: int = 12) -> bool:
    return _scheduler_frame(max_depth + 1) is not None


def register() -> None:
    if not names.enabled(os.environ):
        return
    frame = _scheduler_frame()
    if frame is None:
        return
    from sgl_eagle_ext.profiling import recorder

    # run_scheduler_process(server_args, ...) in every release: the flags decide
    # whether a wrapped EAGLE worker runs at all.
    recorder.install_from_env(server_args=frame.f_locals.get("server_args"))
