"""The settings view of a dry run: what SGLang will set on its own for this launch.

    # SGLang sets on its own (by SGLang 0.5.23 as on NVIDIA RTX PRO 6000 Blackwell ...):
    #   max_running_requests: unset -> 48, by `_handle_eagle_family`

Asked of the installed SGLang when it is the release launched and the target is a
local directory (ask_sglang: its parser and resolution on the final argument list,
cached). A GPU launch planned on a machine without the GPU is resolved as on the
target host (preflight/hosts.py): SGLang's own answer for that host. Where SGLang is
not asked (another release installed, a hub id), the release table's prediction
(fairness.predicted_settings), labelled so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import resolution
from sgl_eagle_ext.launcher.preflight import ask_sglang


def ask(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> tuple[ask_sglang.Answer | None, str]:
    """(SGLang's Answer, '') or (None, why SGLang was not asked)."""
    python = python or sys.executable
    model = ServerArgv(argv).model_path
    installed = releases.installed_version(python, env)
    if installed != release.version:
        return None, (
            f"SGLang {release.version} is not installed in {python}"
            if installed is None
            else f"{python} has SGLang {installed}, the launch is for {release.version}"
        )
    if model is None or not Path(model).expanduser().is_dir():
        return None, f"--model-path {model} is not a local directory here"
    answer, failed = ask_sglang.ask_launch(python, list(argv), env)
    if answer is None:
        return None, failed or "SGLang gave no answer"
    return answer, ""


def view(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> tuple[ask_sglang.Answer | None, resolution.Resolution, str]:
    """(SGLang's Answer or None, its Resolution or the release table's prediction, why
    SGLang was not asked: '' when it was)."""
    answer, why = ask(release, argv, env, python)
    if answer is not None and answer.settings is not None:
        return answer, answer.settings, ""
    from sgl_eagle_ext.launcher import fairness  # the release table's rules

    why = why or "SGLang gave no settings"
    return answer, fairness.predicted_settings(release, list(argv), env), why


def resolve(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> tuple[resolution.Resolution, str]:
    """(SGLang's Resolution, '') or (the release table's prediction, why SGLang was not
    asked)."""
    _, res, why = view(release, argv, env, python)
    return res, why


def lines_for(res: resolution.Resolution | None, why: str) -> list[str]:
    """The dry run's '#' lines (a comment to the shell: the command stays runnable)."""
    if res is None:
        return [f"# SGLang sets on its own: not asked ({why})"]
    head = f"# SGLang sets on its own ({res.label}"
    head += f"; SGLang not asked: {why})" if why and res.source != "sglang" else ")"
    return [head + ":", *(f"#   {x}" for x in res.lines())]


def lines(
    release: releases.Release,
    argv: Sequence[str],
    env: Mapping[str, str],
    python: str | None = None,
) -> list[str]:
    res, why = resolve(release, argv, env, python)
    return lines_for(res, why)
