"""bench single: one stream, fixed-length runs with spread and a 95% CI."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.common.cli_args import integer, number
from sgl_eagle_ext.common.declared_flags import add_flags, flag, read_options
from sgl_eagle_ext.tools.bench import options, prompts, session, single
from sgl_eagle_ext.tools.bench.commands import groups
from sgl_eagle_ext.tools.bench.levels import above
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    s = sub.add_parser("single", help="single-stream fixed-length runs with spread and 95%% CI")
    options.add_common(s, 512, records=("label", "run_id"))
    add_flags(s, Options)
    s.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    connection: options.ConnectionOptions
    requests: options.RequestOptions
    records: options.RecordOptions
    runs: int = flag(
        "--runs", default=5, type=integer(), check=above(0), help="measured runs (default 5)"
    )
    warmup: int = flag(
        "--warmup",
        default=2,
        type=integer(),
        check=above(0, zero_ok=True),
        help="warm-up runs, same length (default 2)",
    )
    vary_prompts: bool = flag(
        "--vary-prompts",
        default=False,
        action="store_true",
        help="a different prompt per run (default: the same prompt every run)",
    )
    max_cv: float = flag(
        "--max-cv",
        default=0.05,
        type=number(0),
        help="steady-state warning above this stdev/mean (default 0.05)",
    )


def read(args: argparse.Namespace) -> Options:
    return read_options(
        Options,
        args,
        connection=groups.connection(args),
        requests=groups.requests(args),
        records=groups.records(args),
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    return interrupts.run(_run(opts, console))


async def _run(opts: Options, console: Console) -> int:
    conn, req = opts.connection, opts.requests
    ps = prompts.load(req.prompts)
    rec = session.recorder(opts.records, conn)
    server = session.connect(conn.url, conn)
    load = session.load(req)
    prov = session.server_provenance(server, ps, req.seed)
    console.info(f"single stream against {session.describe(server)}")
    console.info(
        f"{opts.warmup} warm-up + {opts.runs} run(s) of {load.max_tokens} tokens, EOS "
        f"{'respected' if req.respect_eos else 'ignored'}, temperature "
        f"{load.temperature:g}, prompts {ps.name}"
    )
    async with session.client(server, conn, req) as client:
        warm, done, interrupted, acc = await single.run(
            server,
            client,
            ps,
            runs=opts.runs,
            warmup=opts.warmup,
            load=load,
            respect_eos=req.respect_eos,
            vary_prompts=opts.vary_prompts,
            console=console,
        )
    if any(f.short for f in warm) and not req.respect_eos:
        console.warn("a warm-up run came back short: the server may not honour ignore_eos")
    s = single.summarize(done, opts.max_cv, acc)
    for line in single.summary_lines(s, len(done)):
        console.out(line)
    for w in s.warnings:
        console.warn(w)
    if interrupted:
        status = "interrupted"
    elif not s.tok_s.n:
        status = "failed"
    else:
        status = "errors" if s.failed else "ok"
    rec.write(
        "single",
        {
            "arm": opts.records.label or None,
            "status": status,
            "url": server.base_url,
            **session.load_fields(load, conn),
            "warmup": [asdict(f) for f in warm],
            "runs_detail": [asdict(f) for f in done],
            "runs_requested": opts.runs,
            **asdict(s),
        },
        prov,
    )
    if rec.written:
        console.info(f"record appended to {rec.jsonl} (and {rec.csv})")
    single.raise_if_interrupted(interrupted)
    return 0 if status == "ok" else session.EXIT_FAILED
