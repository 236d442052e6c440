"""bench lossless: the same prompts at temperature 0 on two running servers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.common.cli_args import integer
from sgl_eagle_ext.common.declared_flags import add_flags, flag, read_options
from sgl_eagle_ext.tools.bench import lossless, options, prompts, provenance, session
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.levels import above
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    ll = sub.add_parser(
        "lossless", help="same prompts at temperature 0 on two servers must give identical outputs"
    )
    options.add_common(ll, lossless.DEFAULT_MAX_TOKENS, url=False)
    add_flags(ll, Options)
    ll.set_defaults(read=partial(read_options, Options), run=run)


@dataclass(frozen=True)
class Options:
    connection: options.ConnectionOptions
    requests: options.RequestOptions
    records: options.RecordOptions
    url_a: str = flag("--url-a", required=True, help="reference server (e.g. baseline)")
    url_b: str = flag("--url-b", required=True, help="server under test (e.g. EAGLE-3)")
    num_prompts: int = flag(
        "--num-prompts",
        default=lossless.DEFAULT_PROMPTS,
        type=integer(),
        check=above(0, zero_ok=True),
        help=None,
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
            **asdict(f),
        },
        prov,
    )
    return 0 if f.verdict == "IDENTICAL" else session.EXIT_FAILED
