"""The launcher flags of the commands that start servers (read by tools/bench/arms.plan_arm)."""

from __future__ import annotations

from dataclasses import dataclass

from sgl_eagle_ext.common.cli_args import seconds
from sgl_eagle_ext.common.declared_flags import flag


@dataclass(frozen=True)
class ServerFlags:
    """How a command's servers start through the launcher: the flags bench compare/ab and
    tune live share, declared once (each field its flag)."""

    model_path: str | None = flag("--model-path", help="target model (launcher --model-path)")
    draft_model_path: str | None = flag(
        "--draft-model-path", help="EAGLE-3 draft (speculative presets only)"
    )
    cpu: bool = flag(
        "--cpu", default=False, action="store_true", help="CPU harness overlay (launcher --cpu)"
    )
    overlays: tuple = flag(
        "--overlay",
        default=(),
        cli_default=list,
        check=lambda _n, v: tuple(v),
        action="append",
        metavar="NAME",
        help="launcher --overlay for every server (repeatable)",
    )
    sglang_version: str | None = flag("--sglang-version", help="launcher --sglang-version")
    force: bool = flag("--force", default=False, action="store_true", help="launcher --force")
    startup_timeout: float | None = flag(
        "--startup-timeout",
        type=seconds(0),
        help="seconds to wait for each server's READY (default: the launcher's estimate "
        "for that server, 3000 s plus 300 s per extra speculative runtime state; 0: no limit)",
    )
    allow_unequal: bool = flag(
        "--allow-unequal",
        default=False,
        action="store_true",
        help="run even when the servers' resolved settings differ outside speculation "
        "(checked before any server starts); the differences are recorded beside every figure",
    )
