"""The settings view of a dry run: what SGLang will set on its own for this launch.

    # SGLang sets on its own (by SGLang 0.5.23):
    #   max_running_requests: unset -> 48, by `_handle_eagle_family`

Asked of the installed SGLang when it is the release launched and the target is a
local directory (ask_sglang: its parser and resolution on the final argument list,
cached); else the release table's prediction (launcher/resolution.py's
predicted_settings, where present), labelled so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import resolution
from sgl_eagle_ext.launcher.preflight import ask_sglang


def resolve(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> tuple[resolution.Resolution | None, str]:
    """(SGLang's or the table's Resolution, '') or (None, why there is none)."""
    python = python or sys.executable
    model = ServerArgv(argv).model_path
    installed = releases.installed_version(python, env)
    why = ""
    if installed != release.version:
        why = (
            f"SGLang {release.version} is not installed in {python}"
            if installed is None
            else f"{python} has SGLang {installed}, the launch is for {release.version}"
        )
    elif model is None or not Path(model).expanduser().is_dir():
        why = f"--model-path {model} is not a local directory here"
    else:
        answer, failed = ask_sglang.ask_launch(python, list(argv), env)
        settings = answer.settings if answer is not None else None
        if settings is not None and not (settings.error and "No accelerator" in settings.error):
            return settings, ""
        # a GPU launch asked on a host without one: SGLang's device hooks refuse it
        why = (settings.error if settings is not None else failed) or "SGLang gave no settings"
    predict = getattr(resolution, "predicted_settings", None)
    if predict is None:
        return None, why
    return predict(release, list(argv)), why


def lines(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> list[str]:
    """The dry run's '#' lines (a comment to the shell: the command stays runnable)."""
    res, why = resolve(release, argv, env, python)
    if res is None:
        return [f"# SGLang sets on its own: (no prediction: {why})"]
    head = f"# SGLang sets on its own ({res.label}"
    head += f"; not asked: {why})" if why and res.source != "sglang" else ")"
    return [head + ":", *(f"#   {line}" for line in res.lines())]
