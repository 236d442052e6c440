"""bench single: one stream, fixed-length runs with spread and a 95% CI."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.common.cli_args import integer, number
from sgl_eagle_ext.common.declared_flags import add_flags, flag, read_options
from sgl_eagle_ext.tools.bench import level_view, options, prompts, session, single
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.levels import above
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    s = sub.add_parser("single", help="single-stream fixed-length runs with spread and 95%% CI")
    options.add_common(s, 512, records=("label", "run_id"))
    add_flags(s, Options)
    s.set_defaults(read=partial(read_options, Options), run=run)


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


def run(opts: Options, extra: list[str], console: Console) -> int:
    return interrupts.run(_run(opts, console))


async def _run(opts: Options, console: Console) -> int:
    """One closed-loop level at concurrency 1 of `--runs` requests after the warm-up:
    the sweep's level (record kind sweep, shape single), its requests read as runs."""
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
    runs_from = ps if opts.vary_prompts else prompts.one_of(ps, req.seed)
    common = {"arm": opts.records.label or None, "url": server.base_url}
    common |= session.load_fields(load, conn) | {"shape": "single", "runs_requested": opts.runs}
    async with session.client(server, conn, req) as client:
        warm = await sw.warm_up(client, runs_from, opts.warmup, load, console)
        warm = [single.run_fields(i, r, load) for i, r in enumerate(warm, 1)]
        common["warmup"] = [asdict(f) for f in warm]
        for f in warm:
            console.info(single.run_line(f, opts.warmup, load.max_tokens, warmup=True))
        done: list[single.RunFields] = []

        def runs(level: sw.Level) -> None:  # in the level's record, before it is written
            done[:] = [single.run_fields(i, r, load) for i, r in enumerate(level.results, 1)]
            level.fields["runs_detail"] = [asdict(f) for f in done]

        outcome = await sw.run_sweep(
            server,
            client,
            runs_from,
            [1],
            num_prompts=opts.runs,
            per_concurrency=1,
            load=load,
            console=console,
            write=lambda c, f: rec.write("sweep", {**common, "concurrency": c, **f}, prov),
            flush=False,  # as the warm-up left it: every run alike
            on_level=runs,
            shape=session.load_shape(None, max_tokens=req.max_tokens, duration=None),
            max_cv=opts.max_cv,
        )
    (level,) = outcome.levels
    v = level_view.view(level.fields)
    for f in done:
        console.out(single.run_line(f, opts.runs, load.max_tokens))
    for line in single.summary_lines(v, opts.runs):
        console.out(line)
    for w in v.steady_warnings or []:
        console.warn(w)
    if rec.written:
        console.info(f"record appended to {rec.jsonl} (and {rec.csv})")
    if outcome.stopped:
        console.warn(f"stopped: {outcome.stopped}")
    return 0 if v.status == "ok" and v.at("tok_s", "n") else session.EXIT_FAILED
