"""What every subcommand's run builds from its typed options (options.py): the
recorder, the load, the streaming client, the server's one-line description and the
provenance."""

from __future__ import annotations

import time

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import loads, options, probe, prompts, provenance, records
from sgl_eagle_ext.tools.bench import sweep as sw

PROG = "sgl_eagle_ext.bench"
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def recorder(out: options.RecordOptions, conn: options.ConnectionOptions) -> records.Recorder:
    # Known secret values are redacted from every record wherever they turn up
    # (SGLang's /server_info echoes its own command line, --api-key included).
    secrets = (conn.api_key or "", *conn.headers.values())
    return records.Recorder(out.results, out.run_id, secrets=secrets)


def load(req: options.RequestOptions) -> loads.Load:
    return loads.Load(req.max_tokens, req.temperature, not req.respect_eos, req.seed)


def load_fields(ld: loads.Load, conn: options.ConnectionOptions) -> dict:
    """What every request of a record asked for (secret-named --extra-body keys hidden)."""
    body = conn.extra_body
    return {
        "max_tokens": ld.max_tokens,
        "temperature": ld.temperature,
        "ignore_eos": ld.ignore_eos,
        "seed": ld.seed,
        "endpoint": conn.endpoint,
        "stream": conn.stream,
        **({"extra_body": provenance.redact_info(body)} if body else {}),
    }


def load_shape(
    open_loop: loads.OpenLoop | None, wl=None, *, max_tokens: int, duration: float | None
) -> dict:
    """Every option that shapes the load, as sent, for each record of the run (the
    level's own value, concurrency or request rate, is added per level)."""
    facts = wl.facts() if wl is not None else {}
    return {
        "dataset": facts.get("dataset", "shipped"),
        "input_len": facts.get("input_len", "dataset"),
        # what each request asked for: --output-len, else --max-tokens
        "output_len": facts.get("output_len") if wl is not None else str(max_tokens),
        "arrival": open_loop.arrival if open_loop else "closed loop",
        "burstiness": open_loop.shape if open_loop else None,
        "max_concurrency": open_loop.max_concurrency if open_loop else None,
        "duration_target_s": duration,
        # a trace replayed at its timestamps: how much faster (None: not a replay)
        "trace_speed": open_loop.speed if open_loop and open_loop.times is not None else None,
    }


def prompt_facts(ps, seed: int) -> dict:
    """A prompt set's (its size) or a workload's (its file's conversations or rows; None:
    generated per request)."""
    count = len(ps.prompts) if isinstance(ps, prompts.PromptSet) else ps.count
    return {"set": ps.name, "sha256": ps.sha256, "count": count, "seed": seed}


def connect(url: str, conn: options.ConnectionOptions) -> probe.Server:
    """The server, asked once, or (--ready-check-timeout-sec S) until it answers, S at most."""
    deadline = time.monotonic() + conn.ready_timeout
    tls = conn.tls  # a bad --ca-cert is refused once, not asked again
    while True:
        try:
            server = probe.Server(url, conn.api_key, conn.headers, tls).connect()
            break
        except UserError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(1.0)  # a server still starting: ask again
    server.tokenizer = conn.tokenizer
    return server


def client(
    server: probe.Server, conn: options.ConnectionOptions, req: options.RequestOptions
) -> cl.Client:
    return cl.Client(
        server.base_url,
        api_key=conn.api_key,
        model=conn.model or server.model_id,
        timeout=req.request_timeout,
        spec_details_field=server.release.chat_spec_details_field,
        extra_body=conn.extra_body,
        endpoint=conn.endpoint,
        headers=conn.headers,
        incremental=bool(server.info.get("incremental_streaming_output")),
        stream=conn.stream,
        tls=conn.tls,
    )


def describe(server: probe.Server) -> str:
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


def server_provenance(server: probe.Server, ps: prompts.PromptSet, seed: int) -> dict:
    """Where a record's figures come from: this host, the server, the prompt set."""
    return {
        "host": provenance.host_facts(),
        "server": provenance.server_facts(server),
        "prompts": prompt_facts(ps, seed),
    }


def batch_cap(info: dict) -> int | None:
    """max_running_requests as the server's scheduler resolved it (/server_info), else given."""
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    caps = (first.get("max_running_requests"), info.get("max_running_requests"))
    return next((c for c in caps if type(c) is int and c > 0), None)


async def warm_and_sweep(
    client: cl.Client,
    server: probe.Server,
    opts,
    ps,
    levels: list[float],
    console,
    rec: records.Recorder,
    common: dict,
    prov: dict,
    *,
    arm: str,
    slo,
    open_loop,
    hook,
    derive_slo: bool = False,
) -> sw.SweepOutcome:
    """The warm-up, then every level: the part of a run that sweep, ab and compare share
    (`opts` theirs: its requests and sweep). Each level's record holds `common`, the
    load's shape and the level's own fields."""
    req, sweep = opts.requests, opts.sweep
    ld = load(req)
    wl = ps if hasattr(ps, "facts") else None
    shape = load_shape(open_loop, wl, max_tokens=req.max_tokens, duration=sweep.duration)

    def write(c: float, f: dict) -> None:
        rec.write("sweep", {**common, **loads.level_key(c, open_loop), **f}, prov)

    cap = batch_cap(server.info)
    over = [c for c in levels if open_loop is None and cap and c > cap]
    if over:  # the level's figures are then a queue's, not a batch of that size
        console.warn(
            f"concurrency {', '.join(f'{c:g}' for c in over)}: the server runs at most {cap} "
            f"requests at once (its max_running_requests); the rest wait in its queue, in TTFT"
        )
    await sw.warm_up(client, ps, sweep.warmup, ld, console)
    return await sw.run_sweep(
        server,
        client,
        ps,
        levels,
        num_prompts=sweep.num_prompts,
        per_concurrency=sweep.prompts_per_concurrency,
        load=ld,
        console=console,
        write=write,
        arm=arm,
        flush=sweep.flush_cache,
        slo=slo,
        derive_slo=derive_slo,
        open_loop=open_loop,
        on_level=hook,
        closed_duration=sweep.duration if open_loop is None else None,
        shape=shape,
        percentiles=sweep.metric_percentiles,
    )
