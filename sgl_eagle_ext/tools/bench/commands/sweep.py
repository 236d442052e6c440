"""bench sweep: streaming requests per load level against one running server."""

from __future__ import annotations

import asyncio

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import options, prompts, session, workload
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    w = sub.add_parser(
        "sweep",
        help="streaming concurrency sweep: tok/s, TTFT/TPOT/ITL/E2E, "
        "errors, accept length per level",
    )
    options.add_common(w, 256)
    options.add_sweep(w)
    workload.add_options(w)
    w.add_argument("--label", default="", help="arm name stored in the records (for plot)")
    w.add_argument(
        "--run-id",
        help="share a run id with another sweep (e.g. the other server "
        "of a manual A/B) so `plot` draws both; default: a new id",
    )
    w.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    return asyncio.run(_run(args, console))


async def _run(args, console: Console) -> int:
    levels, open_loop = options.load_levels(args)
    ps = prompts.load(args.prompts)
    workload.check_paths(args)
    rec = session.recorder(args)
    server = session.connect(args.url, args)
    load = session.load(args)
    prov = session.server_provenance(server, ps, args.seed)
    slo = options.slo(args)
    wl = workload.WorkloadSet(args, server, args.max_tokens) if workload.wanted(args) else None
    if wl is not None:
        if wl.multi_turn and (open_loop is not None or args.duration is not None):
            raise UserError(
                "--multi-turn replays conversations in closed loop, a request count each.",
                fix="use --concurrency (and --num-prompts) with --multi-turn, no --duration",
            )
        levels, open_loop = workload.trace_replay(args, wl, levels, open_loop)
        ps = wl
        prov["prompts"] = session.prompt_facts(wl, args.seed)
        prov["workload"] = wl.facts()
    console.info(f"sweep against {session.describe(server)}")
    console.info(
        f"levels: {sw.describe_levels(levels, open_loop, args.duration)}; "
        + (
            f"{load.max_tokens} tokens per request; prompts {ps.name}"
            if wl is None
            else wl.describe()
        )
    )
    common = {"arm": args.label or None, "url": server.base_url, **session.load_fields(load, args)}
    if wl is not None:
        common["workload"] = wl.facts()
    hook = workload.LevelHook(
        args.save_requests,
        wl,
        {"run_id": rec.run_id, "arm": args.label or None},
        console,
        key=lambda c: sw.level_key(c, open_loop),
    )
    async with session.client(server, args) as client:
        outcome = await session.warm_and_sweep(
            client,
            server,
            args,
            ps,
            levels,
            console,
            lambda c, f: rec.write("sweep", {**common, **sw.level_key(c, open_loop), **f}, prov),
            arm="",
            slo=slo,
            open_loop=open_loop,
            hook=hook,
            shape=session.load_shape(args, open_loop, wl),
        )
    if rec.written:
        console.info(f"{rec.written} record(s) appended to {rec.jsonl} (and {rec.csv})")
    if hook.log.written:
        console.info(f"{hook.log.written} per-request record(s) appended to {hook.log.path}")
    if outcome.stopped:
        console.warn(f"sweep stopped: {outcome.stopped}; the finished levels are recorded")
        return session.EXIT_FAILED
    empty = [lv.concurrency for lv in outcome.levels if not lv.fields["completed"]]
    if empty:
        where = "request rate" if open_loop else "concurrency"
        console.warn(f"no request succeeded at {where} {', '.join(f'{v:g}' for v in empty)}")
        return session.EXIT_FAILED
    return 0
