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
    memory_plan,
    model_dirs,
    scaleout,
    shapes,
    sizes,
)
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding, Report


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


def probe_argv(
    target_dir: str, draft_dir: str | None, server_args: list[str], eagle3: bool
) -> list[str]:
    """The launch's SGLang arguments with the pair in them (preflight's own CLI takes the
    pair as flags of its own): what the server will be started with."""
    argv = ServerArgv(server_args)
    out = list(server_args)
    if argv.model_path is None:
        out += ["--model-path", target_dir]
    if draft_dir is not None and argv.draft_model_path is None:
        out += ["--speculative-draft-model-path", draft_dir]
        if eagle3 and argv.speculative_algorithm is None:
            out += ["--speculative-algorithm", "EAGLE3"]
    return out


# SGLang's refusals, by the step of the probe that met them: (finding id, what it asked)
_STEPS = {
    "settings": ("sglang.refused", "its argument parser and resolution"),
    "plugins": ("sglang.refused", "its plugins"),
    "probe": ("sglang.refused", "the probe"),
    "target": ("config.sglang-refused", "its ModelConfig of the target"),
    "draft": ("config.sglang-refused", "its ModelConfig of the draft"),
    "registry": ("arch.sglang-refused", "its model loader's class lookup"),
    "capture": ("aux.sglang-refused", "the target class's EAGLE-3 capture setup"),
}


def _fix_for(err: dict) -> str:
    """The fix for one of SGLang's refusals: what its own message asks for."""
    text = err.get("message", "")
    if "trust_remote_code" in text or "trust-remote-code" in text or "custom code" in text:
        return (
            "if you trust the model repository's code, launch with `-- --trust-remote-code` "
            "(SGLang then runs its configuration code); else use a model SGLang supports natively"
        )
    if "unrecognized arguments" in text or "invalid choice" in text or "expected one" in text:
        return "correct the SGLang argument named above (python -m sglang.launch_server --help)"
    if no_device(err):
        return (
            "run preflight on the server's host for SGLang's own settings, or add "
            "`--device cpu` (`--cpu`) for a CPU launch"
        )
    if err.get("step") == "capture":
        return (
            "use a target family whose SGLang class captures EAGLE-3 aux states "
            "(set_eagle3_layers_to_capture), or a speculative algorithm without aux states"
        )
    return "correct what SGLang's message names (the file above, or the launch's arguments)"


def no_device(err: dict) -> bool:
    """SGLang refused only because this host has no accelerator (a GPU launch checked
    on another machine): a fact about where preflight runs, not about the launch."""
    return "No accelerator" in str(err.get("message", ""))


def refusals(answer: ask_sglang.Answer) -> list[Finding]:
    """Every exception SGLang raised about this launch: its words, the file, the fix."""
    found, seen = [], set()
    # a length refusal is the context check's, with its explanation and fixes
    lengths = {(answer.context.get(k) or {}).get("error") for k in ("target", "draft")}
    for err in answer.errors:
        text = f"{err.get('type')}: {err.get('message')}"
        if text in seen or err.get("message") in lengths:
            continue
        seen.add(text)
        fid, what = _STEPS.get(err.get("step"), ("sglang.refused", "the probe"))
        file = err.get("file")
        if file and Path(file).is_dir():
            file = str(Path(file) / "config.json")
        if no_device(err):  # not a refusal of the launch: say what is predicted instead
            found.append(
                Finding(
                    "sglang.no-device",
                    WARNING,
                    f"SGLang {answer.version} cannot resolve this GPU launch on this host "
                    f"({what}; {answer.label}): {text} Its settings and any verdict that "
                    f"needs them are predicted from the release table here.",
                    _fix_for(err),
                    data={"verdict": answer.label, "step": err.get("step")},
                )
            )
            continue
        found.append(
            Finding(
                fid,
                ERROR,
                f"SGLang {answer.version} refuses this launch ({what}; {answer.label}): {text}",
                _fix_for(err),
                file=file,
                data={"verdict": answer.label, "step": err.get("step"), "type": err.get("type")},
            )
        )
    return found


def settings_view(answer: ask_sglang.Answer) -> Finding | None:
    """What SGLang sets on its own for this launch (the settings view), as one note."""
    res = answer.settings
    if res is None or res.error:
        return None
    return Finding(
        "sglang.settings",
        INFO,
        f"settings SGLang {res.version} sets on its own for this launch ({res.label}):\n        "
        + "\n        ".join(res.lines()),
        data={
            "verdict": res.label,
            "changes": [[c.field, c.before, c.after, c.by] for c in res.changes],
        },
    )


def _asked_note(answer: ask_sglang.Answer, python: str) -> Finding:
    parts = []
    if answer.settings is not None and not answer.settings.error:
        parts.append("its parser and resolution of the launch's arguments")
    if "len" in answer.context.get("target_own", {}):
        parts.append("its ModelConfig of " + ("target and draft" if answer.draft else "the target"))
    if answer.target_class:
        parts.append(f"its model loader's class ({answer.target_class.get('class')})")
    if isinstance((answer.aux or {}).get("layers_to_capture"), list):
        parts.append("that class's set_eagle3_layers_to_capture")
    when = (
        f"cached answer from {answer.cached_at} on these exact inputs, read in"
        if answer.cached_at
        else "in"
    )
    said = "; ".join(parts) if parts else "nothing it could answer"
    refused = (
        f"; it refused {len(answer.errors)} step(s), listed as errors" if answer.errors else ""
    )
    return Finding(
        "sglang.asked",
        INFO,
        f"verdicts by SGLang {answer.version} itself ({python}, no weights; {when} "
        f"{answer.seconds:.1f} s): {said}{refused}. Anything else here is predicted "
        f"from the release table.",
        data={
            "seconds": round(answer.seconds, 2),
            "version": answer.version,
            "cached_at": answer.cached_at,
        },
    )


def ask_release(
    argv: list[str],
    release: releases.Release,
    env: Mapping[str, str],
    python: str | None,
) -> tuple[ask_sglang.Answer | None, list[Finding]]:
    """SGLang's own answer about this launch when `python` imports the release launched."""
    python = python or ask_sglang.default_python()
    found = ask_sglang.installed(python, dict(env))
    installed = found.get("sglang")
    dry = "verdicts predicted from the release table"
    if installed is None:
        return None, [Finding("sglang.dry-run", INFO, f"no SGLang in {python}: {dry}.")]
    if installed != release.version:
        return None, [
            Finding(
                "sglang.dry-run",
                INFO,
                f"{python} has SGLang {installed}, the launch is for {release.version}: {dry}.",
            )
        ]
    answer, why = ask_sglang.ask_launch(python, argv, dict(env), found=found)
    if answer is None:
        return None, [Finding("sglang.unavailable", WARNING, f"{why}; {dry}.")]
    notes = [_asked_note(answer, python), *refusals(answer), settings_view(answer)]
    return answer, [n for n in notes if n is not None]


def _check_fix(report: Report, argv: list[str], release, env, python) -> None:
    """--fix wrote an overlay: the same SGLang is asked about the launch on it before
    the report may say OK."""
    retargeted = report.retarget(argv)
    answer, notes = ask_release(retargeted, release, env, python)
    fixed = next(
        (f for f in report.findings if f.id == "context.draft-shorter" and f.severity == INFO),
        None,
    )
    draft_verdict = (answer.context.get("draft") or {}) if answer is not None else {}
    refused = [n for n in notes if n.severity == ERROR] if answer is not None else []
    if "error" in draft_verdict:
        refused.append(
            Finding(
                "context.draft-shorter",
                ERROR,
                f"SGLang {answer.version} still refuses the overlay's draft ({answer.label}): "
                f"{draft_verdict['error']}",
                "fix the draft's config by hand; the overlay did not satisfy SGLang",
                file=str(report.overlay / "config.json"),
            )
        )
    if not refused:
        if fixed is None:
            return
        loaded = (
            answer is not None
            and answer.settings is not None
            and not answer.settings.error
            and not answer.errors
            and "len" in draft_verdict
        )
        if loaded:  # SGLang resolved the launch and built the overlay's draft config
            fixed.message += f" SGLang {answer.version} accepts the overlay ({answer.label})."
        else:
            why = "; ".join(n.message for n in notes if n.severity != INFO) or "no answer"
            fixed.message += f" SGLang did not check the overlay here ({why})."
        return
    for f in refused:
        f.message = f"--fix wrote {report.overlay}, but: {f.message}"
    if fixed is not None:
        report.findings.remove(fixed)
    report.add(*refused)
    report.overlay = None


def _memory(answer, release, argv: list[str], min_context: int, env) -> list[Finding]:
    """The memory plan per rank (memory_plan.py), or why there is none."""
    plan, why = memory_plan.for_launch(answer, release, argv, min_context, env)
    if plan is None:
        return [Finding("memory.plan", INFO, f"no memory plan: {why}.")]
    return plan.findings()


def _pcie_bound(release, server_args, env, target) -> list[Finding]:
    """The pcie-allreduce overlay's size bound against every verify shape of the launch."""
    from sgl_eagle_ext.launcher import nccl

    cfg = target.config if isinstance(target.config, dict) else {}
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    hidden = text.get("hidden_size") if isinstance(text.get("hidden_size"), int) else None
    note, warnings = nccl.pcie_bound_lines(release, server_args, env, hidden)
    if note is None:
        return []
    fix = "set the variable named above, or drop the wider steps from the adaptive table"
    return [
        Finding("pcie.bound", INFO, note + "."),
        *(Finding("pcie.bound-exceeded", WARNING, w + ".", fix) for w in warnings),
    ]


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
    min_context: int = memory_plan.MIN_CONTEXT,
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
    launch_argv = None
    if ask and target.config is not None:
        launch_argv = probe_argv(
            target_dir, draft_dir if draft is not None else None, server_args, eagle3
        )
        answer, notes = _safely(
            report,
            "sglang",
            (None, []),
            ask_release,
            launch_argv,
            release,
            env,
            sglang_python,
        )
        report.add(*notes)

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
    if report.overlay is not None and answer is not None:
        _safely(report, "fix", None, _check_fix, report, launch_argv, release, env, sglang_python)
    report.add(*_safely(report, "rope", [], context.check_rope, target, draft))
    if target.config is not None:
        report.add(
            *_safely(
                report,
                "arch",
                [],
                shapes.architectures,
                target,
                draft,
                release,
                pkg,
                eagle3,
                answer,
            )
        )

    if eagle3 and target.config is not None and draft.config is not None:
        found, fc_count = _safely(report, "shape", ([], None), shapes.check, target, draft, answer)
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

    if answer is not None and launch_argv is not None:
        report.add(
            *_safely(report, "memory", [], _memory, answer, release, launch_argv, min_context, env)
        )
    report.add(*_safely(report, "sizes", [], sizes.check, target, draft, server_args))
    report.add(*_safely(report, "scaleout", [], scaleout.check, server_args, env))
    report.add(*_safely(report, "pcie", [], _pcie_bound, release, server_args, env, target))
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
            report.add(*_safely(report, "host", [], host.check_nccl_env, env, tp))
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
