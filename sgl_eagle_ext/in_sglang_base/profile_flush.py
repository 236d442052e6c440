"""The last profile window of a server stopped under load.

SGLang stops its schedulers with kill_process_tree (SIGKILL): their atexit flush never
runs, and the window in progress is lost. The server process (in_sglang/serve.py) therefore
asks every scheduler to write its window first: FLUSH_SIGNAL to each process titled
sglang::scheduler*, then a short grace, then SGLang's own kill. The scheduler side
(profiling/recorder/instrument.py) handles FLUSH_SIGNAL by writing what it measured.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time

from sgl_eagle_ext.common.contract import FLUSH_GRACE_S, FLUSH_SIGNAL_NAME, SCHEDULER_TITLE

FLUSH_SIGNAL = getattr(signal, FLUSH_SIGNAL_NAME)
GRACE_S = FLUSH_GRACE_S  # long enough for a log line and a JSON line


def schedulers(parent_pid: int) -> list:
    import psutil

    try:
        children = psutil.Process(parent_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            if SCHEDULER_TITLE in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def flush_schedulers(parent_pid: int | None = None, grace_s: float = GRACE_S) -> int:
    """Ask each scheduler under `parent_pid` to write its profile window; wait `grace_s`.
    Returns how many were asked. Never raises (it runs on the way out)."""
    try:
        asked = 0
        for proc in schedulers(os.getpid() if parent_pid is None else parent_pid):
            try:
                proc.send_signal(FLUSH_SIGNAL)
                asked += 1
            except Exception:
                continue
        if asked:
            time.sleep(grace_s)
        return asked
    except Exception:
        return 0


def _flushing(kill):
    @functools.wraps(kill)
    def wrapper(parent_pid=None, *args, **kwargs):
        flush_schedulers(parent_pid)
        return kill(parent_pid, *args, **kwargs)

    wrapper._eagle_ext_flush = True
    return wrapper


def install_parent() -> int:
    """Flush before SGLang's kill_process_tree, wherever a module bound it by name.
    Returns how many bindings were wrapped (idempotent)."""
    try:
        from sglang.srt.utils import common
    except ImportError:
        from sglang.srt import utils as common  # older layout
    original = getattr(common, "kill_process_tree", None)
    if original is None or getattr(original, "_eagle_ext_flush", False):
        return 0
    wrapped = _flushing(original)
    count = 0
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if not name.startswith("sglang") or getattr(mod, "kill_process_tree", None) is not original:
            continue
        mod.kill_process_tree = wrapped
        count += 1
    return count
