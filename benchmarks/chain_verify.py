"""Chain verifies on SGLang's split-KV / decode kernels against its extend kernel, in one run.

    .venv/bin/python benchmarks/chain_verify.py [--rounds 2] [--max-tokens 32] [--levels 1,4]
        [--context K]

On the CPU harness (real SGLang 0.5.23, tiny pair), each arm is a server started in this
process as the launcher starts one (`--cpu`, EAGLE3_PROFILE=1), interleaved over rounds:

  baseline                   no speculation: a plain decode
  eagle3-3step   on          the 3-step chain, mostly-accepted draft, chain verify on (its
                             verify and draft-extend on the grouped-head split-KV kernel)
  eagle3-3step   extend      the same, EAGLE_EXT_CHAIN_VERIFY=0 (SGLang's own dispatch)
  eagle3-adaptive/zero on    the never draft pinned at 0 steps: every cycle a one-token
                             verify and draft-extend, each on SGLang's decode path
  eagle3-adaptive/zero extend  the same on the extend kernel

What differs between the arms: speculation, and EAGLE_EXT_CHAIN_VERIFY (named in each
arm). Every arm decodes the demo prompts greedily (with `--context K`, each after the
same K paragraphs of the tiny corpus: a longer prefix for every verify to attend over; the
mean prompt length SGLang counted is printed) at each level (one stream: one after
another; more: that many at a time); the outputs must equal the baseline's (printed).
Per arm and level: output tok/s (client wall clock), the scheduler's CPU ms per generated
token (its CPU seconds over SGLang's generation-token counter), and from the profile the
verify forward, draft-extend and cycle ms of each (batch size, steps) cell. Figures, not
assertions; a shared machine's load moves the wall-clock ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from adaptive_vs_fixed import (  # noqa: E402
    PROFILE_ENV,
    ZERO,
    arm_env,
    cpu_ms_per_token,
    draft_dir,
    generated_tokens,
    scheduler_cpu_s,
)

from sgl_eagle_ext.common import figures, http, ports  # noqa: E402
from sgl_eagle_ext.cpu import tiny_models  # noqa: E402
from sgl_eagle_ext.launcher import plan as launch_plan  # noqa: E402
from sgl_eagle_ext.launcher import running  # noqa: E402
from sgl_eagle_ext.profiling.aggregate import Profile  # noqa: E402

# (name, preset, draft, EAGLE_EXT_CHAIN_VERIFY: None = the preset's)
ARMS = (
    ("baseline", "baseline", None, None),
    ("3step on", "eagle3-3step", "mostly", None),
    ("3step extend", "eagle3-3step", "mostly", "0"),
    ("0-step on", "eagle3-adaptive", ZERO, None),
    ("0-step extend", "eagle3-adaptive", ZERO, "0"),
)


def start(preset, draft, switch, models: Path, out: Path, tag: str) -> running.RunningServer:
    env = {**PROFILE_ENV, **arm_env(draft, out)}
    if switch is not None:
        env["EAGLE_EXT_CHAIN_VERIFY"] = switch
    request = launch_plan.LaunchRequest(
        preset=preset,
        cpu=True,
        model_path=str(models / "target"),
        draft_model_path=str(models / f"draft-{draft_dir(draft)}") if draft else None,
        extra=("--port", str(ports.pick())),
        env=env,
    )
    log = out / f"{tag}.log"
    return running.start_or_exit(launch_plan.build(request), log, tag)


def decode(server, prompts, level: int, max_tokens: int) -> tuple[list, float, float | None, float]:
    """(outputs, tok/s, scheduler CPU ms per generated token, mean prompt tokens) at `level`
    streams."""
    cpu0, gen0 = scheduler_cpu_s(server.pid), generated_tokens(server.url)
    t0, outs = time.monotonic(), []
    for i in range(0, len(prompts), level):
        outs += http.generate(server.url, prompts[i : i + level], max_tokens)
    wall = time.monotonic() - t0
    cpu1, gen1 = scheduler_cpu_s(server.pid), generated_tokens(server.url)
    tokens = sum(len(o["output_ids"]) for o in outs)
    cpu = cpu_ms_per_token(cpu1 - cpu0, gen1 - gen0) if gen0 is not None and gen1 else None
    prompt = [o.get("meta_info", {}).get("prompt_tokens", 0) for o in outs]
    return (
        [o["output_ids"] for o in outs],
        figures.tok_s(tokens, 1000 * wall),
        cpu,
        sum(prompt) / len(prompt),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--levels", default="1,4")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument(
        "--context",
        type=int,
        default=0,
        metavar="K",
        help="put K paragraphs of the tiny corpus before every prompt (a longer prefix)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench-results" / "chain_verify")
    p.add_argument(
        "--arms",
        default=",".join(name for name, *_ in ARMS),
        help="a subset of the arms, by name (outputs are compared with the first one run)",
    )
    args = p.parse_args()
    wanted = args.arms.split(",")
    unknown = sorted(set(wanted) - {name for name, *_ in ARMS})
    if unknown:
        p.error(f"--arms: unknown {', '.join(unknown)} (arms: {', '.join(n for n, *_ in ARMS)})")
    arms = [arm for arm in ARMS if arm[0] in wanted]
    stamp = time.strftime("%Y%m%d-%H%M%S")  # each run's own server logs
    built = tiny_models.build(Path(tiny_models.DEFAULT_DIR).expanduser())
    models = Path(built["target"]).parent
    context = "".join(p + "\n\n" for p in tiny_models.CORPUS[: args.context])
    prompts = [context + p for p in tiny_models.DEMO_PROMPTS]
    levels = [int(x) for x in args.levels.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[int, list]] = {}
    outputs: dict[str, dict[int, list]] = {}
    logs: dict[str, list[Path]] = {}
    for r in range(args.rounds):
        for name, preset, draft, switch in arms:
            tag = f"{name.replace(' ', '-')}-r{r + 1}-{stamp}"
            with start(preset, draft, switch, models, args.out, tag) as server:
                for level in levels:
                    outs, tps, cpu, prompt = decode(server, prompts, level, args.max_tokens)
                    rows.setdefault(name, {}).setdefault(level, []).append((tps, cpu))
                    outputs.setdefault(name, {})[level] = outs
                    print(f"round {r + 1} {name:16} c={level}: {tps:6.2f} tok/s, "
                          f"{cpu or 0:6.1f} CPU ms/token, prompts {prompt:.0f} tokens",
                          flush=True)  # fmt: skip
            logs.setdefault(name, []).append(server.log_path)
    print("\n== tok/s (client wall) and scheduler CPU ms per generated token, mean of rounds")
    for name, by_level in rows.items():
        cells = []
        for level in levels:
            tps = [t for t, _ in by_level[level]]
            cpu = [c for _, c in by_level[level] if c]
            cells.append(
                f"c={level}: {sum(tps) / len(tps):6.2f} tok/s "
                f"{sum(cpu) / len(cpu) if cpu else float('nan'):6.1f} ms CPU/token"
            )
        print(f"{name:16} " + "   ".join(cells))
    ref = arms[0][0]
    print(f"\n== greedy outputs equal to {ref}'s (every prompt, every level)")
    for name in rows:
        same = all(outputs[name][lv] == outputs[ref][lv] for lv in levels)
        print(f"{name:16} {'identical' if same else 'DIFFERENT'}")
    print("\n== profile cells (ms, mean per cycle): bs, steps: cycle, verify forward, draft-extend")
    for name in rows:
        if name == "baseline":
            continue  # no speculation cycles
        for (bs, steps), cell in sorted(Profile.read_all(logs[name]).cells().items()):
            print(
                f"{name:16} bs {bs} steps {steps}: cycle {cell.mean('cycle'):7.1f}  "
                f"verify_fwd {cell.mean('verify_fwd'):7.1f}  "
                f"draft_extend {cell.mean('draft_extend'):6.1f}  ({cell.cycles} cycles)"
            )
    record = args.out / f"chain-verify-{time.strftime('%Y%m%d-%H%M%S')}.json"
    record.write_text(
        json.dumps(
            {"rows": rows, "levels": levels, "arms": ARMS, "context": args.context}, indent=1
        )
    )
    print(f"\nrecord: {record}; server logs: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(running.script_main(main))
