"""Adaptive speculation against the baseline and the best fixed EAGLE-3 preset, side by side.

    .venv/bin/python benchmarks/adaptive_vs_fixed.py [--levels 1,2,4] [--rounds 2] [--fixed eagle3-3step]
        [--arms baseline,adaptive-never] [--allow-unequal] [-- SGLANG ARGS FOR EVERY ARM]

On the CPU harness (real SGLang 0.5.23, tiny model pair), in one run, each arm is a
server started in this process from its launch plan as the launcher starts one
(launcher/running.py: preflight, readiness; `--cpu`, EAGLE3_PROFILE=1) and swept with
`bench sweep` (same prompts, seed and lengths for every arm):

  baseline                       no speculation
  eagle3-2step/3step/5step       fixed presets, mostly-accepted draft (best at concurrency 1
                                 is "the best fixed EAGLE preset")
  eagle3-adaptive  never draft   the shipped table; must not fall below the baseline
  eagle3-adaptive  zero          the never draft pinned at 0 steps (the schedule controller):
                                 every cycle is a 0-step verify, nothing drafted
  eagle3-adaptive  mostly draft  must keep the fixed presets' gain at one stream

Prints tok/s per arm and level and the two ratios the project holds adaptive to:
adaptive(never) / baseline at every level (goal >= 0.95) and adaptive(mostly) / best
fixed at concurrency 1 (goal >= 0.95), plus how many cycles adaptive ran at each step
count (its profile windows) and SGLang's switch lines, and beside every tok/s the
scheduler's CPU time per generated token (its process's CPU seconds over SGLang's own
generation-token counter, warm-up included on both sides): a shared machine's load moves
wall-clock speed, much less CPU time. Figures, not assertions; --repeat runs each sweep
more than once. Before any
server starts, the arms' resolved settings must differ only in speculation
(launcher/fairness.py): else it stops (exit 2) unless --allow-unequal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from sgl_eagle_ext.common import figures, http, ports, schedule_file  # noqa: E402
from sgl_eagle_ext.common.errors import UserError  # noqa: E402
from sgl_eagle_ext.launcher import fairness, running  # noqa: E402
from sgl_eagle_ext.launcher import plan as launch_plan  # noqa: E402
from sgl_eagle_ext.profiling import adaptive_log, names  # noqa: E402
from sgl_eagle_ext.profiling.aggregate import Profile  # noqa: E402
from sgl_eagle_ext.tools.bench.probe import parse_prometheus  # noqa: E402

# every arm's server profiles itself: its windows give adaptive's cycles per step count
PROFILE_ENV = {names.ENV: "1", names.ENV_INTERVAL_S: "2"}
FIXED = ("eagle3-2step", "eagle3-3step", "eagle3-5step")


GENERATED = "sglang:generation_tokens_total"
ZERO = "zero"  # the adaptive arm pinned at 0 steps: the never draft, never drafting


def arm_env(draft: str | None, out: Path) -> dict:
    """The zero arm's schedule file: every bucket pinned at 0 steps from the first verify."""
    if draft != ZERO:
        return {}
    request = out / "pin-0.json"
    schedule_file.write_request(request, 1, pin=0)
    return {"EAGLE_EXT_SCHEDULE_FILE": str(request)}


def draft_dir(draft: str) -> str:
    return "never" if draft == ZERO else draft


def launch_request(preset: str, draft: str | None, models: Path, extra=(), env=None):
    return launch_plan.LaunchRequest(
        preset=preset,
        cpu=True,
        model_path=str(models / "target"),
        draft_model_path=str(models / f"draft-{draft_dir(draft)}") if draft else None,
        extra=tuple(extra),
        env=dict(env or {}),
    )


def check_arms(arms, models: Path, extra, allow_unequal: bool) -> dict:
    """Before any server starts: the arms' resolved settings differ only in speculation
    (launcher/fairness.py; exit 2 naming the setting and its flag, unless
    --allow-unequal, which records the differences with the figures)."""
    plans = {
        (p if d is None else f"{p}/{d}"): launch_plan.build(launch_request(p, d, models, extra))
        for p, d in arms
    }
    try:
        verdict = fairness.check(plans, allow_unequal)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    print("\n".join(verdict.lines()), flush=True)
    return verdict.record()


def start(
    preset: str,
    draft: str | None,
    models: Path,
    out: Path,
    round_no: int = 0,
    extra=(),
    stamp: str = "",
) -> running.RunningServer:
    """One arm's server, started in process from its plan (the launcher's checks,
    preflight and readiness; no spec check, its log to the file only). The log is this
    run's own (`stamp`): the cycle counts read from it are this run's, never an earlier
    run's appended to the same file."""
    log = out / f"{preset}-{draft or 'none'}-r{round_no + 1}{'-' + stamp if stamp else ''}.log"
    port = ("--port", str(ports.pick()))
    env = {**PROFILE_ENV, **arm_env(draft, out)}
    launch = launch_plan.build(launch_request(preset, draft, models, (*port, *extra), env))
    return running.start_or_exit(launch, log, f"{preset} ({draft})")


def scheduler_cpu_s(server_pid: int) -> float:
    """CPU seconds of the server's scheduler processes so far (every TP rank)."""
    total = 0.0
    for proc in psutil.Process(server_pid).children(recursive=True):
        try:
            if "sglang::scheduler" in " ".join(proc.cmdline()) or "scheduler" in proc.name():
                t = proc.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def cpu_ms_per_token(cpu_s: float, tokens: float) -> float | None:
    """Scheduler CPU milliseconds per generated token (figures: the inverse of tok/s)."""
    return figures.ms_per_token(figures.tok_s(tokens, 1000 * cpu_s))


def generated_tokens(url: str) -> float | None:
    reply = http.request(f"{url}/metrics", timeout=10)
    return parse_prometheus(reply.text, {GENERATED}).get(GENERATED) if reply.status == 200 else None


def sweep_levels(server, label, results, levels, **kw) -> tuple[dict[int, float], dict[int, float]]:
    """One sweep per level; (tok/s, scheduler CPU ms per generated token) per level."""
    tps, cpu = {}, {}
    for level in levels.split(","):
        cpu0, gen0 = scheduler_cpu_s(server.pid), generated_tokens(server.url)
        tps.update(sweep(server.url, label, results, level, **kw))
        cpu1, gen1 = scheduler_cpu_s(server.pid), generated_tokens(server.url)
        if gen0 is not None and gen1 is not None and gen1 > gen0:
            cpu[int(level)] = cpu_ms_per_token(cpu1 - cpu0, gen1 - gen0)
    return tps, cpu


def sweep(
    url: str, label: str, results: Path, levels: str, *, max_tokens: int, prompts_per_level: int
) -> dict[int, float]:
    cmd = [sys.executable, "-m", "sgl_eagle_ext.bench", "sweep", "--url", url]
    cmd += ["--concurrency", levels, "--max-tokens", str(max_tokens)]
    cmd += ["--prompts-per-concurrency", str(prompts_per_level), "--warmup", "1"]
    cmd += ["--seed", "7", "--label", label, "--results", str(results), "--quiet"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    tps: dict[int, list[float]] = {}
    for line in results.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("arm") == label and rec.get("output_tok_s"):
            tps.setdefault(int(rec["concurrency"]), []).append(rec["output_tok_s"])
    return {c: sum(v) / len(v) for c, v in tps.items()}


def steps_mix(log: Path) -> Counter:
    cycles = Counter()
    for (_, steps), cell in Profile.read(log).cells().items():  # the one aggregator
        cycles[steps] += cell.cycles
    return cycles


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--levels", default="1,2,4", help="concurrency levels (CPU harness: <= 8)")
    p.add_argument(
        "--fixed-levels", default="1", help="levels for the fixed presets (the goal is at 1)"
    )
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--prompts-per-level", type=int, default=2, help="prompts x concurrency")
    p.add_argument("--repeat", type=int, default=1, help="sweeps per arm (averaged)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the whole arm list this many times, interleaved (averages out the drift "
        "of a shared machine's load between arms)",
    )
    p.add_argument("--fixed", default=",".join(FIXED), help="fixed presets to run (mostly draft)")
    p.add_argument("--out", type=Path, default=ROOT / "bench-results" / "adaptive_vs_fixed")
    p.add_argument("--models-dir", type=Path, default=None)
    p.add_argument(
        "--arms",
        default="baseline,fixed,adaptive-never,adaptive-mostly",
        help="which arms to run (a subset of the default list)",
    )
    p.add_argument(
        "--allow-unequal",
        action="store_true",
        help="run arms whose resolved settings differ outside speculation (recorded)",
    )
    own, extra = (
        (sys.argv[1 : sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1 :])
        if "--" in sys.argv
        else (sys.argv[1:], [])
    )
    args = p.parse_args(own)  # after `--`: SGLang arguments for every arm
    from sgl_eagle_ext.cpu import tiny_models

    # build() returns where this BUILD_VERSION's files are (a vN subfolder).
    built = tiny_models.build(Path(args.models_dir or tiny_models.DEFAULT_DIR).expanduser())
    models = Path(built["target"]).parent
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = args.out / f"results-{stamp}.jsonl"
    wanted = set(args.arms.split(","))
    fixed = [f for f in args.fixed.split(",") if f] if "fixed" in wanted else []
    arms = [("baseline", None)] + [(f, "mostly") for f in fixed]
    arms += [("eagle3-adaptive", d) for d in ("never", ZERO, "mostly") if f"adaptive-{d}" in wanted]
    settings = check_arms(arms, models, extra, args.allow_unequal)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "arm-settings.json").write_text(json.dumps(settings, indent=1))
    runs_of: dict[str, list[dict[int, float]]] = {}
    cpu_of: dict[str, list[dict[int, float]]] = {}
    logs: dict[str, list[Path]] = {}
    t0 = time.monotonic()
    for round_no in range(args.rounds):
        for preset, draft in arms:
            name = preset if draft is None else f"{preset}/{draft}"
            with start(preset, draft, models, args.out, round_no, extra, stamp) as server:
                levels = args.fixed_levels if preset in fixed else args.levels
                for _ in range(args.repeat):
                    tps, cpu = sweep_levels(
                        server,
                        name,
                        results,
                        levels,
                        max_tokens=args.max_tokens,
                        prompts_per_level=args.prompts_per_level,
                    )
                    runs_of.setdefault(name, []).append(tps)
                    cpu_of.setdefault(name, []).append(cpu)
            logs.setdefault(name, []).append(server.log_path)
            last = runs_of[name][-1]
            print(
                f"round {round_no + 1} {name:26} "
                + "  ".join(f"c={c}: {v:6.2f}" for c, v in sorted(last.items())),
                flush=True,
            )
    table = {
        name: {c: sum(r[c] for r in rs) / len(rs) for c in rs[0]} for name, rs in runs_of.items()
    }
    cpu_table = {
        name: {c: sum(r[c] for r in rs) / len(rs) for c in rs[0] if all(c in r for r in rs)}
        for name, rs in cpu_of.items()
    }

    levels = sorted(table["baseline"])
    print(f"\n== output tok/s per arm and concurrency ({time.monotonic() - t0:.0f} s, CPU harness)")
    print(f"{'arm':26}" + "".join(f"{'c=' + str(c):>10}" for c in levels))
    for name, row in table.items():
        print(
            f"{name:26}" + "".join(f"{row[c]:10.2f}" if c in row else f"{'-':>10}" for c in levels)
        )
    print("\n== scheduler CPU ms per generated token (SGLang's counter; warm-up included)")
    for name, row in cpu_table.items():
        print(
            f"{name:26}" + "".join(f"{row[c]:10.1f}" if c in row else f"{'-':>10}" for c in levels)
        )
    print("\n== ratios")
    if not settings["fair"]:
        print(f"UNEQUAL ARMS (--allow-unequal): {json.dumps(settings['unequal'])}")
    for arm in ("eagle3-adaptive/never", f"eagle3-adaptive/{ZERO}"):
        for c in levels if arm in table else ():
            r = table[arm][c] / table["baseline"][c]
            cpu = cpu_table[arm].get(c, 0) / cpu_table["baseline"].get(c, float("nan"))
            print(
                f"{arm.split('/')[1]:>6} / baseline  c={c}: {r:5.2f}x tok/s (goal >= 0.95), "
                f"{cpu:5.2f}x CPU per token"
            )
    if fixed:
        best = max(fixed, key=lambda f: table[f"{f}/mostly"].get(1, 0))
        if "eagle3-adaptive/mostly" in table:
            r = table["eagle3-adaptive/mostly"][1] / table[f"{best}/mostly"][1]
            print(f"adaptive(mostly) / {best}(mostly)  c=1: {r:5.2f}x  (goal >= 0.95)")
        r = table[f"{best}/mostly"][1] / table["baseline"][1]
        print(f"{best}(mostly) / baseline  c=1: {r:5.2f}x")
    for name in [n for n in logs if n.startswith("eagle3-adaptive/")]:
        mix = sum((steps_mix(log) for log in logs[name]), Counter())
        total = sum(mix.values()) or 1
        sw = adaptive_log.AdaptiveLog([], [])
        for log in logs[name]:
            sw.switches += adaptive_log.read(log.read_text(errors="replace").splitlines()).switches
        print(
            f"\n{name}: decode cycles by draft steps "
            + ", ".join(f"{k}: {v} ({100 * v / total:.0f}%)" for k, v in sorted(mix.items()))
            + f"; {len(sw.switches)} switches"
        )
    print(f"\nrecords: {results}; server logs: {args.out}; arms' settings: arm-settings.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(running.script_main(main))
