"""The launch plan: one typed request in, the exact server command and env out.

Public API (the launcher, `bench compare/ab` and `tune --live` all build launches here):

    from sgl_eagle_ext.launcher.plan import LaunchRequest, build

    plan = build(LaunchRequest(
        preset="eagle3-2step",            # a shipped preset name, or
        preset_file=None,                 # your own TOML (exactly one of the two)
        model_path="/models/T", draft_model_path="/models/D",
        overlays=("2node",), cpu=False,   # launch/overlays/NAME.toml or .toml paths
        sglang_version=None, force=False, # None: the installed release
        adaptive_config=None,             # adaptive presets: the table file
        extra=("--port", "30001"),        # SGLang arguments; they override the preset
        env={"NCCL_PROTO": "LL"},         # over the preset's [env]
    ))
    plan.argv                 ServerArgv: the final SGLang arguments (no secret flag)
    plan.flag("speculative-num-steps"), plan.host, plan.port, plan.model_path,
    plan.draft_model_path, plan.tp_size, plan.speculative (algorithm/steps/topk/tokens)
    plan.env                  the server's environment on top of os.environ
    plan.preset, plan.release, plan.how, plan.secrets (flag -> value; plan.api_key),
    plan.notes, plan.command()

`build` raises UserError (exit 2 at the command line) for bad input before anything
starts; it prints nothing: `plan.notes` holds the lines a caller shows (the launcher
prints them to stderr). A plan is immutable; `plan.with_argv(args)` makes one with
other arguments (the preflight's retargeted draft).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import chain, http, releases, secret_flags
from sgl_eagle_ext.common.contract import SERVE_MODULE
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import presets, server_config
from sgl_eagle_ext.launcher.presets import Preset

ADAPTIVE = "speculative-adaptive"
ADAPTIVE_CONFIG = "speculative-adaptive-config"

# Flags SGLang accepts under another name in every release (argparse aliases).
FLAG_ALIASES = {
    "tp": "tp-size",
    "tensor-parallel-size": "tp-size",
    "speculative-draft-model": "speculative-draft-model-path",
    "model": "model-path",
}
# Flags that SM120 GPUs reject (see the reference: FlashInfer allreduce fusion is
# SM90/SM100 only; trtllm_mla passes SGLang's check but FlashInfer refuses SM120).
SM120_REJECTED = {
    "enable-flashinfer-allreduce-fusion": None,
    "attention-backend": "trtllm_mla",
    "speculative-draft-attention-backend": "trtllm_mla",
}


@dataclass(frozen=True)
class LaunchRequest:
    """What to launch. Paths may be None where `extra` gives `--model-path` itself."""

    preset: str | None = None
    preset_file: str | Path | None = None
    model_path: str | None = None
    draft_model_path: str | None = None
    overlays: tuple[str, ...] = ()
    cpu: bool = False  # the CPU harness overlay (launch/overlays/cpu.toml), applied last
    sglang_version: str | None = None
    force: bool = False
    adaptive_config: str | Path | None = None
    extra: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Speculative:
    algorithm: str | None
    num_steps: int | None
    topk: int | None
    num_draft_tokens: int | None


@dataclass(frozen=True)
class LaunchPlan:
    request: LaunchRequest  # as given, less the secret flags in `extra`
    preset: Preset
    release: releases.Release
    how: str  # how the release was chosen ("installed", "--sglang-version", ...)
    argv: ServerArgv
    env: dict[str, str]
    # the secret flags taken out of `extra` ({"api-key": ..., "admin-api-key": ...})
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    notes: tuple[str, ...] = ()

    @property
    def api_key(self) -> str | None:
        return self.secrets.get("api-key")

    def flag(self, name: str) -> str | None:
        """The final value of an SGLang flag (`name` without dashes, this release's
        spelling), as SGLang's argparse will read it."""
        return self.argv.value(name)

    def has(self, name: str) -> bool:
        return self.argv.has(name)

    @property
    def host(self) -> str:
        return self.argv.host

    @property
    def port(self) -> int:
        return http.parse_port("--port", self.argv.port_text)

    @property
    def model_path(self) -> str | None:
        return self.argv.model_path

    @property
    def draft_model_path(self) -> str | None:
        return self.argv.draft_model_path

    @property
    def tp_size(self) -> int:
        return self.argv.tp_size

    @property
    def speculative(self) -> Speculative:
        a = self.argv
        return Speculative(a.speculative_algorithm, a.num_steps, a.topk, a.num_draft_tokens)

    def command(self, python: str = sys.executable) -> list[str]:
        return [python, "-m", SERVE_MODULE, *self.argv]

    def with_argv(self, args: Iterable[str]) -> LaunchPlan:
        return dataclasses.replace(self, argv=ServerArgv(args))


def build(request: LaunchRequest) -> LaunchPlan:
    """Preset + overlays + release + adaptive table + paths + extra -> the plan."""
    if not (request.preset or request.preset_file):
        raise UserError(
            "no preset given.",
            fix="pass --preset NAME (see --list-presets) or --preset-file PATH",
        )
    notes: list[str] = []
    # SGLang's own --config file: its flags read here, its secrets taken below
    extra = server_config.expand(list(request.extra))
    preset = presets.load(name=request.preset, path=request.preset_file)
    for name in request.overlays:
        preset = apply_overlay(preset, name)
    if request.cpu:
        preset = apply_overlay(preset, "cpu")
    release, how = releases.resolve(request.sglang_version, force=request.force)
    extra_flags = {canonical_flag(t, release) for t in extra}
    notes += resolve_adaptive(preset, release, request.adaptive_config, extra_flags)

    paths = {}
    if request.model_path:
        paths["model-path"] = request.model_path
    if request.draft_model_path and preset.speculative:
        paths["speculative-draft-model-path"] = request.draft_model_path
    preset.server = {**paths, **preset.server}
    if "model-path" not in preset.server and "model-path" not in extra_flags:
        raise UserError("no target model given.", fix="pass --model-path DIR")
    if (
        preset.speculative
        and "speculative-draft-model-path" not in preset.server
        and "speculative-draft-model-path" not in extra_flags
    ):
        raise UserError(
            f"preset '{preset.name}' speculates but no draft model is given.",
            fix="pass --draft-model-path DIR (an EAGLE-3 draft for this target)",
        )
    if request.draft_model_path and not preset.speculative:
        notes.append(
            f"note: preset '{preset.name}' does not speculate; --draft-model-path is ignored"
        )
    for tok in extra:
        name = tok[2:].split("=", 1)[0] if tok.startswith("--") else None
        if name in release.renames:
            notes.append(
                f"warning: SGLang {release.version} spells --{name} as "
                f"--{release.renames[name]}; passing your argument untouched"
            )

    argv = ServerArgv(render_server_args(preset, release, extra))
    if preset.hardware == "sm120":
        bad = sm120_violations(argv)
        if bad and not request.force:
            raise UserError(
                f"{', '.join(bad)}: rejected by SM120 GPUs (RTX PRO 6000), which "
                f"preset '{preset.name}' is written for.",
                fix="drop the flag (use attention backend triton or flashinfer), "
                "or pass --force if your GPUs are not SM120",
            )
    # every secret flag (--api-key, --admin-api-key, ...) travels in the environment
    args, secrets = secret_flags.take(list(argv))
    env = {**preset.env, **{k: str(v) for k, v in request.env.items()}}
    kept = dataclasses.replace(request, extra=tuple(secret_flags.take(extra)[0]))
    return LaunchPlan(kept, preset, release, how, ServerArgv(args), env, secrets, tuple(notes))


def apply_overlay(preset: Preset, name: str) -> Preset:
    """`preset` with launch/overlays/NAME.toml (or the .toml file NAME) merged on top."""
    folder = presets.PRESET_DIR / "overlays"
    path = Path(name) if name.endswith(".toml") else Path(str(folder / f"{name}.toml"))
    if not path.is_file():
        shipped = sorted(
            p.name[:-5]
            for p in folder.iterdir()
            if p.name.endswith(".toml") and p.name != "cpu.toml"
        )
        raise UserError(
            f"--overlay {name}: no such overlay.",
            fix=f"use one of: {', '.join(shipped)} (launch/overlays/), or a .toml path",
        )
    return preset.merged_with(presets.load(path=path))


def resolve_adaptive(
    preset: Preset,
    release: releases.Release,
    adaptive_config: str | Path | None,
    extra_flags: set[str | None],
) -> list[str]:
    """Gate an adaptive launch by the release table and point its config at a real file:
    `adaptive_config`, else the preset's (relative: to a file of its chain, or launch/).
    Edits `preset.server`; returns the notes to show."""
    if not (preset.server.get(ADAPTIVE) is True or ADAPTIVE in extra_flags):
        if adaptive_config:
            raise UserError(
                f"--adaptive-config: preset '{preset.name}' is not adaptive.",
                fix="use --preset eagle3-adaptive (or add speculative-adaptive = true)",
            )
        return []
    if release.adaptive is None:
        raise UserError(
            f"preset '{preset.name}': SGLang {release.version} has no --speculative-adaptive "
            "(0.5.13.post1 or newer); use a fixed preset such as eagle3-3step there."
        )
    if ADAPTIVE_CONFIG in extra_flags:
        return []  # the user's own argument, passed untouched (the preflight checks it)
    given = adaptive_config or preset.server.get(ADAPTIVE_CONFIG)
    if not given:
        return []
    path = Path(str(given)).expanduser()
    if not adaptive_config and not path.is_absolute():
        roots = [Path(f).parent for f in reversed(preset.chain)] + [Path(str(presets.PRESET_DIR))]
        path = next((r / path for r in roots if (r / path).is_file()), path)
    if not path.exists():  # a FIFO, device or folder is there: the loader names what it is
        where = "--adaptive-config" if adaptive_config else f"preset '{preset.name}'"
        raise UserError(
            f"{where}: adaptive config {given} does not exist.",
            fix="give an existing JSON file (python -m sgl_eagle_ext.tune writes one)",
        )
    from sgl_eagle_ext.launcher.preflight import adaptive

    buckets, found = adaptive.load(path, release)
    if buckets is None:
        first = next(f for f in found if f.severity == "error")
        where = f" field {first.field}:" if first.field else ""
        raise UserError(f"adaptive config {path}:{where} {first.message}", fix=first.fix)
    preset.server[ADAPTIVE_CONFIG] = str(path.resolve())
    union = sorted({s for steps in buckets.values() for s in steps})
    start = preset.server.get("speculative-num-steps")
    if "speculative-num-steps" not in extra_flags and start not in union:
        # SGLang refuses a starting step outside the table; take its own unset rule
        chosen = union[len(union) // 2]
        preset.server["speculative-num-steps"] = chosen
        preset.server["speculative-num-draft-tokens"] = chain.draft_tokens(chosen)
        return [
            f"note: adaptive config {path} has no {start}-step candidate; "
            f"starting at {chosen} steps (SGLang's choice for this table)"
        ]
    return []


def canonical_flag(token: str, release: releases.Release) -> str | None:
    """'--cuda-graph-max-bs-decode=8' -> 'cuda-graph-max-bs' (classic name), else None."""
    if not token.startswith("--"):
        return None
    name = token[2:].split("=", 1)[0]
    name = FLAG_ALIASES.get(name, name)
    for classic, new in release.renames.items():
        if name == new:
            return classic
    return name


def render_server_args(preset: Preset, release: releases.Release, extra: list[str]) -> list[str]:
    """SGLang arguments for `release`: the preset's flags, minus those `extra`
    sets again (extra wins), followed by `extra` untouched."""
    overridden = {c for c in (canonical_flag(t, release) for t in extra) if c}
    args: list[str] = []
    for key, value in preset.server.items():
        if value is False or key in overridden:
            continue
        if value is True and key in release.expansions:
            for flag, val in release.expansions[key]:
                if canonical_flag(f"--{flag}", release) not in overridden:
                    args += [f"--{flag}", val]
        elif value is True:
            args.append(f"--{release.flag(key)}")
        elif isinstance(value, list):  # a flag taking several values (nargs="+")
            args += [f"--{release.flag(key)}", *(str(v) for v in value)]
        else:
            args += [f"--{release.flag(key)}", str(value)]
    return args + list(extra)


def sm120_violations(server_args: Iterable[str]) -> list[str]:
    """Flags in the final argument list that SM120 GPUs reject."""
    argv = ServerArgv.of(server_args)
    found = []
    for name, value in argv.items():
        if name not in SM120_REJECTED:
            continue
        bad_value = SM120_REJECTED[name]
        if bad_value is None or value == bad_value:
            found.append(f"--{name}" + (f" {bad_value}" if bad_value else ""))
    return found
