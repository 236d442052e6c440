"""The flags that say what to launch, shared by the launcher's command line
(launcher/cli.py) and the preflight's (launcher/preflight/cli.py): declared once and
mapped once onto plan.LaunchRequest, so the preflight checks the launch that the same
flags start. A command-line edge: `request` reads the parsed namespace."""

from __future__ import annotations

import argparse
import dataclasses

from sgl_eagle_ext.launcher import plan


def add_preset(p: argparse.ArgumentParser, names: str = "see --list-presets") -> None:
    """--preset NAME | --preset-file PATH (one of the two); `names`: where the shipped
    names are listed."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help=f"shipped preset name ({names})")
    src.add_argument("--preset-file", help="your own preset TOML file (may `extends` another)")


def add_overlay(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="NAME",
        help="merge launch/overlays/NAME.toml (or a .toml file) over the preset; "
        "repeatable; e.g. 2node: multi-node TP over 2 hosts (then add "
        "`-- --node-rank R --dist-init-addr HOST:PORT`)",
    )


def add_adaptive_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--adaptive-config",
        metavar="FILE",
        help="adaptive presets: the JSON table of candidate steps per batch size "
        "(default: the preset's; write one with python -m sgl_eagle_ext.tune)",
    )


def request(args: argparse.Namespace, extra: list[str], **decided) -> plan.LaunchRequest:
    """The launch request of a parsed command line holding the flags above and
    --model-path, --draft-model-path, --cpu, --sglang-version, --force; `extra`: the
    SGLang arguments (after `--`). `decided`: LaunchRequest fields the caller sets
    itself (the launcher's demo: its preset, model pair and environment)."""
    return dataclasses.replace(
        plan.LaunchRequest(
            preset=args.preset,
            preset_file=args.preset_file,
            model_path=args.model_path,
            draft_model_path=args.draft_model_path,
            overlays=tuple(args.overlay),
            cpu=args.cpu,
            sglang_version=args.sglang_version,
            force=args.force,
            adaptive_config=args.adaptive_config,
            extra=tuple(extra),
        ),
        **decided,
    )
