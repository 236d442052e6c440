"""Adaptive speculation (`--speculative-adaptive`): the config file and the settings
under which SGLang would quietly serve static speculation instead.

SGLang's rules for the file: common/adaptive_config.py (its writer and reader);
here the launch's side of them: `--speculative-num-steps` must be one of the
candidates. A bad file stops SGLang only after it parsed
its arguments (a ValueError traceback); a setting in the release table's
`turned_off_by` makes SGLang log one warning and drop adaptive altogether.

    from sgl_eagle_ext.launcher.preflight import adaptive
    cfg, findings = adaptive.load(path, release)      # the file, by SGLang's rules
    findings = adaptive.check(server_args, release)    # file + turned-off settings
"""

from __future__ import annotations

from pathlib import Path

from sgl_eagle_ext.common import adaptive_config
from sgl_eagle_ext.common.releases import Release
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import runtime_states
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding

FLAG = "--speculative-adaptive"
STATES_ID = "adaptive.runtime-states"  # the launcher prints this note too
CONFIG_FLAG = adaptive_config.FLAG


def enabled(server_args) -> bool:
    return ServerArgv.of(server_args).has(FLAG)


def _bad(path, field, message, fix, fid="adaptive.config") -> Finding:
    return Finding(fid, ERROR, message, fix, file=str(path), field=field)


def load(path: str | Path, release: Release) -> tuple[dict[int, list[int]] | None, list[Finding]]:
    """Bucket -> candidate steps, by the loader rules of `release`; None when SGLang
    would refuse the file (the findings say why, naming field and fix). The format
    itself: common/adaptive_config.py."""
    buckets, problems = adaptive_config.load(path, release)
    return buckets, [
        Finding(p.id, p.severity, p.message, p.fix, file=str(path), field=p.field) for p in problems
    ]


def turned_off(server_args: list[str], release: Release) -> list[Finding]:
    """Every setting under which `release` would turn adaptive off (one warning line
    in SGLang's log, static speculation served)."""
    found = []
    argv = ServerArgv.of(server_args)
    algo = (argv.value("speculative-algorithm") or "").upper()
    if algo and algo not in ("EAGLE", "EAGLE3"):
        found.append((f"--speculative-algorithm {algo}", "only EAGLE and EAGLE3 adapt"))
    for what, flag, trigger in release.adaptive.turned_off_by:
        value = argv.switch(release.flag(flag))  # "": bare, or followed by the next flag
        if value is None:
            continue
        if trigger is None:
            if value == "" or value.lower() in ("true", "1"):
                found.append((f"--{flag}", what))
            continue
        try:
            number = int(value)
        except ValueError:
            continue
        if (trigger == "!=1" and number != 1) or (trigger == ">1" and number > 1):
            found.append((f"--{flag} {value}", what))
    return [
        Finding(
            "adaptive.off",
            ERROR,
            f"{setting}: SGLang {release.version} turns {FLAG} off ({why}) and serves "
            "static speculation, with one warning line in its log.",
            (
                "pass --speculative-eagle-topk 1"
                if setting.startswith("--speculative-eagle-topk")
                else f"drop {setting.split()[0]}"
            )
            + f", or drop {FLAG} (a fixed preset) knowingly (--skip adaptive.off)",
            field=setting.split()[0],
        )
        for setting, why in found
    ]


def check(server_args: list[str], release: Release) -> list[Finding]:
    """All adaptive findings for a launch; [] when it does not ask for adaptive."""
    server_args = list(server_args)
    if not enabled(server_args):
        return []
    if release.adaptive is None:
        return [
            Finding(
                "adaptive.unsupported",
                ERROR,
                f"SGLang {release.version} has no {FLAG}.",
                "use a fixed preset (eagle3-3step), or SGLang 0.5.13.post1 or newer",
            )
        ]
    argv = ServerArgv(server_args)
    found = turned_off(argv, release)
    path = argv.value(CONFIG_FLAG)
    if path is None:
        found.append(
            Finding(
                "adaptive.default-table",
                WARNING,
                f"no {CONFIG_FLAG}: SGLang's generic default table applies, not one "
                "tuned on this host.",
                "pass the preset's file or one written by python -m sgl_eagle_ext.tune",
            )
        )
        return found
    buckets, problems = load(path, release)
    found += problems
    if buckets is not None:
        found += states_note(argv, buckets, release)
    steps = argv.value("speculative-num-steps")
    if buckets is not None and steps is not None:
        union = sorted({s for c in buckets.values() for s in c})
        if not steps.isdigit() or int(steps) not in union:
            found.append(
                _bad(
                    path,
                    "candidate_steps",
                    f"--speculative-num-steps {steps} is not a candidate step of any "
                    f"bucket ({union}); SGLang refuses to start.",
                    f"pass --speculative-num-steps {union[len(union) // 2]} (or add "
                    f"{steps} to a bucket)",
                    fid="adaptive.initial-steps",
                )
            )
    return found


def states_note(argv: ServerArgv, buckets: dict[int, list[int]], release: Release) -> list[Finding]:
    """What the launch builds before it serves (launcher/runtime_states.py): SGLang's
    memory estimate has no term for the extra states."""
    plan = runtime_states.for_launch(argv, buckets)
    if plan is None or not plan.extra_states:
        return []
    return [
        Finding(
            STATES_ID,
            INFO,
            f"builds {plan.line()}; predicted from SGLang {release.version}'s rules. "
            "SGLang's --mem-fraction-static estimate has no term for the "
            f"{plan.extra_states} extra state(s): SGLang logs each one's cost "
            "('Built adaptive runtime state steps=N: ... mem=X GB').",
            "if the start runs out of memory after the weights load, lower "
            "--mem-fraction-static or drop candidate steps from the table",
            field="candidate_steps",
            data={
                "states": len(plan.states),
                "steps": [s.steps for s in plan.states],
                "batch_sizes": len(plan.batch_sizes),
                **{k: plan.total(k) for k in ("verify", "draft_extend", "draft_decode")},
            },
        )
    ]
