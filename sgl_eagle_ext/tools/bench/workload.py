"""The workload options of `bench sweep` (and the commands built on it) in one place.

    --dataset shipped|random|long|sharegpt:FILE|shared-prefix:N|trace:FILE|hf:PATH
                                                  what the requests say (datasets.py)
    --input-len N | LOW:HIGH | dataset            prompt tokens (lengths.py, tokens.py)
    --output-len N | LOW:HIGH | dataset           tokens asked per request
    --long-text FILE                              source text of random/long prompts
    --multi-turn [--max-turns K]                  replay ShareGPT conversations
    --save-requests FILE                          per-request records (request_log.py)

`WorkloadOptions` declares these flags and holds them as given; the
lengths and the dataset's rules are checked where the workload is built.

`WorkloadSet` stands where the sweep takes a PromptSet: `take(n, seed)` gives the
first n requests of one seeded order (the same for every level and arm), built
lazily and kept, so long prompts are fitted once. With --multi-turn it also runs a
level itself (conversations instead of independent requests).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.cli_args import integer, number
from sgl_eagle_ext.common.declared_flags import add_flags, flag
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import (
    datasets,
    loads,
    multiturn,
    options,
    prompts,
    request_log,
    tokens,
)
from sgl_eagle_ext.tools.bench.lengths import LengthSpec
from sgl_eagle_ext.tools.bench.levels import above, load_levels

DEFAULT = "shipped"


def add_options(p: argparse.ArgumentParser) -> None:
    add_flags(p, WorkloadOptions, group="workload")


def _dataset(_name: str, text: str) -> str:
    # the form now, before any server is asked; its rules when the workload is built
    if text:
        datasets.parse_spec(text)
    return text


@dataclass(frozen=True)
class WorkloadOptions:
    """The workload flags (common/declared_flags.py: each field is its flag)."""

    dataset: str = flag(
        "--dataset",
        default=DEFAULT,
        check=_dataset,
        help="shipped (the --prompts set, default), random, long (1k..64k-token prompts "
        "from shipped text or --long-text), sharegpt:FILE (.json list or .jsonl), "
        "shared-prefix:N (one N-token system prompt on every request), trace:FILE "
        "(Mooncake .jsonl or BurstGPT .csv: replayed at its timestamps unless --concurrency "
        "or --request-rate is given) or hf:PATH (a Hugging Face save_to_disk folder or "
        ".parquet on disk)",
    )
    input_len: str | None = flag(  # as given (LengthSpec parses it)
        "--input-len",
        help="prompt tokens: N, LOW:HIGH (uniform per request) or 'dataset' (default); "
        "checked against the server's usage",
    )
    output_len: str | None = flag(
        "--output-len",
        help="tokens per request: N, LOW:HIGH or 'dataset' (ShareGPT: its reply's length; "
        "default: --max-tokens)",
    )
    long_text: str | None = flag(
        "--long-text", help="plain-text file the random/long prompts are cut from"
    )
    trace_speed: float = flag(
        "--trace-speed",
        default=1.0,
        type=number(0),  # 0 refused by its check, which says why
        check=above(0),
        metavar="X",
        help="replay a trace's timestamps X times faster (default 1; 0.5: half the rate). "
        "sglang.bench_serving's --mooncake-slowdown-factor is its inverse",
    )
    multi_turn: bool = flag(
        "--multi-turn",
        default=False,
        action="store_true",
        help="replay ShareGPT conversations turn by turn with a growing context "
        "(the server's own answers kept); a level's concurrency = conversations in flight",
    )
    max_turns: int = flag(
        "--max-turns", default=0, type=integer(), help="turns per conversation (0: all)"
    )
    save_requests: str | None = flag(
        "--save-requests",
        metavar="FILE",
        help="append one JSON line per request (TTFT, ITLs, E2E, tokens, accept length) "
        "for `bench goodput` / `bench speculation` / `bench report`",
    )

    def wanted(self) -> bool:
        """Whether any workload option differs from the shipped prompt set at --max-tokens."""
        return (
            self.dataset != DEFAULT
            or bool(self.input_len)
            or bool(self.output_len)
            or self.multi_turn
        )


class WorkloadSet:
    def __init__(self, opts: WorkloadOptions, default_output: int, *, seed: int, prompt_set: str):
        self.kind, self.path = datasets.parse_spec(opts.dataset)
        self.input_len = LengthSpec.parse(opts.input_len, "--input-len")
        self.output_len = LengthSpec.parse(opts.output_len, "--output-len")
        self.multi_turn = opts.multi_turn
        if self.multi_turn and self.kind not in datasets.CONVERSATIONS:
            raise UserError(
                "--multi-turn replays conversations: it needs --dataset sharegpt:FILE or hf:PATH.",
                fix="add --dataset sharegpt:FILE, or drop --multi-turn",
            )
        if self.kind == datasets.TRACE and not self.input_len.own:
            raise UserError(
                "--dataset trace: each request has the trace's own input length.",
                fix="drop --input-len",
            )
        if self.multi_turn and not self.input_len.own:
            raise UserError(
                "--multi-turn keeps each conversation's own text: --input-len does not apply.",
                fix="drop --input-len",
            )
        if opts.max_turns < 0:
            raise UserError("--max-turns must be >= 0.", fix="e.g. --max-turns 4")
        self.max_turns = opts.max_turns
        self.seed = seed
        self.default_output = default_output
        self.prompt_set = prompt_set
        self.long_text = opts.long_text
        self.paragraphs = (
            tokens.file_paragraphs(self.long_text)
            if self.long_text
            else tokens.shipped_paragraphs()
        )
        self.attach(None)  # a bad dataset fails here, before any server is asked

    def attach(self, server) -> None:
        """Count tokens as `server` does (None: estimate). `bench ab`/`compare` check the
        dataset before any server starts, then attach the first arm's server."""
        self.server = server
        self.counter = server.token_counter() if server is not None else tokens.Counter()
        self.builder = tokens.PromptBuilder(self.paragraphs, self.counter, self.seed)
        self._built: datasets.Workload | None = None
        probe = self._build(1)  # fails early on a bad dataset file; fitted by this counter
        self.name, self.sha256 = probe.name, probe.sha256
        self.count = probe.source_count  # for provenance

    def _build(self, n: int) -> datasets.Workload:
        return datasets.build(
            self.kind,
            self.path,
            n,
            input_len=self.input_len,
            output_len=self.output_len,
            default_output=self.default_output,
            counter=self.counter,
            seed=self.seed,
            prompt_set=self.prompt_set,
            builder=self.builder,
        )

    def take(self, n: int, seed: int, offset: int = 0) -> list[datasets.WorkRequest]:
        need = offset + n
        if self._built is None or len(self._built.requests) < need:
            self._built = self._build(need)
        return self._built.requests[offset:need]

    def facts(self) -> dict:
        own_replies = self.kind in (*datasets.CONVERSATIONS, datasets.TRACE)
        return {
            "dataset": self.kind if not self.path else f"{self.kind}:{self.path}",
            "input_len": self.input_len.as_record(),
            # what each request asked for: the spec, the dataset's own, else --max-tokens
            "output_len": (
                self.output_len.as_record()
                if not self.output_len.own or own_replies
                else str(self.default_output)
            ),
            "multi_turn": self.multi_turn,
            "max_turns": self.max_turns or None,
            "token_counter": self.counter.name,
            "long_text": self.long_text,
        }

    def describe(self) -> str:
        text = (
            f"dataset {self.name}; input length {self.input_len.describe()}, output length "
            f"{self.output_len.describe()}"
        )
        if self.multi_turn:
            text += (
                f"; multi-turn replay{f' (up to {self.max_turns} turns)' if self.max_turns else ''}"
            )
        return text + f"; tokens counted by {self.counter.name}"

    # --multi-turn: the sweep asks the workload to run a level
    def runner(self):
        return self.run_requests if self.multi_turn else None

    async def run_requests(self, client, n, concurrency, load, console, desc):
        firsts = self.take(n, self.seed)
        conversations = [  # a conversation replayed twice is two conversations: own ids
            datasets.Conversation(q.id, c.turns[: self.max_turns or None], c.system)
            for q, c in zip(firsts, self._built.conversations)
        ]
        turn_lens = multiturn.plan_turns(
            conversations, self.output_len, self.counter, self.default_output, self.seed
        )
        bar = console.bar(sum(len(t) for t in turn_lens), desc)
        try:
            results, meta, took, interrupted = await multiturn.replay(
                client,
                conversations,
                turn_lens,
                concurrency,
                temperature=load.temperature,
                ignore_eos=load.ignore_eos,
                bar=bar,
            )
        finally:
            bar.close()
        self.last_meta = meta
        return results, took, interrupted


def trace_replay(
    sweep: options.SweepOptions, speed: float, wl: WorkloadSet | None, levels, open_loop
):
    """--dataset trace:FILE without --concurrency/--request-rate: one open-loop level
    at the trace's own arrival times (sglang.bench_serving --use-trace-timestamps), its
    value the trace's mean rate, replayed `speed` (--trace-speed) times faster.
    Otherwise the levels as given."""
    if wl is None or wl.kind != datasets.TRACE:
        return levels, open_loop
    if sweep.concurrency is not None or sweep.request_rate:
        return levels, open_loop  # the trace's lengths, the load given
    from sgl_eagle_ext.tools.bench import loads

    duration = sweep.duration
    times = datasets.trace_times(wl.path)
    if sweep.num_prompts:
        times = times[: sweep.num_prompts]
    times = [t / speed for t in times]  # --duration counts replayed time
    if duration is not None:
        times = [t for t in times if t < duration]
    if not times:
        raise UserError(
            f"--dataset trace:{wl.path}: no request within --duration {duration:g} s.",
            fix="give a longer --duration",
        )
    span = times[-1] - times[0]
    rate = (len(times) - 1) / span if span > 0 else float("inf")
    return [rate], loads.OpenLoop(1.0, duration, "trace", None, times, speed=speed)


def plan(
    sweep: options.SweepOptions,
    work: WorkloadOptions,
    req: options.RequestOptions,
    results: Path | None,
):
    """What a sweep run sends, checked before any server is asked (the workload is
    attached to the server later): the levels, the prompt set, the workload of
    --dataset/--input-len/... (None without one), a trace replayed at its own times; and
    --save-requests writable and not the results file (None: --no-records).
    Returns (levels, open_loop, prompt set, workload)."""
    if work.save_requests:
        request_log.check_writable(Path(work.save_requests), results)
    levels, open_loop = load_levels(sweep)
    ps = prompts.load(req.prompts)
    wl = None
    if work.wanted():
        wl = WorkloadSet(work, req.max_tokens, seed=req.seed, prompt_set=req.prompts)
    if wl is not None and wl.multi_turn and (open_loop is not None or sweep.duration is not None):
        raise UserError(
            "--multi-turn replays conversations in closed loop, a request count each.",
            fix="use --concurrency (and --num-prompts) with --multi-turn, no --duration",
        )
    levels, open_loop = trace_replay(sweep, work.trace_speed, wl, levels, open_loop)
    return levels, open_loop, ps, wl


class LevelHook:
    """After each level: the per-request lines (--save-requests) and the check of the
    prompt tokens the server counted against the lengths asked for."""

    def __init__(
        self, path: str | None, workload: WorkloadSet | None, common: dict, console, open_loop
    ):
        self.open_loop = open_loop  # the level's record key: a concurrency or a rate
        self.log = request_log.RequestLog(path)
        self.workload = workload
        self.common = common
        self.console = console

    def __call__(self, level) -> None:
        results = level.results
        targets: dict[int, int | None] = {}  # by request index (its place in the level)
        if self.workload is not None and not self.workload.multi_turn:
            sent = self.workload.take(max((r.index for r in results), default=-1) + 1, 0)
            targets = {i: q.input_len for i, q in enumerate(sent)}
        pairs = [
            (targets[r.index], r.prompt_tokens)
            for r in results
            if r.ok and r.prompt_tokens and targets.get(r.index)
        ]
        if pairs:
            check = tokens.check_against_usage(pairs)
            level.fields["input_tokens_check"] = check
            if not check["ok"]:
                axis = loads.RATE if self.open_loop else loads.CONCURRENCY
                self.console.warn(
                    f"{axis.tag(level.concurrency)}: the server counted prompts "
                    f"{check['worst_relative_error'] * 100:+.0f}% off the --input-len asked "
                    f"for (tokens counted by {self.workload.counter.name})"
                )
        if self.log.path is None or not results:
            return
        per = []
        meta = getattr(self.workload, "last_meta", None) if self.workload else None
        for k, r in enumerate(results):
            extra = {"input_len_target": targets.get(r.index), "output_len_target": r.max_tokens}
            if meta and self.workload.multi_turn and k < len(meta):
                extra.update(meta[k])
            per.append(extra)
        start = min((r.start for r in results if r.start), default=0.0)
        self.log.write_level(
            results,
            start,
            level.duration,
            {**self.common, **loads.level_key(level.concurrency, self.open_loop)},
            per,
        )
