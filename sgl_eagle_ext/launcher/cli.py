"""python -m sgl_eagle_ext.launch: start SGLang from a preset, safely.

    python -m sgl_eagle_ext.launch --preset eagle3-2step --model-path M --draft-model-path D
    python -m sgl_eagle_ext.launch --preset eagle3-2step ... --dry-run
    python -m sgl_eagle_ext.launch --demo             # CPU, tiny model pair, a few prompts
    python -m sgl_eagle_ext.launch --preset baseline ... -- --port 30001   # extra SGLang args

Exit codes: 0 ok; 1 the server failed; 2 bad input; 3 watchdog (startup stalled
or too slow); 128+N stopped by signal N (130 for Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path

from sgl_eagle_ext.common import (
    http,
    interrupts,
    paths,
    releases,
    render,
    safe_files,
    secret_flags,
)
from sgl_eagle_ext.common.cli_args import seconds, show_seconds, split_extra
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.redaction import REDACTED, is_secret_name
from sgl_eagle_ext.common.server_process import run_supervised, serve_until_exit
from sgl_eagle_ext.common.table import L, Table
from sgl_eagle_ext.launcher import (
    launch_flags,
    nccl,
    plan,
    presets,
    readiness,
    running,
)

PROG = "sgl_eagle_ext.launch"
SPEC_CHECK_PROMPT = "The quick brown fox"
LOW_ACCEPT = 1.2  # below this the draft is barely contributing
# Releases whose CUDA graphs capture the default aux layers (patches/: cuda-graph-aux-layers).
GRAPH_BUG_RELEASES = ", ".join(r.version for r in releases.RELEASES if r.graph_resets_aux_layers)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Start an SGLang server from a preset, with preflight, readiness and watchdog. "
        "Arguments after `--` go to SGLang untouched and override the preset.",
    )
    launch_flags.add_preset(p)
    p.add_argument("--list-presets", action="store_true", help="list shipped presets and exit")
    p.add_argument("--model-path", help="target model directory (or Hugging Face id)")
    p.add_argument("--draft-model-path", help="EAGLE-3 draft model directory (speculative presets)")
    p.add_argument(
        "--sglang-version", help="translate flags for this release (default: the installed one)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="accept an unsupported SGLang release or flags SM120 rejects",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the environment block and the exact command, start nothing",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="apply the CPU harness overlay (launch/overlays/cpu.toml)",
    )
    launch_flags.add_overlay(p)
    p.add_argument(
        "--demo",
        action="store_true",
        help="CPU demo: build the tiny model pair, start the preset (default "
        "eagle3-2step) on CPU, answer a few prompts, stop",
    )
    p.add_argument(
        "--demo-draft",
        default="mostly",
        choices=("mostly", "partial", "never"),
        help="which tiny draft the demo uses (default: mostly)",
    )
    p.add_argument(
        "--models-dir",
        default=os.environ.get("EAGLE_EXT_MODELS_DIR"),
        help="where the tiny model pair is built (default ~/.cache/sgl-eagle-ext/tiny-models)",
    )
    p.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the preflight checks (python -m sgl_eagle_ext.preflight)",
    )
    p.add_argument(
        "--fix",
        action="store_true",
        help="preflight: launch on a draft overlay whose config.json fixes the "
        "context-length mismatch (the original directory is never modified)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="ID",
        help="preflight: waive a finding (or a group, e.g. host) knowingly",
    )
    p.add_argument(
        "--api-key-file",
        help=f"file holding the server's API key (or set ${API_KEY_ENV}); keeps it off "
        "every command line, unlike `-- --api-key K`",
    )
    launch_flags.add_adaptive_config(p)
    p.add_argument("--log-file", help="server log file (default logs/<preset>-<time>.log)")
    p.add_argument(
        "--stall-timeout",
        type=seconds(0),
        default=900.0,
        help="watchdog: stop the server if its log shows no progress for this many "
        "seconds before it is ready, after HTTP is up too: the server's log lines for "
        "the launcher's own /health_generate polls do not count (default 900; 0 "
        "disables)",
    )
    p.add_argument(
        "--startup-timeout",
        type=seconds(0),
        default=None,
        help="watchdog: stop the server if not ready after this many seconds (0: no "
        f"limit; default {readiness.WEIGHTS_S:.0f} for weights + {readiness.JIT_S:.0f} "
        f"for JIT + {readiness.CAPTURE_PER_STATE_S:.0f} per speculative runtime state "
        "the launch builds: 3000 for a fixed preset)",
    )
    p.add_argument(
        "--nccl-debug",
        action="store_true",
        help="NCCL's own INIT/ENV logging to per-process files next to the server "
        "log, summarised after startup",
    )
    p.add_argument(
        "--no-spec-check",
        action="store_true",
        help="skip the accept-length check generation after readiness",
    )
    p.add_argument(
        "--quiet", action="store_true", help="do not echo the server log to the terminal"
    )
    return p


def checked_log_path(args, preset_name: str) -> Path:
    """The server log path, refused now (exit 2) if it cannot be written: a log that
    fails later would leave nothing to read and, undrained, block the server."""
    flag = "--log-file" if args.log_file else "the default log file"
    default = f"logs/{preset_name}-{datetime.now():%Y%m%d-%H%M%S}.log"
    path = paths.check_writable_file(flag, args.log_file or default)
    if args.nccl_debug:
        debug_dir = path.with_suffix(".nccl")
        if debug_dir.exists() and not debug_dir.is_dir():
            raise UserError(
                f"--nccl-debug: {debug_dir} (next to the log) exists and is not a folder.",
                fix="move it away or pass another --log-file",
            )
    return path


def request_from_args(args, extra: list[str]) -> plan.LaunchRequest:
    """The launcher's own arguments as a launch request (the demo's pair built here)."""
    model_path, draft_model_path = args.model_path, args.draft_model_path
    if args.demo:
        from sgl_eagle_ext.cpu import tiny_models

        # bad input is refused before the (slow, first time) model build
        presets.load(name=args.preset or "eagle3-2step", path=args.preset_file)
        releases.resolve(args.sglang_version, force=args.force)

        models_dir = Path(args.models_dir or tiny_models.DEFAULT_DIR).expanduser()
        safe_files.check_folder("--models-dir", models_dir)
        built = tiny_models.build(paths.make_folder("--models-dir", models_dir))
        if not (model_path or draft_model_path):  # the pair the manifest describes
            args.demo_manifest = Path(built["target"]).parent / "manifest.json"
            # the drafts' low rope theta is part of their design (tiny_models)
            args.skip = [*args.skip, "rope.theta-differs"]
        model_path = model_path or str(built["target"])
        draft_model_path = draft_model_path or str(built[f"draft-{args.demo_draft}"])
    env = {}
    if args.demo:
        from sgl_eagle_ext.launcher import demo

        env = demo.server_env()  # the demo shows the profile of its own run
        extra = demo.server_extra(extra)
    return launch_flags.request(  # the preflight's command line maps them the same way
        args,
        extra,
        preset=args.preset or (None if args.preset_file or not args.demo else "eagle3-2step"),
        model_path=model_path,
        draft_model_path=draft_model_path,
        cpu=args.cpu or args.demo,
        env=env,
    )


def _hidden(launch: plan.LaunchPlan) -> int | None:
    """The target's hidden size from its config.json (None: not a readable local dir)."""
    try:
        cfg = json.loads((Path(launch.argv.model_path or "") / "config.json").read_text())
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        return int(text["hidden_size"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def print_dry_run(launch: plan.LaunchPlan, env: dict[str, str]) -> int:
    """Runnable as printed (`launch --dry-run | sh`): every value it did not write goes
    through the one renderer (common/render.py), so none can end a `#` comment or the
    command's line and start a line of its own. Exit 2 where SGLang itself refuses the
    arguments (the launch would stop there)."""
    preset, release = launch.preset, launch.release
    print(render.line(f"# preset: {preset.name} ({' -> '.join(map(str, preset.chain))})"))
    print(f"# sglang: {release.version} ({launch.how}); EAGLE worker {release.spec_worker}")
    from sgl_eagle_ext.launcher.preflight import memory_plan, settings_view

    answer, res, why = settings_view.view(release, list(launch.argv), {**os.environ, **env})
    for line in settings_view.lines_for(res, why):
        print(render.line(line))
    for line in memory_plan.lines(answer, release, list(launch.argv), why, env=env):
        print(render.line(line))
    for k, v in env.items():
        shown = REDACTED if is_secret_name(k) else v
        print(f"{render.line(k)}={render.shell_word(shown)}")
    print(render.command(launch.command()))
    if res is not None and res.error:
        print(f"{PROG}: error: {render.line(res.lines()[0])}", file=sys.stderr)
        return 2
    return 0


def spec_check(base_url: str, api_key: str | None, tls=None) -> None:
    """One greedy generation; report SGLang's accept length for it. Advisory: a
    failed check warns and never stops a server that is ready."""
    try:
        out = http.generate(base_url, [SPEC_CHECK_PROMPT], 32, api_key=api_key, tls=tls)[0]
    except http.HTTPFailed as e:
        print(f"{PROG}: warning: spec check skipped: {e}", file=sys.stderr, flush=True)
        return
    acc = http.accept_length(out.get("meta_info", {}))
    if acc is None:
        print(f"{PROG}: spec check: SGLang reported no accept length", flush=True)
    elif acc < LOW_ACCEPT:
        print(
            f"{PROG}: warning: spec check: accept length {acc:.2f}: the draft is barely "
            f"accepted (wrong aux hidden-state layers, a draft for another target, or the "
            f"CUDA-graph capture-layer bug of SGLang {GRAPH_BUG_RELEASES}; run the preflight)",
            flush=True,
        )
    else:
        print(f"{PROG}: spec check: accept length {acc:.2f}", flush=True)


def print_nccl(srv: running.RunningServer) -> None:
    """The rank x variable table of the NCCL settings each rank reported, and why."""
    ranks, expected, launch = srv.nccl, srv.expected_nccl, srv.launch
    if not ranks:
        print(f"{PROG}: warning: no rank reported its NCCL settings", file=sys.stderr)
        return
    text, warnings = srv.nccl_table()
    print(f"{PROG}: NCCL settings seen by each rank:\n{text}", flush=True)
    # why the '-' rows are there, and were all ranks heard
    for line in nccl.explain(launch.release, launch.argv, ranks, expected):
        print(f"{PROG}: NCCL: {line}", flush=True)
    want = nccl.expected_ranks(launch.argv)
    short = nccl.rank_count_warning(ranks, want)
    if short:
        warnings.append(short)
    for w in warnings:
        print(f"{PROG}: warning: NCCL: {w}", file=sys.stderr, flush=True)
    if not warnings:
        print(
            f"{PROG}: NCCL: all {len(ranks)} rank(s) match the preset "
            f"({len(ranks)} of {want} TP rank(s) reported)",
            flush=True,
        )


def print_nccl_debug(folder: Path) -> None:
    summary = nccl.debug_summary(folder)
    if not summary:
        print(
            f"{PROG}: --nccl-debug: NCCL wrote no log in {folder} (no NCCL communicator: "
            f"TP 1 or CPU)",
            flush=True,
        )
    for name, taken in summary.items():
        shown = " ".join(f"{k}={v}" for k, v in sorted(taken.items())) or "(none)"
        print(f"{PROG}: {name}: NCCL took from the environment: {shown}", flush=True)


def _limit(seconds: float) -> str:
    return show_seconds(seconds) if seconds else "off"


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    # SIGTERM, SIGHUP, SIGQUIT before the server starts (preflight's probes): as Ctrl-C,
    # each probe's group stopped; once it runs, run_supervised handles every one
    with interrupts.sigterm_as_sigint():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = parser().parse_args(ours)
    if args.list_presets:
        listing = Table(L("preset", 16), L("description"), L("file", sep="  "))
        rows = [
            (name, presets.load(name=name).description, f"({file})")
            for name, file in sorted(presets.shipped().items())
        ]
        print("\n".join(listing.render(rows, header=False)))
        return 0

    launch = plan.build(request_from_args(args, extra))
    for note in launch.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    preset, release, how = launch.preset, launch.release, launch.how
    # every secret flag travels in the environment, never on a command line:
    # `-- --flag V` first, then --api-key-file, then the EAGLE_EXT_* variables
    env, secrets = running.server_env(
        launch, secret_flags.gather([], args.api_key_file, os.environ)[1]
    )
    for w in nccl.override_warnings(release, launch.argv, env, os.environ):
        print(f"{PROG}: {'' if w.startswith('note:') else 'warning: '}{w}", file=sys.stderr)
    refused, idle = nccl.pcie_allreduce(release, launch.argv, env)
    if refused:
        raise UserError(
            f"{refused}; nothing was started.",
            fix="drop --overlay pcie-allreduce (or its variable), or use a release that has it",
        )
    for w in idle:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    for w in nccl.pcie_bound_lines(release, launch.argv, env, _hidden(launch))[1]:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    if args.dry_run:
        return print_dry_run(launch, env)

    log_path = checked_log_path(args, preset.name)
    debug_dir = log_path.with_suffix(".nccl")
    debug_env = {}
    if args.nccl_debug:
        try:
            debug_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(
                f"--nccl-debug: cannot create {debug_dir}: {e.strerror or e}.",
                fix="pass a --log-file in a folder you may write to",
            ) from None
        debug_env = nccl.debug_env(debug_dir.resolve())
    startup_timeout = args.startup_timeout
    if startup_timeout is None:
        startup_timeout = running.default_startup_timeout(launch)
    # the model folders, the port, preflight, the process built: as every in-process start
    starting = running.prepare(
        launch,
        running.StartOptions(
            log_path=log_path,
            preflight=not args.no_preflight,
            fix=args.fix,
            skip=tuple(args.skip),
            secrets=secrets,
            echo=not (args.quiet or args.demo),  # the demo prints the log's path instead
            stall_timeout=args.stall_timeout,
            startup_timeout=startup_timeout,
            prog=PROG,
            extra_env=debug_env,
        ),
    )
    launch = starting.launch  # the preflight's retargeting applied
    print(
        f"{PROG}: preset {preset.name}, SGLang {release.version} ({how}); log {log_path}",
        flush=True,
    )
    print(
        f"{PROG}: watchdog: stall {_limit(args.stall_timeout)}, startup {_limit(startup_timeout)}",
        flush=True,
    )

    def start_and_serve() -> int:
        srv = starting.begin().wait(tail=False)  # run_supervised prints the tail
        print_nccl(srv)
        if args.nccl_debug:
            print_nccl_debug(debug_dir)
        print(
            f"{PROG}: READY in {srv.startup_s:.1f} s: {srv.url} (preset {preset.name}, "
            f"SGLang {release.version}, pid {srv.pid}, log {log_path})",
            flush=True,
        )
        if args.demo:
            from sgl_eagle_ext.launcher import demo

            manifest = getattr(args, "demo_manifest", None)
            expected = manifest and demo.expected_accept(manifest, args.demo_draft, launch.argv)
            demo.run(srv.url, srv.api_key, log_path, args.demo_draft, expected)
            return 0
        from sgl_eagle_ext.launcher.preflight.scaleout import is_worker_node

        if is_worker_node(launch.argv):  # multi-node: its port answers health checks only
            print(
                f"{PROG}: node rank {launch.flag('node-rank')} runs tensor-"
                f"parallel ranks only; send requests to node 0",
                flush=True,
            )
        elif preset.speculative and not args.no_spec_check:
            spec_check(srv.url, srv.api_key, srv.tls)
        return serve_until_exit(srv.server, PROG, "server")

    # Leaving run_supervised stops the whole tree, however it is left.
    return run_supervised(starting.server, PROG, "server", start_and_serve)


if __name__ == "__main__":
    sys.exit(main())
