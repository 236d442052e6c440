"""The CPU harness's interpreter changes (cpu/interpreter_patching.py) against Triton's
interpreter as it ships, in a child with TRITON_INTERPRET=1: the same outputs bit for
bit, no unread overflow check (its int64 casts), Triton's own language patch called once
per launch and module set instead of at every device-function call, Triton's own dtype
lookup once per element type, and uninstall puts Triton back (whose launches then
compute the same again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[1]


def test_one_patch_per_launch_and_module_set_same_outputs():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "interpreter_patching_driver.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["equal"] and got["uninstalled"]
    # as shipped: the launch's patch plus one at every device call of every program
    # instance and loop step (twice, max, sum, cdiv)
    assert got["plain_calls"] >= got["launches"] + got["device_calls"]
    # once: per launch, the kernel's module (tl: the kernel and `twice`) and the
    # standard library's (tl.core: max, sum, cdiv)
    assert got["once_calls"] == 2 * got["launches"]
    # the int32 offsets' overflow check, widened to int64, as shipped and after uninstall
    plain, once, after = got["widened"]
    assert plain > 0 and once == 0 and after == plain
    # Triton's dtype lookup: at every constant, cast and load as shipped; once per
    # element type (pointers aside) with the harness's
    plain, once, after = got["lookups"]
    assert plain > 100 and 0 < once <= 10 and after == plain
