"""bench lossless: the same prompts at temperature 0 on two running servers."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.common.cli_args import integer
from sgl_eagle_ext.tools.bench import lossless, options, prompts, provenance, session
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.commands import groups
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    ll = sub.add_parser(
        "lossless", help="same prompts at temperature 0 on two servers must give identical outputs"
    )
    options.add_common(ll, lossless.DEFAULT_MAX_TOKENS, url=False)
    ll.add_argument("--url-a", required=True, help="reference server (e.g. baseline)")
    ll.add_argument("--url-b", required=True, help="server under test (e.g. EAGLE-3)")
    ll.add_argument("--num-prompts", type=integer(), default=lossless.DEFAULT_PROMPTS)
    ll.set_defaults(read=read, run=run)


@dataclass(frozen=True)
class Options:
    connection: options.ConnectionOptions
    requests: options.RequestOptions
    records: options.RecordOptions
    url_a: str  # --url-a: the reference server
    url_b: str  # --url-b: the server under test
    num_prompts: int  # --num-prompts (>= 0)


def read(args: argparse.Namespace) -> Options:
    conn, req = groups.connection(args), groups.requests(args)
    options.positive("--num-prompts", args.num_prompts, zero_ok=True)
    return Options(
        connection=conn,
        requests=req,
        records=groups.records(args),
        url_a=args.url_a,
        url_b=args.url_b,
        num_prompts=args.num_prompts,
    )


def run(opts: Options, extra: list[str], console: Console) -> int:
    return interrupts.run(_run(opts, console))


async def _run(opts: Options, console: Console) -> int:
    conn, req = opts.connection, opts.requests
    ps = prompts.load(req.prompts)
    rec = session.recorder(opts.records, conn)
    sa = session.connect(opts.url_a, conn)
    sb = session.connect(opts.url_b, conn)
    chosen = ps.take(opts.num_prompts, req.seed)
    console.info(
        f"lossless check: {len(chosen)} prompt(s), temperature 0, up to "
        f"{req.max_tokens} tokens\n  A: {session.describe(sa)}\n  B: {session.describe(sb)}"
    )
    outs = []
    for server, tag in ((sa, "A"), (sb, "B")):
        async with session.client(server, conn, req) as client:
            res, interrupted = await lossless.generate(client, chosen, req.max_tokens, console, tag)
        if interrupted:
            raise sw.Interrupted("during the lossless generations")
        outs.append(res)
    f = lossless.compare(chosen, *outs)
    for line in lossless.verdict_lines(f, "A", "B"):
        console.out(line)
    prov = {
        "host": provenance.host_facts(),
        "server": {
            "url": f"{sa.base_url} | {sb.base_url}",
            "sglang_version": sb.version,
            "model_path": sb.info.get("model_path"),
        },
        "arms": {"A": provenance.server_facts(sa), "B": provenance.server_facts(sb)},
        "prompts": session.prompt_facts(ps, req.seed),
    }
    rec.write(
        "lossless",
        {
            "status": "ok",
            "url_a": sa.base_url,
            "url_b": sb.base_url,
            "max_tokens": req.max_tokens,
            "temperature": 0.0,
            **f,
        },
        prov,
    )
    return 0 if f["verdict"] == "IDENTICAL" else session.EXIT_FAILED
