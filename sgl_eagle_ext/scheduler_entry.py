"""Entry of every SGLang scheduler (TP worker) process started by our server.

SGLang pickles the process target by reference, so the spawned child imports
this module and runs `run_scheduler_process`, which installs the project's
in-process hooks and then hands over to SGLang's own function.
"""

from __future__ import annotations


def run_scheduler_process(*args, **kwargs):
    from sgl_eagle_ext import injection

    injection.in_scheduler_process()

    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run

    return sglang_run(*args, **kwargs)
