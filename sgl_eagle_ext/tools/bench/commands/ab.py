"""bench ab: start two presets in turn through the launcher, sweep both, compare.

The whole A/B flow: plan both arms (bad input fails before any server starts),
then per arm start the launcher, warm up, sweep every level, generate the
lossless-check outputs and stop it; then the side-by-side table, crossover,
lossless verdict and recommendation.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import (
    arms,
    compare,
    lossless,
    options,
    prompts,
    provenance,
    records,
    session,
)
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.progress import Console


def add_launch(p) -> None:
    """Launcher options shared by every arm."""
    p.add_argument("--model-path", help="target model (passed to the launcher)")
    p.add_argument("--draft-model-path", help="EAGLE-3 draft (speculative presets only)")
    p.add_argument("--cpu", action="store_true", help="CPU harness overlay (launcher --cpu)")
    p.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="NAME",
        help="launcher --overlay for every arm (repeatable)",
    )
    p.add_argument("--sglang-version", help="launcher --sglang-version")
    p.add_argument("--force", action="store_true", help="launcher --force")
    p.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=3600.0,
        help="seconds to wait for each server's READY (default 3600)",
    )
    p.add_argument("--log-dir", default="logs", help="server logs (default logs/)")
    p.add_argument(
        "--lossless-prompts",
        type=int,
        default=lossless.DEFAULT_PROMPTS,
        help=f"prompts for the lossless check (default {lossless.DEFAULT_PROMPTS}; 0 skips it)",
    )
    p.add_argument("--lossless-max-tokens", type=int, default=lossless.DEFAULT_MAX_TOKENS)


def register(sub) -> None:
    a = sub.add_parser(
        "ab",
        help="start two presets in turn through the launcher, sweep both, "
        "compare; includes the lossless check",
        description="Arguments after `--` go to both servers (SGLang flags).",
    )
    options.add_common(a, 256, url=False)
    options.add_sweep(a)
    a.add_argument("--preset-a", default="baseline", help="reference preset (default baseline)")
    a.add_argument("--preset-b", required=True, help="preset to evaluate, e.g. eagle3-2step")
    add_launch(a)
    a.set_defaults(run=run, takes_extra=True)


def check_presets(a: str, b: str) -> None:
    if a == b:
        raise UserError(
            f"--preset-a and --preset-b are both '{a}'.",
            fix="compare two different presets, e.g. --preset-a baseline --preset-b eagle3-2step",
        )


async def _arm(
    server,
    args,
    console: Console,
    rec: records.Recorder,
    prov: dict,
    plan: arms.ArmPlan,
    ps: prompts.PromptSet,
    levels: list[int],
    slo: sw.SLO,
    derive_slo: bool,
    lossless_prompts: list,
):
    load = session.load(args)
    common = {
        "arm": plan.preset,
        "arm_label": plan.label,
        "url": server.base_url,
        **session.load_fields(load, args),
    }
    async with session.client(server, args) as client:
        await sw.warm_up(client, ps, args.warmup, load, console)
        outcome = await sw.run_sweep(
            server,
            client,
            ps,
            levels,
            num_prompts=args.num_prompts,
            per_concurrency=args.prompts_per_concurrency,
            load=load,
            console=console,
            write=lambda c, f: rec.write("sweep", {**common, "concurrency": c, **f}, prov),
            arm=f"{plan.label}: {plan.preset}",
            flush=not args.no_flush_cache,
            slo=slo,
            derive_slo=derive_slo,
        )
        outputs = []
        if lossless_prompts and not outcome.stopped:
            console.info(
                f"[{plan.label}] lossless-check generations: {len(lossless_prompts)} "
                f"prompt(s), temperature 0"
            )
            outputs, interrupted = await lossless.generate(
                client,
                lossless_prompts,
                args.lossless_max_tokens,
                console,
                f"{plan.label} lossless",
            )
            if interrupted:
                raise sw.Interrupted("during the lossless generations")
    return outcome, outputs


def run(args, extra: list[str], console: Console) -> int:
    check_presets(args.preset_a, args.preset_b)
    levels = options.levels(args.concurrency)
    ps = prompts.load(args.prompts)
    rec = session.recorder(args)
    log_dir = Path(args.log_dir)
    port = args.port or arms.free_port()
    plans = [
        arms.plan_arm(
            label,
            preset,
            cpu=args.cpu,
            model_path=args.model_path,
            draft_model_path=args.draft_model_path,
            sglang_version=args.sglang_version,
            force=args.force,
            port=port,
            log_file=log_dir / f"ab-{rec.run_id}-{label}-{preset}.log",
            extra=extra,
            overlays=args.overlay,
        )
        for label, preset in (("A", args.preset_a), ("B", args.preset_b))
    ]
    host = provenance.host_facts()
    slo = sw.SLO(args.slo_tpot_ms, args.slo_ttft_ms, "given")
    check_prompts = ps.take(args.lossless_prompts, args.seed) if args.lossless_prompts else []
    done: dict[str, tuple] = {}
    console.info(
        f"A/B run {rec.run_id}: A = {plans[0].preset}, B = {plans[1].preset}; levels "
        f"{','.join(map(str, levels))}; {args.max_tokens} tokens per request; prompts "
        f"{ps.name}"
    )
    for plan in plans:
        console.info(f"[{plan.label}] starting {plan.preset}: {shlex.join(plan.command)}")
        proc = arms.LauncherProcess(plan)
        try:
            try:
                url = proc.wait_ready(args.startup_timeout)
            except arms.ArmFailed as e:
                console.warn(str(e))
                return session.EXIT_FAILED
            server = session.connect(url, args)
            console.info(f"[{plan.label}] ready: {session.describe(server)}")
            prov = {
                "host": host,
                "server": provenance.server_facts(server, launch=plan.facts),
                "prompts": session.prompt_facts(ps, args.seed),
            }
            outcome, outputs = asyncio.run(
                _arm(
                    server,
                    args,
                    console,
                    rec,
                    prov,
                    plan,
                    ps,
                    levels,
                    slo,
                    derive_slo=plan.label == "A",
                    lossless_prompts=check_prompts,
                )
            )
        finally:
            code = proc.stop()
            console.info(
                f"[{plan.label}] {plan.preset} stopped "
                f"({'cleanly' if proc.stopped_cleanly else f'exit code {code}'})"
            )
        done[plan.label] = (plan, server, prov, outcome, outputs)
        if outcome.stopped:
            console.warn(
                f"[{plan.label}] {outcome.stopped}; the finished levels are recorded, "
                f"the A/B comparison is abandoned"
            )
            return session.EXIT_FAILED
    return _report(args, console, rec, done, levels, slo, check_prompts, host, ps)


def _report(args, console, rec, done, levels, slo, check_prompts, host, ps) -> int:
    (pa, sa, prov_a, oa, outs_a), (pb, sb, prov_b, ob, outs_b) = done["A"], done["B"]
    fa = {lv.concurrency: lv.fields for lv in oa.levels}
    fb = {lv.concurrency: lv.fields for lv in ob.levels}
    rows, cmp = compare.side_by_side(levels, fa, fb, pa.preset, pb.preset)
    per = cmp["levels"]
    thr = compare.crossover([p["concurrency"] for p in per], [p["throughput_ratio"] for p in per])
    good = compare.crossover([p["concurrency"] for p in per], [p["goodput_ratio"] for p in per])
    ll = lossless.compare(check_prompts, outs_a, outs_b) if check_prompts else None
    slo_text = slo.describe() if slo.set else ""
    advice = compare.recommend(
        pa.preset, pb.preset, thr, good, per, ll["verdict"] if ll else None, slo_text
    )
    out = console.out
    out("")
    out(f"=== A/B {rec.run_id}: {pa.preset} (A) vs {pb.preset} (B) ===")
    for line in rows:
        out(line)
    out(compare.crossover_line("throughput", thr, levels[-1]))
    if slo_text:
        out(compare.crossover_line(f"latency goodput ({slo_text})", good, levels[-1]))
    if ll:
        for line in lossless.verdict_lines(ll, pa.preset, pb.preset):
            out(line)
    else:
        out("lossless: skipped (--lossless-prompts 0)")
    out(f"recommendation: {advice}")
    prov = {
        "host": host,
        "prompts": session.prompt_facts(ps, args.seed),
        "server": {
            "url": f"{sa.base_url} | {sb.base_url}",
            "preset": f"{pa.preset} vs {pb.preset}",
            "sglang_version": sb.version,
            "model_path": prov_b["server"].get("model_path"),
            "draft_model_path": prov_b["server"].get("draft_model_path"),
        },
        "arms": {"A": prov_a["server"], "B": prov_b["server"]},
    }
    if ll:
        rec.write(
            "lossless",
            {
                "status": "ok",
                "arm": f"{pa.preset} vs {pb.preset}",
                "max_tokens": args.lossless_max_tokens,
                "temperature": 0.0,
                **ll,
            },
            prov,
        )
    rec.write(
        "ab",
        {
            "status": "ok",
            "arm": f"{pa.preset} vs {pb.preset}",
            "preset_a": pa.preset,
            "preset_b": pb.preset,
            "levels": per,
            "crossover_throughput": thr,
            "crossover_goodput": good,
            "slo": {"tpot_ms": slo.tpot_ms, "ttft_ms": slo.ttft_ms, "source": slo.source},
            "lossless": ll["verdict"] if ll else None,
            "verdict": thr["verdict"],
            "recommendation": advice,
            "max_tokens": args.max_tokens,
        },
        prov,
    )
    if rec.written:
        console.info(
            f"records appended to {rec.jsonl} (and {rec.csv}); plot with: python -m "
            f"{session.PROG} plot {rec.jsonl} --run-id {rec.run_id}"
        )
    return session.EXIT_FAILED if ll and ll["verdict"] == "DIFFERS" else 0
