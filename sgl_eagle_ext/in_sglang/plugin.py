"""Entry point of the `sglang.srt.plugins` group (SGLang 0.5.13+).

SGLang calls `register()` in every process it starts (HTTP server, scheduler,
detokenizer, DP controller). We act only when EAGLE3_PROFILE=1 and only when
called from `run_scheduler_process`, so other processes never import the worker.
"""

from __future__ import annotations

import os
import sys

from sgl_eagle_ext.profiling import names


def _called_from_scheduler(max_depth: int = 12) -> bool:
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return False
        if frame.f_code.co_name == "run_scheduler_process":
            return True
        frame = frame.f_back
    return False


def register() -> None:
    if not names.enabled(os.environ) or not _called_from_scheduler():
        return
    from sgl_eagle_ext.profiling import recorder

    recorder.install_from_env()
