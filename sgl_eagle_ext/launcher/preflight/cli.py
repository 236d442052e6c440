"""python -m sgl_eagle_ext.preflight --model-path T --draft-model-path D [options] [-- SGLang args]
python -m sgl_eagle_ext.preflight --preset eagle3-2step --model-path T --draft-model-path D ...

With --preset or --preset-file (and --overlay, --cpu, --adaptive-config), the launch
checked is the one the launcher builds from the same flags (launcher/launch_flags.py:
one mapping onto plan.LaunchRequest); without, the pair and the SGLang arguments
after `--` as given. Reads config files (and safetensors headers) only. Exit codes: 0 no error-level
finding (warnings allowed); 1 at least one error (not waived by --skip); 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from sgl_eagle_ext.common import releases, secret_flags
from sgl_eagle_ext.common.cli_args import integer, port_number, split_extra
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import launch_flags, plan, presets, server_config
from sgl_eagle_ext.launcher.preflight import hosts, memory_plan, run

PROG = "sgl_eagle_ext.preflight"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Check a target/EAGLE-3 draft pair and this host before launching SGLang. "
        "Arguments after `--` are the SGLang arguments of the launch.",
    )
    launch_flags.add_preset(p, "python -m sgl_eagle_ext.launch --list-presets lists them")
    p.add_argument("--model-path", required=True, help="target model directory")
    p.add_argument("--draft-model-path", help="EAGLE-3 draft model directory")
    p.add_argument("--sglang-version", help="check for this release (default: the installed one)")
    p.add_argument(
        "--force",
        action="store_true",
        help="accept an unsupported --sglang-version (rules of the nearest older one)",
    )
    p.add_argument(
        "--context-length", type=integer(1), help="the --context-length the launch will pass"
    )
    p.add_argument("--tp-size", type=integer(1), help="the tensor-parallel size of the launch")
    p.add_argument("--port", type=port_number, help="the server port (default 30000)")
    p.add_argument("--hardware", help="the GPUs the preset is written for (sm120)")
    p.add_argument(
        "--fix",
        action="store_true",
        help="write a draft overlay with a corrected config.json where that fixes an "
        "error (the original directory is never modified)",
    )
    p.add_argument(
        "--overlay-dir",
        help="where --fix writes overlays (default ~/.cache/sgl-eagle-ext/overlays)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="ID",
        help="waive a finding id (or an id prefix such as `host`); repeatable",
    )
    p.add_argument("--no-host", action="store_true", help="skip the host checks")
    p.add_argument(
        "--rules-only",
        action="store_true",
        help="decide context length and aux layers by the project's rules even where the "
        "release is installed (default: ask that SGLang itself, about 10 s)",
    )
    p.add_argument(
        "--sglang-python",
        help="the python that will start SGLang (default: this one); preflight asks the "
        "SGLang it imports when that is the release checked",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="the launch runs with the CPU harness overlay (launch --cpu): --device cpu "
        "and its environment, in which SGLang is asked",
    )
    p.add_argument(
        "--target-host",
        choices=[*hosts.HOSTS, hosts.LOCAL],
        help="the GPU host a GPU launch is planned for: SGLang resolves it as there "
        f"(default: {hosts.DEFAULT.key} on a machine without an NVIDIA GPU, else this one; "
        f"env {hosts.ENV})",
    )
    p.add_argument(
        "--min-context",
        type=int,
        default=memory_plan.MIN_CONTEXT,
        help="the context each of --max-running-requests requests must get in the memory "
        f"plan (default {memory_plan.MIN_CONTEXT} tokens)",
    )
    launch_flags.add_overlay(p)
    launch_flags.add_adaptive_config(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="hide info-level notes")
    return p


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = parser().parse_args(ours)
    server_args = list(extra)
    for flag, value in (
        ("--context-length", args.context_length),
        ("--tp-size", args.tp_size),
        ("--port", args.port),
    ):
        if value is not None:
            server_args += [flag, str(value)]
    model_path, draft_model_path, hardware, env = (
        args.model_path,
        args.draft_model_path,
        args.hardware,
        None,
    )
    if args.preset or args.preset_file:  # the launcher's plan of the same flags
        launch = plan.build(launch_flags.request(args, server_args))
        for note in launch.notes:
            print(f"{PROG}: {note}", file=sys.stderr)
        release, server_args = launch.release, list(launch.argv)
        model_path, draft_model_path = launch.model_path, launch.draft_model_path
        hardware = hardware or launch.preset.hardware or None
        env = {**os.environ, **launch.env}
    else:
        for flag, given in (
            ("--overlay", args.overlay),
            ("--adaptive-config", args.adaptive_config),
        ):
            if given:
                raise UserError(
                    f"{flag}: applies to a preset, and none is given.",
                    fix="add --preset NAME or --preset-file PATH (the launch's own)",
                )
        release, _how = releases.resolve(args.sglang_version, force=args.force)
        # SGLang's --config read as the launcher reads it; secrets learned (masked), dropped
        server_args = secret_flags.take(server_config.expand(server_args))[0]
        if args.cpu:  # what `launch --cpu` adds (launch/overlays/cpu.toml)
            cpu = plan.apply_overlay(presets.load(name="baseline"), "cpu")
            env = {**os.environ, **cpu.env}
            if not ServerArgv(server_args).value("device"):
                server_args += ["--device", "cpu"]
    if args.target_host:
        env = {**(os.environ if env is None else env), hosts.ENV: args.target_host}
    if args.min_context < 1:
        raise UserError(
            f"--min-context {args.min_context}: must be 1 or more tokens",
            fix="pass the context each running request must get, e.g. --min-context 1024",
        )
    report = run(
        model_path,
        draft_model_path,
        release,
        server_args,
        fix=args.fix,
        skip=args.skip,
        hardware=hardware,
        host_checks=not args.no_host,
        overlay_root=args.overlay_dir,
        ask=not args.rules_only,
        sglang_python=args.sglang_python,
        env=env,
        min_context=args.min_context,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.render(notes=not args.quiet))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
