"""run(): every preflight check on a target/draft pair for one SGLang release."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.cli_args import last_value
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.launcher.preflight import (
    adaptive,
    aux_layers,
    context,
    host,
    model_dirs,
    numbers,
    scaleout,
    shapes,
)
from sgl_eagle_ext.launcher.preflight.findings import INFO, WARNING, Finding, Report
from sgl_eagle_ext.tools import patches, wheels


def _arg(server_args: list[str], *flags: str) -> str | None:
    found = [last_value(server_args, f) for f in flags]
    return next((v for v in found if v is not None), None)


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _safely(report: Report, group: str, default, fn, *args):
    """Run one check group; a bug in it becomes a finding, not a traceback or a lost report."""
    try:
        return fn(*args)
    except Exception as e:
        report.add(
            Finding(
                f"{group}.internal",
                WARNING,
                f"the {group} checks failed: {type(e).__name__}: {e}; they are incomplete.",
                "please report it with the config files",
            )
        )
        return default


def applied_patches(release: releases.Release) -> tuple[set[str] | None, Finding | None]:
    """Ids of this release's patches applied to the installed SGLang (None: not knowable)."""
    if not release.patches:
        return set(), None
    pkg = wheels.installed_source()
    if pkg is None or wheels.source_version(pkg) != release.version:
        return None, None
    try:
        tgt = patches.Target(pkg, release.version)
        states = {p.id: patches.state(p, tgt)[0] for p in patches.for_release(release.version)}
    except UserError as e:  # no GNU patch, unreadable manifest
        return None, Finding(
            "patches.unknown", INFO, f"patch state not checked: {e.message}", e.fix
        )
    return {k for k, v in states.items() if v == patches.APPLIED}, Finding(
        "patches.state",
        INFO,
        f"patches for SGLang {release.version} in {pkg}: "
        + ", ".join(f"{k} {v}" for k, v in states.items())
        + ".",
        None
        if all(v == patches.APPLIED for v in states.values())
        else "python -m sgl_eagle_ext.patches apply",
    )


def run(
    target_dir: str | None,
    draft_dir: str | None,
    release: releases.Release,
    server_args: Iterable[str] = (),
    *,
    fix: bool = False,
    skip: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    hardware: str | None = None,
    host_checks: bool = True,
    overlay_root: Path | None = None,
) -> Report:
    """Check the pair before launch. Never raises for bad model input (it is a finding).

    server_args: the SGLang arguments of the launch (reads --context-length,
    --tp-size, --pp-size, --host, --port, --speculative-algorithm,
    --disable-cuda-graph, --mem-fraction-static). env: the launch environment
    (default os.environ). fix: write the draft overlay for a context-length
    mismatch; Report.overlay / Report.retarget(server_args) then point at it.
    """
    server_args = list(server_args)
    env = os.environ if env is None else env
    report = Report(release.version, target_dir, draft_dir)
    target, found = model_dirs.load("target", "--model-path", target_dir)
    report.add(*found)
    draft = None
    if draft_dir is not None:
        draft, found = model_dirs.load("draft", "--draft-model-path", draft_dir)
        report.add(*found)

    algorithm = (_arg(server_args, "--speculative-algorithm") or "EAGLE3").upper()
    eagle3 = draft is not None and algorithm == "EAGLE3"
    # Where to read the release's code: the installed SGLang if it is this release,
    # else its cached wheel (never downloaded here); None: the tables and our rule.
    pkg = _safely(report, "source", None, wheels.source_for, release.version)
    applied, note = applied_patches(release)
    report.add(note)

    found, report.overlay = _safely(
        report,
        "context",
        ([], None),
        context.check,
        target,
        draft,
        pkg,
        _arg(server_args, "--context-length"),
        env,
        fix,
        overlay_root,
    )
    report.add(*found)
    report.add(*_safely(report, "rope", [], context.check_rope, target, draft))
    if target.config is not None:
        report.add(
            *_safely(report, "arch", [], shapes.architectures, target, draft, release, pkg, eagle3)
        )

    if eagle3 and target.config is not None and draft.config is not None:
        found, fc_count = _safely(report, "shape", ([], None), shapes.check, target, draft)
        report.add(*found)
        # Off: the classic flag, or any of the settings the release spells it as.
        graphs_off = "--disable-cuda-graph" in server_args or any(
            _arg(server_args, f"--{flag}") == value
            for flag, value in release.expansions.get("disable-cuda-graph", ())
        )
        report.add(
            *_safely(
                report,
                "aux",
                [],
                aux_layers.check,
                target,
                draft,
                release,
                applied,
                not graphs_off,
                fc_count,
            )
        )
    elif draft is not None and not eagle3:
        report.add(
            Finding(
                "aux.skipped",
                INFO,
                f"--speculative-algorithm {algorithm}: EAGLE-3 aux-layer checks do not apply.",
            )
        )

    report.add(*_safely(report, "numbers", [], numbers.check, target, draft, server_args))
    report.add(*_safely(report, "scaleout", [], scaleout.check, server_args, env))
    report.add(*_safely(report, "adaptive", [], adaptive.check, server_args, release))
    if host_checks:
        tp = scaleout.gpus_per_node(server_args)  # this node's share of tp * pp
        try:
            fraction = float(_arg(server_args, "--mem-fraction-static") or 0) or None
        except ValueError:
            fraction = None
        device = _arg(server_args, "--device") or "cuda"
        if device == "cuda":
            report.add(*_safely(report, "host", [], host.check_gpus, env, tp, hardware, fraction))
            report.add(*_safely(report, "host", [], host.check_p2p, tp))
        report.add(
            *_safely(
                report,
                "host",
                [],
                host.check_port,
                _arg(server_args, "--host") or "127.0.0.1",
                _int(_arg(server_args, "--port"), 30000),
            )
        )
    report.waive(skip)
    return report
