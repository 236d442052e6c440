"""bench lossless: the same prompts at temperature 0 on two running servers."""

from __future__ import annotations

import asyncio

from sgl_eagle_ext.tools.bench import lossless, options, prompts, provenance, session
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.progress import Console


def register(sub) -> None:
    ll = sub.add_parser(
        "lossless", help="same prompts at temperature 0 on two servers must give identical outputs"
    )
    options.add_common(ll, lossless.DEFAULT_MAX_TOKENS, url=False)
    ll.add_argument("--url-a", required=True, help="reference server (e.g. baseline)")
    ll.add_argument("--url-b", required=True, help="server under test (e.g. EAGLE-3)")
    ll.add_argument("--num-prompts", type=int, default=lossless.DEFAULT_PROMPTS)
    ll.set_defaults(run=run)


def run(args, extra: list[str], console: Console) -> int:
    return asyncio.run(_run(args, console))


async def _run(args, console: Console) -> int:
    ps = prompts.load(args.prompts)
    rec = session.recorder(args)
    sa = session.connect(args.url_a, args)
    sb = session.connect(args.url_b, args)
    chosen = ps.take(args.num_prompts, args.seed)
    console.info(
        f"lossless check: {len(chosen)} prompt(s), temperature 0, up to "
        f"{args.max_tokens} tokens\n  A: {session.describe(sa)}\n  B: {session.describe(sb)}"
    )
    outs = []
    for server, tag in ((sa, "A"), (sb, "B")):
        async with session.client(server, args) as client:
            res, interrupted = await lossless.generate(
                client, chosen, args.max_tokens, console, tag
            )
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
        "prompts": session.prompt_facts(ps, args.seed),
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
    return 0 if f["verdict"] == "IDENTICAL" else session.EXIT_FAILED
