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
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.common import http
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.tools.bench import arrivals as arr
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import probe, records, stats, tokens
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.prompts import Prompt, PromptSet

DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
PER_CONCURRENCY = 5  # SGLang's advice: num-prompts >= 5 x concurrency for a steady state
SERVER_GONE = {cl.E_REFUSED, cl.E_LOST, cl.E_INCOMPLETE}
ERROR_EXAMPLES = 3
CLIENT_BUSY = 0.9  # warn when the client itself used more than this share of a core
BURST_LEVEL = 10  # a burst without --num-prompts or --max-concurrency: 5 x 10 requests
LATE_SEND_MS = 50.0  # open loop: warn when sends lag their schedule by more (p99)
CLIENT_LATE_BUSY = 0.5  # ... and blame the client only when it was this busy
ITL_EXACT = "per-chunk token counts"
ITL_ESTIMATE = "estimate: each request's tokens after its first chunk spread evenly over its chunks"


class Interrupted(Exception):
    """Ctrl-C: what was finished has been written; the command stops."""


@dataclass(frozen=True)
class Axis:
    """What a sweep's levels are: concurrencies (closed loop) or request rates (open)."""

    key: str  # record field holding the level
    short: str  # in messages: c=4, rate=2/s
    unit: str
    title: str  # table column and plot axis

    def tag(self, value: float) -> str:
        return f"{self.short}={value:g}{self.unit}"


CONCURRENCY = Axis("concurrency", "c", "", "concurrency")
RATE = Axis("request_rate", "rate", "/s", "request rate (req/s)")


@dataclass
class OpenLoop:
    """Open-loop levels: the sweep's levels are request rates (req/s); inf is a burst."""

    burstiness: float = 1.0  # gamma shape of the gaps; 1 = Poisson
    duration: float | None = None  # seconds of arrivals per level (else a request count)
    arrival: str = "poisson"  # poisson, gamma, constant, or trace (the times below)
    max_concurrency: int | None = None  # at most this many in flight (bench_serving's)
    times: list[float] | None = None  # a trace's own arrival times (seconds, as replayed)
    speed: float = 1.0  # a trace replayed this many times faster (--trace-speed)
    ramp: tuple[str, float, float] | None = None  # vLLM's --ramp-up-*: (strategy, from, to)

    def schedule(self, rate: float, n: int, seed: int) -> np.ndarray:
        if self.times is not None:
            return np.asarray(self.times, dtype=np.float64)
        kind = "constant" if self.arrival == "constant" else "gamma"
        if self.ramp is not None:
            strategy, start, end = self.ramp
            return arr.ramp(strategy, start, end, n, self.burstiness, seed, kind)
        if self.duration:
            return arr.schedule(rate, self.burstiness, seed, duration=self.duration, kind=kind)
        return arr.schedule(rate, self.burstiness, seed, count=n, kind=kind)

    def arrival_at(self, rate: float) -> str:
        if self.ramp is not None:
            strategy, start, end = self.ramp
            return f"{self.arrival}, {strategy} ramp-up {start:g}->{end:g}/s"
        return "burst" if rate == math.inf else self.arrival

    @property
    def shape(self) -> float | None:
        """The gamma shape, for the records: None where it plays no part."""
        return self.burstiness if self.arrival in ("poisson", "gamma") else None


@dataclass
class Load:
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0

    def request_seed(self, i: int) -> int | None:
        return self.seed + i if self.temperature > 0 else None


@dataclass
class SLO:
    """Latency goals (ms) a request must meet to count toward goodput: ttft, tpot and
    e2e (sglang.bench_serving's --goodput keys, e2el there), itl (every token's)."""

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    source: str = ""
    e2e_ms: float | None = None
    itl_ms: float | None = None

    @property
    def set(self) -> bool:
        return any(v is not None for v in (self.tpot_ms, self.ttft_ms, self.e2e_ms, self.itl_ms))

    def met(self, r: cl.RequestResult) -> bool:
        if not r.ok:
            return False
        for goal, value in (
            (self.tpot_ms, r.tpot),
            (self.ttft_ms, r.ttft),
            (self.e2e_ms, r.e2e),
            (self.itl_ms, max(r.itls, default=None) if self.itl_ms is not None else None),
        ):
            if goal is not None and (value is None or value * 1e3 > goal):
                return False
        return True

    def goals(self) -> dict:
        """The goals set, by their field names (tpot_ms, ttft_ms, e2e_ms, itl_ms)."""
        keys = ("tpot_ms", "ttft_ms", "e2e_ms", "itl_ms")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def describe(self) -> str:
        parts = []
        if self.tpot_ms is not None:
            parts.append(f"TPOT <= {self.tpot_ms:.1f} ms")
        if self.ttft_ms is not None:
            parts.append(f"TTFT <= {self.ttft_ms:.0f} ms")
        if self.e2e_ms is not None:
            parts.append(f"E2E <= {self.e2e_ms:.0f} ms")
        if self.itl_ms is not None:
            parts.append(f"every ITL <= {self.itl_ms:.1f} ms")
        return " and ".join(parts) + (f" ({self.source})" if self.source else "")

    def record(self) -> dict:
        out = {"tpot_ms": self.tpot_ms, "ttft_ms": self.ttft_ms, "source": self.source}
        out.update(
            {k: v for k, v in (("e2e_ms", self.e2e_ms), ("itl_ms", self.itl_ms)) if v is not None}
        )
        return out


@dataclass
class Level:
    """One finished (or interrupted) level: raw results plus the record fields."""

    concurrency: float  # the level's value: a concurrency, or a request rate (open loop)
    results: list[cl.RequestResult]
    duration: float
    interrupted: bool = False
    server_gone: bool = False
    fields: dict = field(default_factory=dict)


def _ms(values) -> dict:
    return stats.percentiles([v * 1e3 for v in values])


def is_short(r: cl.RequestResult, load: Load) -> bool:
    """Fewer tokens than asked with EOS ignored: flagged, never averaged in as a run."""
    return (
        r.ok and load.ignore_eos and (r.completion_tokens or 0) < (r.max_tokens or load.max_tokens)
    )


def level_metrics(
    results: list[cl.RequestResult], duration: float, load: Load, slo: SLO | None = None
) -> dict:
    """Record fields of one level from its requests (pure; unit-tested)."""
    ok = [r for r in results if r.ok]
    errors = Counter(r.error for r in results if not r.ok)
    examples = [f"{r.error}: {r.detail}" for r in results if not r.ok][:ERROR_EXAMPLES]
    short = [r for r in ok if is_short(r, load)]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    chunks = sum(len(r.chunk_times) for r in ok)
    itls = [g for r in ok for g in r.itls]
    gaps = [g for r in ok for g in r.chunk_gaps]
    exact = [r.itl_exact for r in ok if r.chunk_gaps]
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    counted = [r.input_tokens for r in ok if r.input_tokens is not None]
    input_tokens = sum(counted) if ok and len(counted) == len(ok) else None
    spec = [r for r in ok if r.spec_verify_ct]
    verify = sum(r.spec_verify_ct for r in spec)
    spec_tokens = sum(r.completion_tokens or 0 for r in spec)
    decoded = sum(r.decoded_tokens or 0 for r in spec)

    def rate(x):
        return x / duration if duration > 0 and x is not None else None

    out = {
        "requests": len(results),
        "completed": len(ok),
        "errors": dict(errors),
        "error_examples": examples,
        "short": len(short),
        "short_examples": [
            f"{r.prompt_id}: {r.completion_tokens}/{r.max_tokens or load.max_tokens} tokens "
            f"(finish {r.finish_reason})"
            for r in short[:ERROR_EXAMPLES]
        ],
        "malformed_chunks": sum(r.malformed for r in results),
        "tokens_estimated": sum(1 for r in ok if not r.tokens_from_usage),
        "duration_s": duration,
        "output_tokens": tokens,
        # as sglang.bench_serving: input (the prompts as sent, no chat template: its
        # input lengths), output and total (input + output) token throughput
        "input_tokens": input_tokens,
        "input_tok_s": rate(input_tokens),
        "output_tok_s": rate(tokens),
        "total_tok_s": rate(None if input_tokens is None else input_tokens + tokens),
        # the server's own prompt count (usage.prompt_tokens): the chat template included
        "prompt_tokens": prompt_tokens,
        "prompt_tok_s": rate(prompt_tokens) if ok else None,
        "request_s": rate(len(ok)),
        # sglang.bench_serving's "Concurrency": request time in flight / the level's time
        # (the `concurrency` field stays the cap of a closed-loop level)
        "concurrency_mean": rate(sum(r.e2e for r in ok if r.e2e is not None)),
        "ttft_ms": _ms(r.ttft for r in ok if r.ttft is not None),
        "tpot_ms": _ms(r.tpot for r in ok if r.tpot is not None),
        # per token, as sglang.bench_serving counts it (client.RequestResult.itls)
        "itl_ms": {**_ms(itls), **stats.spread([g * 1e3 for g in itls])},
        "itl_source": None if not exact else ITL_EXACT if all(exact) else ITL_ESTIMATE,
        # the gaps between streamed chunks themselves (a chunk may carry several tokens)
        "chunk_gap_ms": _ms(gaps),
        "e2e_ms": _ms(r.e2e for r in ok if r.e2e is not None),
        "tokens_per_chunk": tokens / chunks if chunks else None,
        # decode-only, as SGLang's /server_info: tokens gained in verify cycles per cycle
        # (RequestResult.decoded_tokens)
        "accept_length_requests": accept.from_counts(decoded, verify),
        "accept_length_requests_with_prefill": accept.from_counts(spec_tokens, verify),
        "verify_calls_requests": verify or None,
        # drafts SGLang accepted past the tokens kept (the last cycle at max_tokens): in
        # its server-wide figure, not in the completion counts (0 unless reported)
        "accepted_past_end": decoded - (spec_tokens - len(spec)) if spec else 0,
    }
    out.update(peaks(ok))
    out.update(goodput_fields(results, duration, slo))
    return out


def peaks(ok: list[cl.RequestResult]) -> dict:
    """sglang.bench_serving's peaks over one-second buckets from the first send: the
    most output tokens that arrived in one (each chunk's own tokens at its arrival, as
    bench_serving on /generate; on the OpenAI endpoints it counts one per chunk) and
    the most requests in flight during some part of one."""
    if not ok:
        return {"peak_output_tok_s": None, "peak_concurrency": None}
    t0 = min(r.start for r in ok)
    ends = [r.start + (r.e2e or 0.0) for r in ok]
    size = int(math.ceil(max(ends) - t0)) + 1
    toks, inflight = np.zeros(size), np.zeros(size)
    for r, end in zip(ok, ends):
        times = [r.start + t - t0 for t in r.chunk_times]
        first = r.chunk_tokens[0] if r.itl_exact else 1
        counts = [first, *r.tokens_per_gap()] if times else []
        if len(counts) != len(times):
            counts = [1] * len(times)
        np.add.at(toks, np.minimum(np.array(times, dtype=int), size - 1), counts)
        inflight[int(r.start - t0) : int(end - t0) + 1] += 1
    return {"peak_output_tok_s": float(toks.max()), "peak_concurrency": int(inflight.max())}


def goodput_fields(results: list[cl.RequestResult], duration: float, slo: SLO | None) -> dict:
    """Output tok/s and req/s of the requests that met the SLO ({} without an SLO)."""
    if slo is None or not slo.set:
        return {}
    good = [r for r in results if slo.met(r)]
    sent = len(results) or 1
    return {
        "slo": slo.record(),
        # as sglang.bench_serving: requests meeting every goal (each goal) / requests sent
        "slo_attainment": len(good) / sent,
        "slo_attainment_by_metric": {
            key: sum(1 for r in results if SLO(**{key: goal}).met(r)) / sent
            for key, goal in slo.goals().items()
        },
        "goodput_tok_s": (
            sum(r.completion_tokens or 0 for r in good) / duration if duration > 0 else None
        ),
        "goodput_req_s": len(good) / duration if duration > 0 else None,
    }


def one_stream(results: list[cl.RequestResult], load: Load, max_cv: float) -> dict:
    """A one-stream level's requests as repeated runs (bench single's statistics): the
    spread and 95% CI of their tok/s and a steady-state check; a short request (EOS
    ignored) is left out of them."""
    runs = [r for r in results if r.ok and not is_short(r, load)]
    tok = stats.summary(r.tok_s for r in runs)
    secs = sum(r.e2e for r in runs)
    warnings = stats.steady_state_warnings([r.tok_s for r in runs], max_cv)
    return {
        "tok_s": asdict(tok),
        # after the first token: 1 / TPOT
        "decode_tok_s": asdict(stats.summary(1 / r.tpot for r in runs if r.tpot)),
        "overall_tok_s": sum(r.completion_tokens for r in runs) / secs if secs else None,
        "steady": not warnings if tok.n >= 2 else None,
        "steady_warnings": warnings,
    }


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
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def send(i: int, p: Prompt) -> None:
        if slots is not None:
            async with slots:
                r = await _one(i, p)
        else:
            r = await _one(i, p)
        results.append(r)
        if until is None:
            bar.update(1)
        if not r.ok:
            await state.check(r)

    async def _one(i: int, p: Prompt) -> cl.RequestResult:
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
        return r

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
    interrupted = False
    try:
        if asyncio.current_task().cancelling():
            raise asyncio.CancelledError
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        interrupted = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
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


def per_level_prompts(num_prompts: int, per_concurrency: int, concurrency: int) -> int:
    return max(num_prompts, per_concurrency * concurrency, 1)


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
            send_lag_ms=_ms(lags),
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


def choose_accept_length(fields: dict, metrics_with_prefill: float | None) -> dict:
    """The level's accept length: decode-only under the shared name (SGLang's
    /server_info convention, what sglang.bench_serving prints), the prefill-inclusive
    figure of the same source beside it; SGLang's counters first, else the streamed
    per-request counts."""
    if fields.get("accept_length_metrics") is not None:
        return {
            "accept_length": fields["accept_length_metrics"],
            "accept_length_with_prefill": metrics_with_prefill,
            "accept_length_source": "metrics delta",
        }
    if fields.get("accept_length_requests") is not None:
        return {
            "accept_length": fields["accept_length_requests"],
            "accept_length_with_prefill": fields.get("accept_length_requests_with_prefill"),
            "accept_length_source": "per-request sum",
        }
    return {"accept_length": None, "accept_length_with_prefill": None, "accept_length_source": None}


def _trio(block: dict, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    if not block or block.get("p50") is None:
        return "-"
    return "/".join(fmt.format(block[p] * scale) for p in ("p50", "p90", "p99"))


def level_table(axis: Axis = CONCURRENCY, goodput: bool = False) -> Table:
    """The sweep's table, printed a row at a time as each level finishes."""
    return Table(
        Col("rate" if axis is RATE else "conc", 5, "g"),
        Col("done", 5),
        Col("err", 4),
        Col("short", 5),
        Col("out tok/s", 10, ".1f"),
        Col("req/s", 7, ".2f"),
        Col("TTFT ms p50/90/99", 18),
        Col("TPOT ms p50/90/99", 18),
        Col("ITL ms p50/90/99", 18),
        Col("E2E s p50/90/99", 16),
        Col("tok/chunk", 9, ".2f"),
        Col("accept", 6, ".2f"),
        *([Col("goodput tok/s", 13, ".1f")] if goodput else []),
        L("status", sep="  "),
    )


def table_head(axis: Axis = CONCURRENCY, goodput: bool = False) -> str:
    return level_table(axis, goodput).header()


TABLE_HEAD = table_head()


def view(f: dict | records.Level) -> records.Level:
    """A level's fields as the typed record view the tables and notes read."""
    return records.decode(f, records.Level)


def status_text(f: dict | records.Level) -> str:
    """The status column: a level cut short by a dead server must not look like a row."""
    v = view(f)
    if v.status == "server died":
        return (
            f"SERVER DIED: cut short ({v.requests} sent, "
            f"{v.not_sent or 0} never sent, {v.completed} done)"
        )
    if v.status == "interrupted":
        return f"INTERRUPTED ({v.completed} done)"
    return v.status or "ok"


def table_row(f: dict | records.Level, concurrency: float) -> str:
    v = view(f)
    goodput = v.goodput_tok_s is not None or v.slo_attainment is not None
    return level_table(CONCURRENCY, goodput).row(
        concurrency,
        v.completed,
        v.error_count,
        v.short,
        v.output_tok_s,
        v.request_s,
        _trio(v.ttft_ms),
        _trio(v.tpot_ms, fmt="{:.1f}"),
        _trio(v.itl_ms, fmt="{:.1f}"),
        _trio(v.e2e_ms, 1e-3, "{:.2f}"),
        v.tokens_per_chunk,
        v.accept_length,
        *([v.goodput_tok_s] if goodput else []),
        status_text(v),
    )


METRIC_SOURCES = {  # vLLM's --percentile-metrics names -> a request's values (seconds)
    "ttft": lambda r: [r.ttft] if r.ttft is not None else [],
    "tpot": lambda r: [r.tpot] if r.tpot is not None else [],
    "itl": lambda r: r.itls,
    "e2el": lambda r: [r.e2e] if r.e2e is not None else [],
}


def metric_percentiles(results: list[cl.RequestResult], wanted) -> dict:
    """vLLM's --percentile-metrics x --metric-percentiles, in ms: {"ttft": {"p25": ...}}."""
    metrics, ps = wanted
    ok = [r for r in results if r.ok]
    out = {}
    for m in metrics:
        values = [v * 1e3 for r in ok for v in METRIC_SOURCES[m](r)]
        out[m] = {f"p{p:g}": float(np.percentile(values, p)) if values else None for p in ps}
    return out


def field_line(f: dict | records.Level, at: str) -> str:
    """What sglang.bench_serving prints that the table does not: ITL std/p95/max, the
    peaks, SLO attainment per goal, and vLLM's chosen percentiles."""

    def ms(x):
        return "-" if x is None else f"{x:.1f}"

    v = view(f)
    parts = [
        f"ITL ms std {ms(v.at('itl_ms', 'std'))} p95 {ms(v.at('itl_ms', 'p95'))} "
        f"max {ms(v.at('itl_ms', 'max'))}",
        f"peak {ms(v.peak_output_tok_s)} output tok/s, "
        f"peak {v.peak_concurrency or 0} requests in flight within one second",
    ]
    if (v.at("tok_s", "n") or 0) >= 2:  # one stream: its requests as repeated runs
        parts.append(
            f"one stream: tok/s mean {ms(v.at('tok_s', 'mean'))}, 95% CI "
            f"{ms(v.at('tok_s', 'ci95_low'))}..{ms(v.at('tok_s', 'ci95_high'))} over "
            f"{v.at('tok_s', 'n')} runs"
        )
    if v.slo_attainment is not None:
        each = ", ".join(
            f"{k.removesuffix('_ms')} {x * 100:.1f}%"
            for k, x in (v.slo_attainment_by_metric or {}).items()
        )
        parts.append(f"SLO attainment {v.slo_attainment * 100:.1f}% ({each})")
    for m, block in (v.metric_percentiles or {}).items():
        parts.append(f"{m.upper()} ms " + " ".join(f"{p} {ms(x)}" for p, x in block.items()))
    return f"  {at}: " + "; ".join(parts)


def level_notes(f: dict, concurrency: float, axis: Axis = CONCURRENCY) -> list[str]:
    notes = []
    at = axis.tag(concurrency)
    v = view(f)
    if v.errors:
        shown = ", ".join(f"{n} x {k}" for k, n in sorted(v.errors.items()))
        example = f"; e.g. {v.error_examples[0]}" if v.error_examples else ""
        notes.append(f"{at}: {v.error_count} failed request(s): {shown}{example}")
    if v.short:
        example = f", e.g. {v.short_examples[0]}" if v.short_examples else ""
        notes.append(f"{at}: {v.short} request(s) came back short{example}")
    if v.malformed_chunks:
        notes.append(f"{at}: {v.malformed_chunks} malformed stream chunk(s) skipped")
    if v.tokens_estimated:
        notes.append(
            f"{at}: {v.tokens_estimated} request(s) had no usage chunk: tokens counted as chunks"
        )
    if (v.client_busy or 0) > CLIENT_BUSY and (v.duration_s or 0) > 1:
        notes.append(
            f"{at}: this client used {v.client_busy * 100:.0f}% of a CPU "
            f"core: it may be what limits the figures (a busier host, or more streams "
            f"than one core can drive)"
        )
    notes += late_send_notes(v, at)
    closed = "request_rate" not in f  # a burst's request_rate is null, yet it is open loop
    if v.duration_target_s and v.steady_state_note and closed:
        notes.append(f"{at}: {v.steady_state_note}")
    if v.other_traffic:
        notes.append(f"{at}: {v.other_traffic}")
    return notes


def late_send_notes(f: dict | records.Level, at: str) -> list[str]:
    """Open loop: sends that went out late, blamed on the client only when it was the
    cause (busy CLIENT_LATE_BUSY of a core or more). A lag with the client idle is the
    host's (other processes) and stays in the record (send_lag_ms) without a warning.
    Over few sends the p99 is their maximum: the note says how many."""
    v = view(f)
    lag, busy = v.at("send_lag_ms", "p99"), v.client_busy
    if lag is None or lag <= LATE_SEND_MS or busy is None or busy < CLIENT_LATE_BUSY:
        return []
    sends = v.arrivals or v.requests or 0
    of = f"p99 of {sends} sends" if sends >= 100 else f"the latest of {sends} sends"
    return [
        f"{at}: sends went out up to {lag:.0f} ms ({of}) after their scheduled arrival, "
        f"with this client {busy * 100:.0f}% busy: the client could not keep this rate"
    ]


def level_key(value: float, open_loop: OpenLoop | None, n: int | None = None) -> dict:
    """The record fields naming a level. A burst (rate inf) has no rate a JSON number
    can hold: it is recorded as arrival "burst", request_rate null, and its concurrency
    is what it kept in flight (--max-concurrency, else all `n` of its requests)."""
    if open_loop is None:
        return {"concurrency": value}
    shape = {
        "arrival": open_loop.arrival_at(value),
        "burstiness": open_loop.shape if value != math.inf else None,
        "max_concurrency": open_loop.max_concurrency,
    }
    if value == math.inf:
        return {"concurrency": open_loop.max_concurrency or n, "request_rate": None, **shape}
    return {"concurrency": None, "request_rate": value, **shape}


def describe_levels(
    levels: list[float], open_loop: OpenLoop | None, closed_duration: float | None = None
) -> str:
    text = ",".join(f"{v:g}" for v in levels)
    if open_loop is not None and open_loop.times is not None:
        t = open_loop.times
        pace = "own times" if open_loop.speed == 1 else f"times x{open_loop.speed:g} speed"
        return (
            f"trace replay: {len(t)} request(s) at the trace's {pace} over "
            f"{t[-1] - t[0]:.1f} s (mean {text} req/s)"
        )
    if open_loop is None:
        span = f", {closed_duration:g} s each" if closed_duration else ""
        return f"concurrency {text} (closed loop{span})"
    how = (
        "constant arrivals"
        if open_loop.arrival == "constant"
        else "Poisson arrivals"
        if open_loop.burstiness == 1
        else f"gamma arrivals, burstiness {open_loop.burstiness:g}"
    )
    if open_loop.ramp is not None:
        how = f"{open_loop.arrival_at(levels[-1])} over the level's requests"
    if levels and levels[-1] == math.inf:
        how = "inf = a burst, every request at once" + (f"; {how}" if len(levels) > 1 else "")
    cap = f", at most {open_loop.max_concurrency} in flight" if open_loop.max_concurrency else ""
    span = f", {open_loop.duration:g} s each" if open_loop.duration else ""
    return f"request rates {text} req/s (open loop, {how}{cap}{span})"


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
        head = table_head(axis, goodput=slo.set or derive_slo)
        console.out(head if not arm else f"[{arm}]\n{head}")
    for c in sorted(levels):
        if c == math.inf:  # a burst: --num-prompts, else enough for a steady state
            cap = open_loop.max_concurrency if open_loop else None
            n = num_prompts or per_concurrency * (cap or BURST_LEVEL) or BURST_LEVEL
        elif open_loop is not None and open_loop.ramp is not None:  # vLLM's: --num-prompts
            n = num_prompts or per_level_prompts(0, per_concurrency, math.ceil(c))
        else:
            n = per_level_prompts(num_prompts, per_concurrency, math.ceil(c))
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
