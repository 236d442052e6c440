"""Arms that differ only in speculation: compare what SGLang will run for each arm before
any weights load.

    from sgl_eagle_ext.launcher import fairness
    verdict = fairness.check({"A": plan_a, "B": plan_b}, allow_unequal=False)
    verdict.lines()      what to print; verdict.record() beside every figure

Each arm's resolved settings come from SGLang itself where the release being launched is
installed in the python that will run it (the preflight's question to SGLang,
ask_sglang.settings_for_launches: one subprocess for all arms, each arm's answer
cached), else from the release table's rules (common/releases.py RESOLUTION_RULES,
labelled "predicted"). A setting outside the speculative ones that differs between arms
stops the run (UserError, exit 2) with the setting and the flag that pins it, unless
allow_unequal: then every difference is recorded beside the figures. A difference
SGLang forces on speculative servers whatever is given (a rule with forced=True: e.g.
no overlap scheduler for the v1 worker) is part of what speculation costs on that
release: reported and recorded, never a stop.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from sgl_eagle_ext.common import contract, redaction, releases, render
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher.resolution import Change, Resolution

# The speculative settings, the one definition: every ServerArgs field named
# speculative_* (SGLang's own namespace for them, private ones included) and these.
SPECULATIVE_PREFIX = "speculative_"
SPECULATIVE_FIELDS = frozenset({"enable_multi_layer_eagle"})

EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
# Resolution facts that are not settings of the server (bookkeeping, echoes of the
# arguments SGLang keeps for its log)
IGNORED = frozenset({"port"})


def is_speculative(name: str) -> bool:
    top = name.split(".", 1)[0].lstrip("_")
    return top.startswith(SPECULATIVE_PREFIX) or top in SPECULATIVE_FIELDS


# The speculative environment variables: ours that only a speculative server reads, and
# SGLang's own that name speculation (SGLANG_SPEC_*, SGLANG_*_DRAFT_*, ...). Any other
# variable set differently per arm (NCCL_*, CUDA_*, OMP_*, SGLANG_*) is a condition of
# the measurement: NCCL settings alone once moved a baseline from 62.9 to 88.8 tok/s.
SPECULATIVE_ENV = frozenset(
    {
        contract.ADAPTIVE_BACKOFF_ENV,
        contract.CHAIN_VERIFY_ENV,
        contract.DRAFT_CATCHUP_ENV,
        contract.SCHEDULE_FILE_ENV,
    }
)
SPECULATIVE_ENV_WORDS = frozenset({"SPEC", "EAGLE", "DRAFT", "MTP", "NEXTN"})
ENV_FIELD = "env "  # a Difference of an environment variable: "env NCCL_PROTO"


def is_speculative_env(name: str) -> bool:
    if name in SPECULATIVE_ENV:
        return True
    return name.startswith("SGLANG_") and bool(SPECULATIVE_ENV_WORDS & set(name.split("_")))


# -- the release table's prediction --------------------------------------------------


def decode_graph_sizes(max_bs: int, speculative: bool) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes up to max_bs (predicted: the same
    lists in every supported release's generate_decode_cuda_graph_batch_sizes)."""
    if speculative:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
    sizes = [s for s in sizes if s <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def _conditions(argv: ServerArgv, env: Mapping[str, str]) -> set[str]:
    algo = (argv.value("speculative-algorithm") or "").upper() or None
    device = argv.value("device") or "cuda"
    found = set()
    if algo:
        found.add("spec")
    if algo in EAGLE_FAMILY:
        found.add("eagle")
    found.add("cpu" if device == "cpu" else "gpu")
    if str(env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() not in ("1", "true", "yes"):
        found.add("spec-v1")
    return found


def _field(flag: str, release: releases.Release) -> str:
    return release.flag(flag).replace("-", "_")


def _given(argv: ServerArgv) -> dict[str, object]:
    """The settings the argument list gives (flag -> field name; a bare flag is True)."""
    out: dict[str, object] = {}
    tokens = list(argv)
    for i, tok in enumerate(tokens):
        if not tok.startswith("--"):
            continue
        name, eq, inline = tok[2:].partition("=")
        values = [inline] if eq else []
        j = i + 1
        while not eq and j < len(tokens) and not tokens[j].startswith("--"):
            values.append(tokens[j])
            j += 1
        key = name.replace("-", "_")
        values = [_number(v) for v in values]
        out[key] = True if not values else values[0] if len(values) == 1 else values
    return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def predicted_settings(
    release: releases.Release, argv, env: Mapping[str, str] | None = None
) -> Resolution:
    """What the release table's rules say SGLang will run for `argv`: the settings the
    arguments give plus the rules that apply (source="predicted")."""
    argv = ServerArgv.of(argv)
    env = dict(os.environ if env is None else env)
    conds = _conditions(argv, env)
    fields = _given(argv)
    changes = []
    for rule in releases.RESOLUTION_RULES.get(release.version, ()):
        flag_field = _field(rule.flag, release)
        given = fields.get(flag_field)
        if not {c for c in rule.when if c in ("cpu", "gpu")} <= conds:
            continue  # another device: SGLang decides it otherwise (not predicted)
        if rule.forced and rule.field not in fields:
            fields[rule.field] = rule.default if given is None else given
        if not set(rule.when) <= conds:
            continue
        if given is not None and not rule.forced:
            if rule.value == releases.GRAPH_SIZES:
                fields[rule.field] = [int(v) for v in _as_list(given)]
            continue
        if rule.forced and (rule.default if given is None else given) == rule.value:
            continue  # already what SGLang would force
        value = rule.value
        if value == releases.GRAPH_SIZES:
            max_bs = fields.get(_field("cuda-graph-max-bs", release))
            if max_bs is None:
                continue  # SGLang's default depends on the GPU's memory: not predicted
            value = decode_graph_sizes(int(max_bs), "spec" in conds)
        fields[rule.field] = value
        changes.append(Change(rule.field, given, value, rule.by))
    return Resolution(release.version, "predicted", fields, changes)


def _as_list(value) -> list:
    return value if isinstance(value, list) else str(value).split()


# -- SGLang's own answer, else the prediction --------------------------------------------


def resolve_arms(
    plans: Mapping[str, object], python: str = sys.executable, notes: list | None = None
) -> dict:
    """label -> Resolution for every arm's launch plan (launcher/plan.py LaunchPlan):
    SGLang's own where the plans' release is the one installed in `python` (every arm
    asked at once: one probe subprocess, each arm's answer cached), else the release
    table's prediction. Never raises for SGLang's failures: an arm SGLang could not
    resolve falls back to the prediction with the reason in `error`."""
    from sgl_eagle_ext.launcher.preflight import ask_sglang

    first = next(iter(plans.values()))
    out: dict[str, Resolution] = {}
    if releases.installed_version(python) == first.release.version:
        launches = [
            ask_sglang.Launch(list(p.argv), {**os.environ, **p.env}) for p in plans.values()
        ]
        answers = ask_sglang.settings_for_launches(python, launches)
        for label, r in zip(plans, answers, strict=True):
            if r is not None and not r.error:
                out[label] = r
            elif notes is not None:
                why = r.error if r is not None else "no answer"
                notes.append(f"SGLang could not resolve {label} ({why}): predicted instead")
    for label, plan in plans.items():
        if label not in out:
            out[label] = predicted_settings(plan.release, plan.argv, {**os.environ, **plan.env})
    return out


# -- the comparison --------------------------------------------------------------------


@dataclass
class Difference:
    field: str
    values: dict[str, object]  # arm label -> value (None: unset)
    flag: str  # the flag that pins it, this release's spelling
    inherent: str = ""  # the SGLang hook that forces it on speculative servers

    @property
    def is_env(self) -> bool:
        return self.field.startswith(ENV_FIELD)

    def line(self) -> str:
        shown = ", ".join(f"{k} {_short(v)}" for k, v in self.values.items())
        if self.inherent:
            tail = "" if self.is_env else "; part of what speculation costs"
            return f"{self.field} differs ({shown}): {self.inherent}{tail}"
        pin = "in every arm's preset [env]" if self.is_env else f"with --{self.flag} for every arm"
        return f"{self.field} differs between arms ({shown}): pin it {pin}"

    def fix(self) -> str:
        """How to make the arms alike in it."""
        if self.is_env:
            return f"give {self.field[len(ENV_FIELD) :]} one value in every arm's preset [env]"
        return f"pass -- --{self.flag} VALUE (the same for every arm)"


def _short(v) -> str:
    text = "unset" if v is None else json.dumps(v) if not isinstance(v, str) else v
    return text if len(text) <= 60 else text[:57] + "..."


def _flag_for(name: str, release: releases.Release) -> str:
    for rule in releases.RESOLUTION_RULES.get(release.version, ()):
        if rule.field == name:
            return release.flag(rule.flag)
    return name.split(".", 1)[0].lstrip("_").replace("_", "-")


# The one non-speculative setting a shipped preset sets for speculation's sake: the
# adaptive preset's lower static memory fraction leaves room for the CUDA graphs of its
# extra runtime states (launch/eagle3-adaptive.toml). Reported and recorded beside every
# figure, never a stop, while every arm that is not adaptive shares one value.
ROOM = "mem_fraction_static"
ADAPTIVE_ROOM = (
    "the adaptive arm's own room for its extra runtime states' CUDA graphs "
    "(launch/eagle3-adaptive.toml)"
)


def _room_for_adaptive(resolved: Mapping[str, Resolution], values: dict) -> bool:
    adaptive = {lb for lb, r in resolved.items() if r.fields.get("speculative_adaptive")}
    others = {json.dumps(v, default=str) for lb, v in values.items() if lb not in adaptive}
    return bool(adaptive) and len(others) <= 1


def differences(resolved: Mapping[str, Resolution], release: releases.Release) -> list:
    """Every non-speculative setting whose value is not the same in all arms."""
    labels = list(resolved)
    names = sorted({k for r in resolved.values() for k in r.fields})
    forced = {
        r.field: r.by for r in releases.RESOLUTION_RULES.get(release.version, ()) if r.is_inherent
    }
    out = []
    for name in names:
        if is_speculative(name) or name in IGNORED:
            continue
        values = {lb: resolved[lb].fields.get(name) for lb in labels}
        if name == ROOM and _room_for_adaptive(resolved, values):
            out.append(Difference(name, values, _flag_for(name, release), ADAPTIVE_ROOM))
            continue
        same = len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) <= 1
        if same and releases.RANDOM not in values.values():  # two random seeds differ
            continue
        by = forced.get(name)
        why = f"SGLang forces it on speculative servers ({by})" if by else ""
        out.append(Difference(name, values, _flag_for(name, release), why))
    return out


def env_differences(
    envs: Mapping[str, Mapping[str, str]], inherent: Mapping[str, str] | None = None
) -> list[Difference]:
    """Every server environment variable outside the speculative ones whose value is not
    the same in all arms (what each arm's plan sets over this process's environment,
    which every arm inherits alike). `inherent`: variables the caller sets differently on
    purpose -> why (recorded as notes). Secret values are never shown."""
    out = []
    for name in sorted({k for env in envs.values() for k in env}):
        values = {lb: env.get(name) for lb, env in envs.items()}
        if is_speculative_env(name) or len(set(values.values())) <= 1:
            continue
        if redaction.is_secret_name(name):
            values = {lb: None if v is None else redaction.REDACTED for lb, v in values.items()}
        out.append(Difference(ENV_FIELD + name, values, "", (inherent or {}).get(name, "")))
    return out


@dataclass
class Verdict:
    sources: dict[str, str]  # arm label -> how its settings were known
    unequal: list[Difference] = field(default_factory=list)  # stops unless allowed
    inherent: list[Difference] = field(default_factory=list)
    allowed: bool = False  # --allow-unequal
    notes: list[str] = field(default_factory=list)  # why SGLang's own answer is missing

    @property
    def fair(self) -> bool:
        return not self.unequal

    def lines(self) -> list[str]:
        src = sorted(set(self.sources.values()))
        head = f"arms: resolved settings {'; '.join(src)}: "
        if self.fair:
            head += "they differ only in speculative settings"
        else:
            head += f"{len(self.unequal)} other setting(s) differ (--allow-unequal)"
        # values come from presets and SGLang: a newline in one cannot forge a line
        return [
            head,
            *(f"  unequal: {render.line(d.line())}" for d in self.unequal),
            *(f"  note: {render.line(d.line())}" for d in self.inherent),
            *(f"  note: {render.line(n)}" for n in self.notes),
        ]

    def record(self) -> dict:
        """For the results records, beside every figure."""
        return {
            "fair": self.fair,
            "sources": self.sources,
            "allow_unequal": self.allowed,
            "unequal": {d.field: d.values for d in self.unequal},
            "inherent": {d.field: {"values": d.values, "by": d.inherent} for d in self.inherent},
        }


def judge(
    resolved: Mapping[str, Resolution],
    release,
    allow_unequal: bool = False,
    envs: Mapping[str, Mapping[str, str]] | None = None,
    inherent_env: Mapping[str, str] | None = None,
) -> Verdict:
    """The verdict on resolved settings and the arms' environments (env_differences);
    raises UserError (exit 2) on the first difference outside the speculative ones
    unless allow_unequal."""
    diffs = differences(resolved, release) + env_differences(envs or {}, inherent_env)
    verdict = Verdict(
        {lb: r.label for lb, r in resolved.items()},
        [d for d in diffs if not d.inherent],
        [d for d in diffs if d.inherent],
        allow_unequal,
    )
    if verdict.unequal and not allow_unequal:
        d = verdict.unequal[0]
        more = f" (and {len(verdict.unequal) - 1} more)" if len(verdict.unequal) > 1 else ""
        raise UserError(
            f"arms are not comparable: {render.line(d.line())}{more}; resolved "
            f"{'; '.join(sorted(set(verdict.sources.values())))}.",
            fix=f"{d.fix()}, or --allow-unequal to run anyway with the differences recorded "
            "beside every figure",
        )
    return verdict


def check(plans: Mapping[str, object], allow_unequal: bool = False, python=None) -> Verdict:
    """Resolve every arm's launch plan and judge them (before any server starts)."""
    notes: list[str] = []
    resolved = resolve_arms(plans, python or sys.executable, notes)
    envs = {label: plan.env for label, plan in plans.items()}
    verdict = judge(resolved, next(iter(plans.values())).release, allow_unequal, envs)
    verdict.notes = notes
    return verdict
