"""run(): every preflight check on a target/draft pair for one SGLang release."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sgl_eagle_ext.common import patches, releases, wheels
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher.preflight import (
    adaptive,
    ask_sglang,
    aux_layers,
    context,
    host,
    model_dirs,
    scaleout,
    shapes,
    sizes,
)
from sgl_eagle_ext.launcher.preflight.findings import INFO, WARNING, Finding, Report


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


def ask_release(
    target: model_dirs.ModelDir,
    draft: model_dirs.ModelDir | None,
    release: releases.Release,
    user_len: str | None,
    env: Mapping[str, str],
    python: str | None,
    eagle3: bool,
) -> tuple[ask_sglang.Answer | None, Finding]:
    """SGLang's own verdicts when `python` imports the release being launched."""
    python = python or ask_sglang.default_python()
    found = ask_sglang.installed(python, dict(env))
    installed = found.get("sglang")
    dry = "verdicts predicted from the release table"
    if installed is None:
        return None, Finding("sglang.dry-run", INFO, f"no SGLang in {python}: {dry}.")
    if installed != release.version:
        return None, Finding(
            "sglang.dry-run",
            INFO,
            f"{python} has SGLang {installed}, the launch is for {release.version}: {dry}.",
        )
    aux = None
    n = target.text.get("num_hidden_layers")
    if eagle3 and draft is not None and isinstance(n, int) and target.architecture:
        ids, _ = aux_layers.read_ids(draft)
        aux = {"arch": target.architecture, "n": n, "ids": ids.ids, "config": str(target.path)}
    length = context.parse_length(user_len) if user_len is not None else None
    answer, why = ask_sglang.ask(
        python,
        str(target.path),
        str(draft.path) if draft is not None and draft.config is not None else None,
        length,
        aux,
        dict(env),
        found=found,
    )
    if answer is None:
        return None, Finding("sglang.unavailable", WARNING, f"{why}; {dry}.")
    when = (
        f"cached answer from {answer.cached_at} on these exact inputs, read in"
        if answer.cached_at
        else "in"
    )
    return answer, Finding(
        "sglang.asked",
        INFO,
        f"context-length and aux-layer verdicts by SGLang {answer.version} itself ({python}: its "
        f"ModelConfig and the target class's set_eagle3_layers_to_capture, no weights; "
        f"{when} {answer.seconds:.1f} s).",
        data={
            "seconds": round(answer.seconds, 2),
            "version": answer.version,
            "cached_at": answer.cached_at,
        },
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
    ask: bool = True,
    sglang_python: str | None = None,
) -> Report:
    """Check the pair before launch. Never raises for bad model input (it is a finding).

    server_args: the SGLang arguments of the launch (reads --context-length,
    --tp-size, --pp-size, --host, --port, --speculative-algorithm,
    --disable-cuda-graph, --mem-fraction-static). env: the launch environment
    (default os.environ). fix: write the draft overlay for a context-length
    mismatch; Report.overlay / Report.retarget(server_args) then point at it.
    """
    server_args = list(server_args)
    argv = ServerArgv(server_args)
    env = os.environ if env is None else env
    report = Report(release.version, target_dir, draft_dir)
    target, found = model_dirs.load("target", "--model-path", target_dir)
    report.add(*found)
    draft = None
    if draft_dir is not None:
        draft, found = model_dirs.load("draft", "--draft-model-path", draft_dir)
        report.add(*found)

    algorithm = (argv.value("speculative-algorithm") or "EAGLE3").upper()
    eagle3 = draft is not None and algorithm == "EAGLE3"
    # Where to read the release's code: the installed SGLang if it is this release,
    # else its cached wheel (never downloaded here); None: the tables and our rule.
    pkg = _safely(report, "source", None, wheels.source_for, release.version)
    applied, note = applied_patches(release)
    report.add(note)
    answer = None
    if ask and target.config is not None:
        answer, note = _safely(
            report,
            "sglang",
            (None, None),
            ask_release,
            target,
            draft,
            release,
            argv.value("context-length"),
            env,
            sglang_python,
            eagle3,
        )
        report.add(note)

    found, report.overlay = _safely(
        report,
        "context",
        ([], None),
        context.check,
        target,
        draft,
        pkg,
        argv.value("context-length"),
        env,
        fix,
        overlay_root,
        release,
        answer,
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
        graphs_off = argv.has("disable-cuda-graph") or any(
            argv.value(flag) == value
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
                answer,
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

    report.add(*_safely(report, "sizes", [], sizes.check, target, draft, server_args))
    report.add(*_safely(report, "scaleout", [], scaleout.check, server_args, env))
    report.add(*_safely(report, "adaptive", [], adaptive.check, server_args, release))
    if host_checks:
        tp = scaleout.gpus_per_node(server_args)  # this node's share of tp * pp
        try:
            fraction = float(argv.value("mem-fraction-static") or 0) or None
        except ValueError:
            fraction = None
        device = argv.value("device") or "cuda"
        if device == "cuda":
            report.add(*_safely(report, "host", [], host.check_gpus, env, tp, hardware, fraction))
            report.add(*_safely(report, "host", [], host.check_p2p, tp))
        report.add(
            *_safely(
                report,
                "host",
                [],
                host.check_port,
                argv.host,
                _int(argv.port_text, 30000),
            )
        )
    report.waive(skip)
    return report
