"""Load sweep: streaming requests at each level, per-level latency and accept length.

Two load models. Closed loop (levels are concurrencies): at level c, c workers
each send one streaming request at a time until the level's prompts are used
up. Open loop (levels are request rates): requests are sent at the arrival
times of a seeded schedule (arrivals.py), whatever is still in flight. A level
lasts from the first send to the last answer. Every level (and every arm of an
A/B or compare run) sends the same prompts in the same seeded order (and, open
loop, at the same arrival times). Before each level the server's
prefix cache is flushed, so a level never reuses the previous level's prefill.

The accept length of a level is the delta of SGLang's own counters (generated
tokens / verify calls, Prometheus /metrics) over exactly that level; when the
server has no such counters it is the sum over the level's requests of the
per-request counts streamed in `sglext` (each is tokens / verify cycles).

This module is the loop; what a level's load is (loads.py), its figures
(level_metrics.py) and its printed row and notes (level_view.py) are their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np

from sgl_eagle_ext.common import http, interrupts
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import probe, stats, tokens
from sgl_eagle_ext.tools.bench.level_metrics import (
    choose_accept_length,
    goodput_fields,
    in_ms,
    is_short,
    level_metrics,
    metric_percentiles,
    one_stream,
)
from sgl_eagle_ext.tools.bench.level_view import (
    field_line,
    level_notes,
    level_table,
    table_row,
    view,
)
from sgl_eagle_ext.tools.bench.loads import CONCURRENCY, RATE, SLO, Load, OpenLoop, level_key
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.prompts import Prompt, PromptSet

DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
PER_CONCURRENCY = 5  # SGLang's advice: num-prompts >= 5 x concurrency for a steady state
SERVER_GONE = {cl.E_REFUSED, cl.E_LOST, cl.E_INCOMPLETE}
BURST_LEVEL = 10  # a burst without --num-prompts or --max-concurrency: 5 x 10 requests


class Interrupted(Exception):
    """Ctrl-C: what was finished has been written; the command stops."""


@dataclass
class Level:
    """One finished (or interrupted) level: raw results plus the record fields."""

    concurrency: float  # the level's value: a concurrency, or a request rate (open loop)
    results: list[cl.RequestResult]
    duration: float
    interrupted: bool = False
    server_gone: bool = False
    fields: dict = field(default_factory=dict)


class Dispatch:
    """Shared state of one level's senders: stop early once the server is gone."""

    def __init__(self, server: probe.Server | None):
        self.server = server
        self.gone = False
        self._checking: asyncio.Task | None = None

    async def check(self, r: cl.RequestResult) -> None:
        """After a refused or dropped request: is the server still there? (asked once)"""
        if self.server is None or self.gone or r.error not in SERVER_GONE:
            return
        if self._checking is None or self._checking.done():
            self._checking = asyncio.ensure_future(asyncio.to_thread(self.server.alive))
        if not await asyncio.shield(self._checking):
            self.gone = True


class Feed:
    """The prompts of a closed-loop --duration level: the first n of the seeded order,
    then more of the same order as the workers need them (taken off the event loop)."""

    def __init__(self, prompt_set, seed: int, first: list):
        self.prompt_set, self.seed, self.items = prompt_set, seed, list(first)
        self.lock = asyncio.Lock()

    async def get(self, i: int):
        if i >= len(self.items):
            async with self.lock:
                if i >= len(self.items):
                    want = max(2 * len(self.items), i + 1)
                    self.items = await asyncio.to_thread(self.prompt_set.take, want, self.seed)
        return self.items[i]


async def run_requests(
    client: cl.Client,
    prompts: list[Prompt],
    concurrency: int,
    load: Load,
    console: Console,
    desc: str,
    *,
    arrivals: np.ndarray | None = None,
    server: probe.Server | None = None,
    lags: list[float] | None = None,
    max_concurrency: int | None = None,
    until: float | None = None,
    feed: Feed | None = None,
) -> tuple[list[cl.RequestResult], float, bool]:
    """Send `prompts` with at most `concurrency` in flight (closed loop), or each at
    its time in `arrivals` (open loop; `lags` gets how late each send was; with
    `max_concurrency` an arrival then waits for a free slot). Closed loop with `until`
    (seconds): the workers keep sending, prompts from `feed`, until then; what is in
    flight finishes. With a `server`, stop sending once it is gone. Returns (results,
    seconds, interrupted); on Ctrl-C the requests finished so far come back."""
    results: list[cl.RequestResult] = []
    bar = console.bar(len(prompts), desc) if until is None else console.bar(until, desc, True)
    state = Dispatch(server)
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()

    async def send(i: int, p: Prompt) -> None:
        async with slots:
            r = await client.chat(
                p.as_messages(),
                getattr(p, "output_len", None) or load.max_tokens,  # a workload's own length
                index=i,
                prompt_id=p.id,
                temperature=load.temperature,
                ignore_eos=load.ignore_eos,
                seed=load.request_seed(i),
            )
        r.prompt = p  # counted after the level (count_inputs), off the measured time
        results.append(r)
        if until is None:
            bar.update(1)
        if not r.ok:
            await state.check(r)

    order = iter(enumerate(prompts))
    counter = iter(range(1 << 62))
    t0 = time.perf_counter()

    async def worker() -> None:
        if until is not None:  # closed loop for `until` seconds
            while not state.gone and time.perf_counter() - t0 < until:
                i = next(counter)
                await send(i, await feed.get(i))
                bar.update(min(until, time.perf_counter() - t0) - bar.n)
            return
        for i, p in order:
            if state.gone:
                return
            await send(i, p)

    if arrivals is None:
        n = max(1, concurrency if until is not None else min(concurrency, len(prompts)))
        tasks = [asyncio.create_task(worker()) for _ in range(n)]
    else:
        tasks = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        for (i, p), at in zip(order, arrivals.tolist()):
            wait = start + at - loop.time()
            if wait > 0:
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:
                    break
            if state.gone:
                break
            if lags is not None:
                lags.append(loop.time() - start - at)
            tasks.append(asyncio.create_task(send(i, p)))
    try:
        interrupted = await interrupts.gather_or_cancel(tasks)
    finally:
        bar.close()
    return sorted(results, key=lambda r: r.index), time.perf_counter() - t0, interrupted


def count_inputs(results: list[cl.RequestResult], prompt_set, server) -> str | None:
    """Each request's input tokens as sglang.bench_serving counts them (its dataset's
    prompt lengths: the text sent, no chat template): the length a workload fitted
    the prompt to, else the prompt's text counted by the workload's counter or the
    server's (tokens.pick_counter). Returns who counted (None: nothing to count)."""
    counter = getattr(prompt_set, "counter", None)
    if counter is None:
        get = getattr(server, "token_counter", None)
        counter = get() if get is not None else tokens.Counter()
    used = set()
    for r in results:
        if r.prompt is None:
            continue  # a multi-turn replay's requests: sent by the workload itself
        fitted = getattr(r.prompt, "input_len", None)
        if fitted is not None:
            r.input_tokens = fitted
            used.add("the lengths the prompts were fitted to")
            continue
        try:
            r.input_tokens = tokens.content_tokens(r.prompt, counter)
        except http.HTTPFailed:  # the server's tokenizer stopped answering: estimate
            counter = tokens.Counter()
            r.input_tokens = tokens.content_tokens(r.prompt, counter)
        used.add(counter.name)
    return "; ".join(sorted(used)) or None


def tokens_asked(prompts, load: Load) -> str:
    """What the requests ask for, from the requests themselves ("24 tokens",
    "8..64 tokens"): a workload's own output lengths, else --max-tokens."""
    asked = [getattr(p, "output_len", None) or load.max_tokens for p in prompts]
    if not asked:
        return f"{load.max_tokens} tokens"
    lo, hi = min(asked), max(asked)
    return f"{lo} tokens" if lo == hi else f"{lo}..{hi} tokens"


async def warm_up(
    client: cl.Client, prompt_set: PromptSet, n: int, load: Load, console: Console
) -> list[cl.RequestResult]:
    """`n` full-length requests (same max tokens, EOS ignored) before anything is measured."""
    if n <= 0:
        return []
    prompts = prompt_set.take(n, load.seed)
    console.info(f"warm-up: {n} request(s) of {tokens_asked(prompts, load)}")
    results, took, interrupted = await run_requests(client, prompts, n, load, console, "warm-up")
    if interrupted:
        raise Interrupted("during the warm-up")
    bad = [r for r in results if not r.ok]
    if bad:
        console.warn(f"warm-up: {len(bad)}/{n} request(s) failed ({bad[0].error}: {bad[0].detail})")
    short = [r for r in results if is_short(r, load)]
    if short:
        console.warn(
            f"warm-up: {len(short)} request(s) came back short "
            f"({short[0].completion_tokens}/{short[0].max_tokens} tokens): the server "
            f"ignores ignore_eos or caps the length (context length?)"
        )
    console.info(f"warm-up done in {took:.1f} s")
    return results


async def run_level(
    server: probe.Server,
    client: cl.Client,
    prompt_set: PromptSet,
    concurrency: float,
    n: int,
    load: Load,
    console: Console,
    *,
    flush: bool = True,
    slo: SLO | None = None,
    open_loop: OpenLoop | None = None,
    closed_duration: float | None = None,
) -> Level:
    """One level: `concurrency` workers over `n` prompts (or, closed_duration, for that
    many seconds), or (open_loop) arrivals at request rate `concurrency` (n of them, or
    as many as fit in its duration; inf: all at once)."""
    axis = RATE if open_loop else CONCURRENCY
    schedule = open_loop.schedule(concurrency, n, load.seed) if open_loop else None
    if open_loop is None and closed_duration:
        n = max(n, int(concurrency))
    if schedule is not None:
        n = len(schedule)
    prompts = prompt_set.take(n, load.seed)
    if flush:
        await asyncio.to_thread(server.flush_cache)
    before = await asyncio.to_thread(server.counters)
    cpu0 = time.process_time()
    lags: list[float] = []
    runner = getattr(prompt_set, "runner", lambda: None)()  # multi-turn runs its own level
    if runner is not None and schedule is None and not closed_duration:
        results, duration, interrupted = await runner(
            client, n, int(concurrency), load, console, axis.tag(concurrency)
        )
    else:
        results, duration, interrupted = await run_requests(
            client,
            prompts,
            int(concurrency) if math.isfinite(concurrency) else len(prompts),
            load,
            console,
            axis.tag(concurrency),
            arrivals=schedule,
            server=server,
            lags=lags,
            max_concurrency=open_loop.max_concurrency if open_loop else None,
            until=closed_duration if open_loop is None else None,
            feed=Feed(prompt_set, load.seed, prompts) if closed_duration else None,
        )
    cpu = time.process_time() - cpu0
    counter = await asyncio.to_thread(count_inputs, results, prompt_set, server)
    fields = level_metrics(results, duration, load, slo)
    fields["input_tokens_counted_by"] = counter
    # The load generator's own CPU use: near 100% of its core means it may be the limit.
    fields["client_cpu_s"] = cpu
    fields["client_busy"] = cpu / duration if duration > 0 else None
    if schedule is not None:
        span = float(schedule[-1]) if len(schedule) > 1 else 0.0
        fields.update(
            level_key(concurrency, open_loop, n),
            duration_target_s=open_loop.duration,
            arrivals=n,
            offered_rate=(n - 1) / span if span > 0 else None,
            send_lag_ms=in_ms(lags),
        )
    elif closed_duration:
        fields["duration_target_s"] = closed_duration
        n = len(results)
    level = Level(concurrency, results, duration, interrupted)
    gone = any(r.error in SERVER_GONE for r in results)
    if interrupted:
        after = None  # cancelled requests may still be counted: use the per-request sum
    elif gone and not await asyncio.to_thread(server.alive):
        level.server_gone = True
        after = None
    else:
        after = await asyncio.to_thread(server.counters_after, before, fields["output_tokens"])
    if level.server_gone:
        fields["cut_short"] = True
        fields["not_sent"] = n - len(results)
    acc = probe.accept_from_counters(before, after)
    # the counters count each finished request's prefill token too: one per request
    # (the server's request counter, else the requests this level completed); SGLang's
    # own figure also counts drafts accepted past a request's end (accepted_past_end)
    fields["accept_length_metrics"] = acc.decode_only(
        fields["accepted_past_end"], sum(1 for r in results if r.ok and r.completion_tokens)
    )
    fields["verify_calls_metrics"] = acc.verify_calls
    fields["generation_tokens_metrics"] = gen = acc.generation_tokens
    fields.update(choose_accept_length(fields, acc.accept_length))
    if (
        gen is not None
        and not level.server_gone
        and not fields["errors"]
        and gen > fields["output_tokens"] * 1.02 + 2
    ):
        fields["other_traffic"] = (
            f"the server generated {gen:.0f} tokens during this level, "
            f"the benchmark received {fields['output_tokens']}: other "
            f"clients were using it"
        )
    fields["status"] = (
        "server died"
        if level.server_gone
        else "interrupted"
        if interrupted
        else "errors"
        if fields["errors"]
        else "ok"
    )
    level.fields = fields
    return level


@dataclass
class SweepOutcome:
    levels: list[Level]
    stopped: str = ""  # why the sweep ended early ("" when it ran every level)


def default_slo(first: Level, factor: float = 2.0) -> SLO:
    """Interactive SLO from the first (lowest-concurrency) level: TPOT <= factor x its p50."""
    p50 = first.fields.get("tpot_ms", {}).get("p50")
    if p50 is None:
        return SLO()
    axis = RATE if "request_rate" in first.fields else CONCURRENCY
    return SLO(
        tpot_ms=factor * p50,
        source=f"default: {factor:g} x p50 TPOT of the first arm at {axis.tag(first.concurrency)}",
    )


async def run_sweep(
    server: probe.Server,
    client: cl.Client,
    prompt_set: PromptSet,
    levels: list[float],
    *,
    num_prompts: int,
    per_concurrency: int,
    load: Load,
    console: Console,
    write,
    arm: str = "",
    flush: bool = True,
    slo: SLO | None = None,
    derive_slo: bool = False,
    open_loop: OpenLoop | None = None,
    on_level=None,
    closed_duration: float | None = None,
    shape: dict | None = None,
    percentiles=None,
    max_cv: float = stats.STEADY_MAX_CV,
) -> SweepOutcome:
    """Run every level in ascending order; `write(level, fields)` records each as it ends.

    levels: concurrencies, or request rates with `open_loop`.
    derive_slo: without an SLO, take default_slo() from the first level (bench ab).
    Raises Interrupted after writing the interrupted level.
    """
    axis = RATE if open_loop else CONCURRENCY
    done: list[Level] = []
    slo = slo or SLO()
    if levels:
        head = level_table(axis, slo.set or derive_slo).header()
        console.out(head if not arm else f"[{arm}]\n{head}")
    for c in sorted(levels):
        if c == math.inf:  # a burst: --num-prompts, else enough for a steady state
            cap = open_loop.max_concurrency if open_loop else None
            n = num_prompts or per_concurrency * (cap or BURST_LEVEL) or BURST_LEVEL
        elif open_loop is not None and open_loop.ramp is not None:  # vLLM's: --num-prompts
            n = num_prompts or max(per_concurrency * math.ceil(c), 1)
        else:
            n = max(num_prompts, per_concurrency * math.ceil(c), 1)
        level = await run_level(
            server,
            client,
            prompt_set,
            c,
            n,
            load,
            console,
            flush=flush,
            slo=slo,
            open_loop=open_loop,
            closed_duration=closed_duration,
        )
        if shape:  # the run's load options, under the level's own fields
            level.fields = {**shape, **level.fields}
        if derive_slo and not slo.set and not done:
            slo.__dict__.update(default_slo(level).__dict__)
            level.fields.update(goodput_fields(level.results, level.duration, slo))
        done.append(level)
        f = level.fields
        # what the level sent: its arrivals, its request count, or (closed loop for a
        # duration) the requests that fitted in it
        f["prompts_per_level"] = f.get("arrivals", f["requests"] if closed_duration else n)
        # one stream has no ramp-up or drain: the note is for c > 1
        if open_loop is None and c > 1 and closed_duration and f["completed"] < PER_CONCURRENCY * c:
            f["steady_state_note"] = (
                f"only {f['completed']} request(s) completed in {closed_duration:g} s at "
                f"concurrency {c:g}: fewer than {PER_CONCURRENCY} x concurrency, so ramp-up "
                f"and drain weigh on the figures (a longer --duration evens them out)"
            )
        elif open_loop is None and c > 1 and not closed_duration and n < PER_CONCURRENCY * c:
            f["steady_state_note"] = (
                f"{n} prompts at concurrency {c}: fewer than "
                f"{PER_CONCURRENCY} x concurrency, so ramp-up and drain "
                f"weigh on the figures"
            )
        if open_loop is None and c == 1:  # one stream: its requests are repeated runs
            f.update(one_stream(level.results, load, max_cv))
        if percentiles is not None:
            f["metric_percentiles"] = metric_percentiles(level.results, percentiles)
        if on_level is not None:  # per-request records, input-length check
            on_level(level)
        write(c, f)
        typed = view(f)
        console.out(table_row(typed, c))
        console.out(field_line(typed, axis.tag(c)))
        for note in level_notes(f, c, axis):
            console.warn(note)
        if level.interrupted:
            raise Interrupted(f"at {'request rate' if open_loop else 'concurrency'} {c:g}")
        if level.server_gone:
            return SweepOutcome(
                done,
                f"the server at {server.base_url} stopped answering during "
                f"{'request rate' if open_loop else 'concurrency'} {c:g}",
            )
    return SweepOutcome(done)
