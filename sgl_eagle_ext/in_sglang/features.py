"""Every in-process feature, registered by importing the module that declares it (its
FEATURE, in_sglang_base/registry.py). Both entry points (serve.py with
scheduler_entry.py, and plugin.py) import this module and run the one registry; a new
feature is its own declaration plus one import here (tests/test_in_process_features.py
fails when a declaration is not imported)."""

from __future__ import annotations

from sgl_eagle_ext.cpu import harness, v1_fixes  # noqa: F401 (they register)
from sgl_eagle_ext.in_sglang import (  # noqa: F401 (they register)
    adaptive_backoff,
    chain_verify,
    draft_catchup,
    faults,
    nccl_report,
    schedule_control,
)
from sgl_eagle_ext.in_sglang_base.registry import (  # noqa: F401 (re-exported)
    EXIT,
    LAUNCH,
    REGISTRY,
    SCHEDULER,
    SERVER,
    run,
)
from sgl_eagle_ext.profiling import recorder  # noqa: F401 (it registers)
