"""Entry point of the `sglang.srt.plugins` group (SGLang 0.5.13+).

SGLang calls `register()` in every process it starts (HTTP server, scheduler,
detokenizer, DP controller). We act only when called from `run_scheduler_process`,
so other processes never import a feature: there we run the in-process registry's
SCHEDULER stage (in_sglang/features.py), the features that work with a stock
`python -m sglang.launch_server` (plugin=True: the profiler, the adaptive backoff, the
schedule controller), each when its switch is set. Under our own server entry they
already ran (scheduler_entry.py): the registry runs each once per process.
"""

from __future__ import annotations

import sys


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


def register() -> None:
    frame = _scheduler_frame()
    if frame is None:
        return
    from sgl_eagle_ext.in_sglang import features

    # run_scheduler_process(server_args, port_args, gpu_id, tp_rank, ...) in every
    # release: the flags decide, e.g., whether a wrapped EAGLE worker runs at all.
    local = frame.f_locals
    features.run(
        features.SCHEDULER,
        tp_rank=local.get("tp_rank", "?"),
        server_args=local.get("server_args"),
        via_plugin=True,
    )
