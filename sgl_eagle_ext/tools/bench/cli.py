"""python -m sgl_eagle_ext.bench {single,sweep,ab,lossless,plot}

    bench single --url U --max-tokens 2048 --runs 5 --warmup 2
    bench sweep --url U --concurrency 1,2,5,10,30,70,100,250 --num-prompts 200
    bench ab --preset-a baseline --preset-b eagle3-2step --model-path M --draft-model-path D
    bench lossless --url-a U1 --url-b U2
    bench plot bench-results/results.jsonl

Exit codes: 0 ok; 1 the server failed (died, every run failed, an arm did not
start) or the lossless check found differences; 2 bad input; 130 Ctrl-C (what
was finished is written first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from pathlib import Path

from sgl_eagle_ext.common.cli_args import number, pop_flag, port_number, split_extra
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.redaction import redact_args
from sgl_eagle_ext.tools.bench import ab as ab_mod
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import (
    compare,
    limits,
    lossless,
    probe,
    prompts,
    provenance,
    records,
    single,
)
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.progress import Console

PROG = "sgl_eagle_ext.bench"
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def _levels(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(
            f"--concurrency {text}: not a comma-separated list of integers.",
            fix="e.g. --concurrency 1,2,5,10,30",
        ) from None
    if not values or values[0] < 1:
        raise UserError(
            f"--concurrency {text}: levels must be integers >= 1.",
            fix="e.g. --concurrency 1,2,5,10,30",
        )
    limits.check_concurrency(values[-1])
    return values


def _positive(name: str, value: float, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        raise UserError(
            f"{name} {value:g}: must be {'>= 0' if zero_ok else '> 0'}.",
            fix=f"pass a {'non-negative' if zero_ok else 'positive'} {name}",
        )


def _common(p: argparse.ArgumentParser, max_tokens: int, url: bool = True) -> None:
    if url:
        p.add_argument(
            "--url",
            default="http://127.0.0.1:30000",
            help="server base URL (default http://127.0.0.1:30000)",
        )
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"bearer key of the server (default ${API_KEY_ENV})",
    )
    p.add_argument(
        "--prompts",
        default=prompts.MIXED,
        help="coding, encyclopedic, mixed (default: both interleaved) or a JSONL "
        'file ({"prompt": ...} or {"messages": [...]} per line)',
    )
    p.add_argument("--seed", type=int, default=0, help="prompt order (and sampling) seed")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=max_tokens,
        help=f"tokens generated per request (default {max_tokens})",
    )
    p.add_argument("--temperature", type=number(0), default=0.0, help="sampling temperature (0)")
    p.add_argument(
        "--respect-eos",
        action="store_true",
        help="let the model stop at EOS (default: ignore EOS, fixed lengths)",
    )
    p.add_argument(
        "--request-timeout",
        type=number(0, strict=True),
        default=cl.DEFAULT_TIMEOUT,
        help="seconds before one request counts as timed out (default 600)",
    )
    p.add_argument(
        "--results",
        default=str(records.DEFAULT_RESULTS),
        help="JSONL file the records are appended to; the CSV goes next to it "
        "(default bench-results/results.jsonl)",
    )
    p.add_argument("--no-records", action="store_true", help="write no records")
    p.add_argument("--quiet", action="store_true", help="no progress bars or chatter")


def _sweep_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--concurrency",
        default=",".join(map(str, sw.DEFAULT_LEVELS)),
        help="levels, comma-separated (default 1,2,5,10,30,70,100,250)",
    )
    p.add_argument(
        "--num-prompts",
        type=int,
        default=0,
        help="prompts per level (at least --prompts-per-concurrency x level)",
    )
    p.add_argument(
        "--prompts-per-concurrency",
        type=int,
        default=sw.PER_CONCURRENCY,
        help=f"minimum prompts per level as a multiple of its concurrency "
        f"(default {sw.PER_CONCURRENCY}, SGLang's steady-state advice)",
    )
    p.add_argument("--warmup", type=int, default=2, help="warm-up requests before the sweep")
    p.add_argument(
        "--no-flush-cache", action="store_true", help="keep the prefix cache between levels"
    )
    p.add_argument(
        "--slo-tpot-ms", type=number(0, strict=True), help="goodput: TPOT goal per request (ms)"
    )
    p.add_argument(
        "--slo-ttft-ms", type=number(0, strict=True), help="goodput: TTFT goal per request (ms)"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description="Benchmarks that settle whether speculation pays."
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{single,sweep,ab,lossless,plot}")

    s = sub.add_parser("single", help="single-stream fixed-length runs with spread and 95%% CI")
    _common(s, 512)
    s.add_argument("--runs", type=int, default=5, help="measured runs (default 5)")
    s.add_argument("--warmup", type=int, default=2, help="warm-up runs, same length (default 2)")
    s.add_argument(
        "--vary-prompts",
        action="store_true",
        help="a different prompt per run (default: the same prompt every run)",
    )
    s.add_argument(
        "--max-cv",
        type=number(0),
        default=0.05,
        help="steady-state warning above this stdev/mean (default 0.05)",
    )
    s.add_argument("--label", default="", help="arm name stored in the records")
    s.add_argument("--run-id", help="group this record with others (default: a new id)")

    w = sub.add_parser(
        "sweep",
        help="streaming concurrency sweep: tok/s, TTFT/TPOT/ITL/E2E, "
        "errors, accept length per level",
    )
    _common(w, 256)
    _sweep_opts(w)
    w.add_argument("--label", default="", help="arm name stored in the records (for plot)")
    w.add_argument(
        "--run-id",
        help="share a run id with another sweep (e.g. the other server "
        "of a manual A/B) so `plot` draws both; default: a new id",
    )

    a = sub.add_parser(
        "ab",
        help="start two presets in turn through the launcher, sweep both, "
        "compare; includes the lossless check",
        description="Arguments after `--` go to both servers (SGLang flags).",
    )
    _common(a, 256, url=False)
    _sweep_opts(a)
    a.add_argument("--preset-a", default="baseline", help="reference preset (default baseline)")
    a.add_argument("--preset-b", required=True, help="preset to evaluate, e.g. eagle3-2step")
    a.add_argument("--model-path", help="target model (passed to the launcher)")
    a.add_argument("--draft-model-path", help="EAGLE-3 draft (speculative presets only)")
    a.add_argument("--cpu", action="store_true", help="CPU harness overlay (launcher --cpu)")
    a.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="NAME",
        help="launcher --overlay for both arms (repeatable)",
    )
    a.add_argument("--sglang-version", help="launcher --sglang-version")
    a.add_argument("--force", action="store_true", help="launcher --force")
    a.add_argument("--port", type=port_number, default=0, help="server port (default: a free one)")
    a.add_argument(
        "--startup-timeout",
        type=number(0, strict=True),
        default=3600.0,
        help="seconds to wait for each server's READY (default 3600)",
    )
    a.add_argument("--log-dir", default="logs", help="server logs (default logs/)")
    a.add_argument(
        "--lossless-prompts",
        type=int,
        default=lossless.DEFAULT_PROMPTS,
        help=f"prompts for the lossless check (default {lossless.DEFAULT_PROMPTS}; 0 skips it)",
    )
    a.add_argument("--lossless-max-tokens", type=int, default=lossless.DEFAULT_MAX_TOKENS)

    ll = sub.add_parser(
        "lossless", help="same prompts at temperature 0 on two servers must give identical outputs"
    )
    _common(ll, lossless.DEFAULT_MAX_TOKENS, url=False)
    ll.add_argument("--url-a", required=True, help="reference server (e.g. baseline)")
    ll.add_argument("--url-b", required=True, help="server under test (e.g. EAGLE-3)")
    ll.add_argument("--num-prompts", type=int, default=lossless.DEFAULT_PROMPTS)

    pl = sub.add_parser("plot", help="PNG of tok/s and p50/p99 latency against concurrency")
    pl.add_argument("results", help="JSONL file written by sweep or ab")
    pl.add_argument("-o", "--output", help="PNG path (default: next to the JSONL)")
    pl.add_argument("--run-id", help="plot this run (default: the latest run with sweep records)")
    return p


def _validate(args) -> None:
    if hasattr(args, "max_tokens"):
        _positive("--max-tokens", args.max_tokens)
        _positive("--request-timeout", args.request_timeout)
        _positive("--temperature", args.temperature, zero_ok=True)
    for name in ("runs", "num_prompts", "lossless_prompts"):
        if hasattr(args, name):
            _positive("--" + name.replace("_", "-"), getattr(args, name), zero_ok=name != "runs")
    if hasattr(args, "warmup"):
        _positive("--warmup", args.warmup, zero_ok=True)
    if hasattr(args, "prompts_per_concurrency"):
        _positive("--prompts-per-concurrency", args.prompts_per_concurrency, zero_ok=True)


def _recorder(args) -> records.Recorder:
    return records.Recorder(
        None if args.no_records else Path(args.results),
        getattr(args, "run_id", None),
        secrets=(args.api_key or "",),
    )


def _load(args) -> sw.Load:
    return sw.Load(args.max_tokens, args.temperature, not args.respect_eos, args.seed)


def _prompt_facts(ps: prompts.PromptSet, seed: int) -> dict:
    return {"set": ps.name, "sha256": ps.sha256, "count": len(ps.prompts), "seed": seed}


def _client(server: probe.Server, args) -> cl.Client:
    return cl.Client(
        server.base_url,
        api_key=args.api_key,
        model=server.model_id,
        timeout=args.request_timeout,
        spec_details_field=server.release.chat_spec_details_field,
    )


def _describe(server: probe.Server) -> str:
    spec = server.info.get("speculative_algorithm")
    how = (
        (
            f"{spec} steps {server.info.get('speculative_num_steps')}, topk "
            f"{server.info.get('speculative_eagle_topk')}, "
            f"{server.info.get('speculative_num_draft_tokens')} draft tokens"
        )
        if spec
        else "no speculation"
    )
    return f"{server.base_url} ({server.model_id}; SGLang {server.version or '?'}; {how})"


def _provenance(server: probe.Server, ps, seed) -> dict:
    """Where a record's figures come from: this host, the server, the prompt set."""
    return {
        "host": provenance.host_facts(),
        "server": provenance.server_facts(server),
        "prompts": _prompt_facts(ps, seed),
    }


def _load_fields(args, load: sw.Load) -> dict:
    return {
        "max_tokens": load.max_tokens,
        "temperature": load.temperature,
        "ignore_eos": load.ignore_eos,
        "seed": load.seed,
    }


# ---------------------------------------------------------------- single
async def _single(args, console: Console) -> int:
    ps = prompts.load(args.prompts)
    rec = _recorder(args)
    server = probe.Server(args.url, args.api_key).connect()
    load = _load(args)
    prov = _provenance(server, ps, args.seed)
    console.info(f"single stream against {_describe(server)}")
    console.info(
        f"{args.warmup} warm-up + {args.runs} run(s) of {load.max_tokens} tokens, EOS "
        f"{'respected' if args.respect_eos else 'ignored'}, temperature "
        f"{load.temperature:g}, prompts {ps.name}"
    )
    async with _client(server, args) as client:
        warm, done, interrupted, acc = await single.run(
            server,
            client,
            ps,
            runs=args.runs,
            warmup=args.warmup,
            load=load,
            respect_eos=args.respect_eos,
            vary_prompts=args.vary_prompts,
            console=console,
        )
    if any(f["short"] for f in warm) and not args.respect_eos:
        console.warn("a warm-up run came back short: the server may not honour ignore_eos")
    s = single.summarize(done, args.max_cv)
    if acc.get("accept_length") is not None:
        s["accept_length"], s["accept_length_source"] = acc["accept_length"], "metrics delta"
    elif s["accept_length_requests"] is not None:
        s["accept_length"], s["accept_length_source"] = (
            s["accept_length_requests"],
            "per-request sum",
        )
    else:
        s["accept_length"], s["accept_length_source"] = None, None
    for line in single.summary_lines(s, len(done)):
        console.out(line)
    for w in s["warnings"]:
        console.warn(w)
    status = (
        "interrupted"
        if interrupted
        else "ok"
        if s["tok_s"]["n"] and not s["failed"]
        else "errors"
        if s["tok_s"]["n"]
        else "failed"
    )
    rec.write(
        "single",
        {
            "arm": args.label or None,
            "status": status,
            "url": server.base_url,
            **_load_fields(args, load),
            "warmup": warm,
            "runs_detail": done,
            "runs_requested": args.runs,
            **s,
        },
        prov,
    )
    if rec.written:
        console.info(f"record appended to {rec.jsonl} (and {rec.csv})")
    single.raise_if_interrupted(interrupted)
    return 0 if status == "ok" else EXIT_FAILED


# ---------------------------------------------------------------- sweep
async def _sweep(args, console: Console) -> int:
    levels = _levels(args.concurrency)
    ps = prompts.load(args.prompts)
    rec = _recorder(args)
    server = probe.Server(args.url, args.api_key).connect()
    load = _load(args)
    prov = _provenance(server, ps, args.seed)
    slo = sw.SLO(args.slo_tpot_ms, args.slo_ttft_ms, "given")
    console.info(f"sweep against {_describe(server)}")
    console.info(
        f"levels {','.join(map(str, levels))}; {load.max_tokens} tokens per request; "
        f"prompts {ps.name}"
    )
    common = {"arm": args.label or None, "url": server.base_url, **_load_fields(args, load)}
    async with _client(server, args) as client:
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
            arm="",
            flush=not args.no_flush_cache,
            slo=slo,
        )
    if rec.written:
        console.info(f"{rec.written} record(s) appended to {rec.jsonl} (and {rec.csv})")
    if outcome.stopped:
        console.warn(f"sweep stopped: {outcome.stopped}; the finished levels are recorded")
        return EXIT_FAILED
    empty = [lv.concurrency for lv in outcome.levels if not lv.fields["completed"]]
    if empty:
        console.warn(f"no request succeeded at concurrency {', '.join(map(str, empty))}")
        return EXIT_FAILED
    return 0


# ---------------------------------------------------------------- lossless
async def _lossless(args, console: Console) -> int:
    ps = prompts.load(args.prompts)
    rec = _recorder(args)
    sa = probe.Server(args.url_a, args.api_key).connect()
    sb = probe.Server(args.url_b, args.api_key).connect()
    chosen = ps.take(args.num_prompts, args.seed)
    console.info(
        f"lossless check: {len(chosen)} prompt(s), temperature 0, up to "
        f"{args.max_tokens} tokens\n  A: {_describe(sa)}\n  B: {_describe(sb)}"
    )
    outs = []
    for server, tag in ((sa, "A"), (sb, "B")):
        async with _client(server, args) as client:
            res, interrupted = await lossless.generate(
                client, chosen, args.max_tokens, console, tag
            )
        if interrupted:
            raise sw.Interrupted("during the lossless generations")
        outs.append(res)
    f = lossless.compare(chosen, *outs)
    for line in lossless.verdict_lines(f, "A", "B"):
        console.out(line)
    host = provenance.host_facts()
    prov = {
        "host": host,
        "server": {
            "url": f"{sa.base_url} | {sb.base_url}",
            "sglang_version": sb.version,
            "model_path": sb.info.get("model_path"),
        },
        "arms": {"A": provenance.server_facts(sa), "B": provenance.server_facts(sb)},
        "prompts": _prompt_facts(ps, args.seed),
    }
    rec.write(
        "lossless",
        {
            "status": "ok",
            "url_a": sa.base_url,
            "url_b": sb.base_url,
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
            **f,
        },
        prov,
    )
    return 0 if f["verdict"] == "IDENTICAL" else EXIT_FAILED


# ---------------------------------------------------------------- ab
async def _ab_arm(
    server: probe.Server,
    args,
    console: Console,
    rec: records.Recorder,
    prov: dict,
    plan: ab_mod.ArmPlan,
    ps: prompts.PromptSet,
    levels: list[int],
    slo: sw.SLO,
    derive_slo: bool,
    lossless_prompts: list,
):
    load = _load(args)
    common = {
        "arm": plan.preset,
        "arm_label": plan.label,
        "url": server.base_url,
        **_load_fields(args, load),
    }
    async with _client(server, args) as client:
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


def _ab(args, extra: list[str], console: Console) -> int:
    ab_mod.check_presets(args.preset_a, args.preset_b)
    # A key given to the servers travels to the launcher in its environment: never on
    # a printed line or a child's command line.
    extra, key = pop_flag(extra, "--api-key")
    args.api_key = key or args.api_key
    levels = _levels(args.concurrency)
    ps = prompts.load(args.prompts)
    rec = _recorder(args)
    log_dir = Path(args.log_dir)
    port = args.port or ab_mod.free_port()
    plans = [
        ab_mod.plan_arm(
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
        proc = ab_mod.LauncherProcess(plan, args.api_key)
        try:
            try:
                url = proc.wait_ready(args.startup_timeout)
            except ab_mod.ArmFailed as e:
                console.warn(str(e))
                return EXIT_FAILED
            server = probe.Server(url, args.api_key).connect()
            console.info(f"[{plan.label}] ready: {_describe(server)}")
            prov = {
                "host": host,
                "server": provenance.server_facts(server, launch=plan.facts),
                "prompts": _prompt_facts(ps, args.seed),
            }
            outcome, outputs = asyncio.run(
                _ab_arm(
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
            return EXIT_FAILED
    return _ab_report(args, console, rec, done, levels, slo, check_prompts, host, ps)


def _ab_report(args, console, rec, done, levels, slo, check_prompts, host, ps) -> int:
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
        "prompts": _prompt_facts(ps, args.seed),
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
            f"{PROG} plot {rec.jsonl} --run-id {rec.run_id}"
        )
    return EXIT_FAILED if ll and ll["verdict"] == "DIFFERS" else 0


# ---------------------------------------------------------------- main
@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    ours, extra = split_extra(list(sys.argv[1:] if argv is None else argv))
    args = parser().parse_args(ours)
    if extra and args.cmd != "ab":
        raise UserError(
            f"arguments after `--` ({shlex.join(redact_args(extra))}) only go to `bench ab`.",
            fix="drop them",
        )
    _validate(args)
    console = Console(getattr(args, "quiet", False))
    try:
        if args.cmd == "plot":
            from sgl_eagle_ext.tools.bench import plot

            return plot.main(args, console)
        if args.cmd == "ab":
            return _ab(args, extra, console)
        runner = {"single": _single, "sweep": _sweep, "lossless": _lossless}[args.cmd]
        return asyncio.run(runner(args, console))
    except (sw.Interrupted, KeyboardInterrupt) as e:
        where = f" {e}" if str(e) else ""
        print(f"\n{PROG}: interrupted{where}; finished results are recorded", file=sys.stderr)
        return EXIT_INTERRUPTED
