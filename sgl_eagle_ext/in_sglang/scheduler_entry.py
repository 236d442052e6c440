"""Entry of every SGLang scheduler (TP worker) process started by our server.

SGLang pickles the process target by reference, so the spawned child imports
this module and runs `run_scheduler_process`, which runs the in-process registry's
SCHEDULER stage (in_sglang/features.py) and then hands over to SGLang's own function.
"""

from __future__ import annotations


def run_scheduler_process(*args, **kwargs):
    from sgl_eagle_ext.in_sglang import features

    # (server_args, port_args, gpu_id, tp_rank, ...) in every supported release
    tp_rank = kwargs.get("tp_rank", args[3] if len(args) > 3 else "?")
    server_args = kwargs.get("server_args", args[0] if args else None)
    features.run(features.SCHEDULER, tp_rank=tp_rank, server_args=server_args)

    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run

    return sglang_run(*args, **kwargs)
