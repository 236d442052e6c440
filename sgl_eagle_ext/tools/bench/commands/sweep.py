"""bench sweep: streaming requests per load level against one running server."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.common.declared_flags import read_options
from sgl_eagle_ext.tools.bench import loads, options, session, workload
from sgl_eagle_ext.tools.bench.commands import field_flags
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    w = sub.add_parser(
        "sweep",
        help="streaming concurrency sweep: tok/s, TTFT/TPOT/ITL/E2E, "
        "errors, accept length per level",
    )
    options.add_common(w, 256, records=("label", "run_id"))
    options.add_sweep(w)
    workload.add_options(w)
    field_flags.register(w)
    w.set_defaults(read=read, run=run, defaults=_defaults(w))


def _defaults(p) -> dict:
    return {a.dest: a.default for a in p._actions}


@dataclass(frozen=True)
class Options:  # the groups' checks run in this order
    connection: options.ConnectionOptions
    workload: workload.WorkloadOptions
    requests: options.RequestOptions
    sweep: options.SweepOptions
    records: options.RecordOptions


def read(args: argparse.Namespace) -> Options:
    field_flags.read(args, args.defaults)  # the field's names, read into ours
    return read_options(Options, args)


def run(opts: Options, extra: list[str], console: Console) -> int:
    return interrupts.run(_run(opts, console))


async def _run(opts: Options, console: Console) -> int:
    conn, req, sweep, work = opts.connection, opts.requests, opts.sweep, opts.workload
    levels, open_loop, ps, wl = workload.plan(sweep, work, req, opts.records.results)
    rec = session.recorder(opts.records, conn)
    server = session.connect(conn.url, conn)
    load = session.load(req)
    if wl is not None:
        wl.attach(server)
        ps = wl
    prov = session.server_provenance(server, ps, req.seed)
    if wl is not None:
        prov["workload"] = wl.facts()
    console.info(f"sweep against {session.describe(server)}")
    console.info(
        f"levels: {loads.describe_levels(levels, open_loop, sweep.duration)}; "
        + (
            f"{load.max_tokens} tokens per request; prompts {ps.name}"
            if wl is None
            else wl.describe()
        )
    )
    arm = opts.records.label or None
    common = {"arm": arm, "url": server.base_url, **session.load_fields(load, conn)}
    if wl is not None:
        common["workload"] = wl.facts()
    hook = workload.LevelHook(
        work.save_requests, wl, {"run_id": rec.run_id, "arm": arm}, console, open_loop
    )
    async with session.client(server, conn, req) as client:
        outcome = await session.warm_and_sweep(
            client,
            server,
            opts,
            ps,
            levels,
            console,
            rec,
            common,
            prov,
            arm="",
            slo=sweep.slo,
            open_loop=open_loop,
            hook=hook,
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
