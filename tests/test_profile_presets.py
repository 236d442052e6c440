"""The main path's log is clean: the shipped speculative presets with EAGLE3_PROFILE=1
through the launcher (the CPU overlay applies) log profile windows for a short run
and no traceback -- profiling is installed once per scheduler although the scheduler
entry and SGLang's plugin entry point (0.5.13+) both ask, and the partial window is
written when traffic stops. eagle3-3step is started by tests/test_profile_server.py
(same assertions there); this file starts the other two."""

from __future__ import annotations

import signal

import pytest

from sgl_eagle_ext.common import http
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS
from sgl_eagle_ext.profiling.report import record_from_line

pytestmark = pytest.mark.server
PROFILE_ENV = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_CYCLES": "10"}


def assert_clean_profiled_log(log: str) -> None:
    assert log.count("EAGLE3_PROFILE: on (SGLang") == 1, "installed more than once"
    assert "Traceback" not in log
    assert "Failed to execute general plugin" not in log
    assert "DuplicateTimeseries" not in log
    windows = [record_from_line(ln) for ln in log.splitlines() if "EAGLE3_PROFILE v=" in ln]
    assert any(w.cycles for w in windows), "no profile window with decode cycles"


@pytest.mark.parametrize("preset", ["eagle3-2step", "eagle3-5step"])
def test_shipped_preset_profiles_with_a_clean_log(tiny_models, start_launcher, preset):
    launcher = start_launcher(
        "--preset",
        preset,
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models["draft-mostly"]),
        env=PROFILE_ENV,
    )
    launcher.wait_for("READY in")
    launcher.wait_for("spec check")  # the launcher's own post-ready generation
    # fewer decode cycles than EAGLE3_PROFILE_CYCLES: only the idle flush writes them
    http.generate(launcher.base_url, list(DEMO_PROMPTS)[:2], 8)
    launcher.wait_until(lambda: "EAGLE3_PROFILE v=" in launcher.log_text())
    assert launcher.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    assert_clean_profiled_log(launcher.log_text())
