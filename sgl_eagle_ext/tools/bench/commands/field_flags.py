"""The field's flag names: sglang.bench_serving 0.5.23 and `vllm bench serve`, in one table.

Every row is one of the field's flags: what it becomes here and how its meaning or default
differs; tests/test_bench_field_flags.py reads an example of each with both parsers
(bench_serving's own, in a subprocess of the SGLang venv, and ours). `register`
adds the rows that take arguments to `bench sweep`'s parser (and the refusals to every
command with a server), `read` turns what was given into our own flags before the
option groups read them, and `markdown` is the table docs/bench-serving.md holds.

Three kinds of row: SAME (our parser has the name already, meaning the same), ALIAS
(the field's name, read into ours) and REFUSED (the field means something we do not
do: the message says what the field means and what to use).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common.cli_args import integer, number, port_number
from sgl_eagle_ext.common.errors import UserError

SG, VL = "sglang.bench_serving", "vllm bench serve"
SAME, ALIAS, REFUSED = "same", "alias", "refused"

# --backend: bench_serving's (and vLLM's) backend names -> our --endpoint
BACKENDS = {
    "sglang": "generate",
    "sglang-native": "generate",
    "sglang-oai": "completions",
    "sglang-oai-chat": "chat",
    "vllm": "completions",
    "vllm-chat": "chat",
    "lmdeploy": "completions",
    "lmdeploy-chat": "chat",
    "openai": "completions",
    "openai-chat": "chat",
}
# --endpoint: vLLM's API paths -> our names (which stay accepted)
ENDPOINT_PATHS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/generate": "generate",
}
# bench_serving's default port per backend when --host/--port name the server
PORTS = {"vllm": 8000, "vllm-chat": 8000}
DEFAULT_PORT = 30000
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True)
class Row:
    field: str  # the field's spelling, as the docs table shows it
    tools: tuple[str, ...]  # who has the flag
    ours: str  # what it is here
    kind: str = ALIAS
    note: str = ""  # how the meaning or default differs ("": the same)
    # the flags we register for it (argparse kwargs), dest "field_<name>"
    args: dict = field(default_factory=dict)


def _int(name: str, low: int = 0):
    return {name: {"type": integer(low), "metavar": "N"}}


# fmt: off
ROWS = (
    Row("--backend B", (SG, VL), "--endpoint (chat, completions, generate)",
        note="sglang/sglang-native: /generate; *-oai, vllm, lmdeploy, openai: /v1/completions; "
        "*-chat: /v1/chat/completions; embedding, trt, gserver, truss refused. Its default "
        "is sglang (/generate), ours chat. Names the records' arm unless --label (vLLM's "
        "--label default)",
        args={"--backend": {"metavar": "B"}}),
    Row("--base-url U", (SG, VL), "--url U", args={"--base-url": {"metavar": "URL"}}),
    Row("--host H --port P", (SG, VL), "--url http://H:P",
        note="host default here 127.0.0.1 (theirs 0.0.0.0, the same machine); port default "
        "30000 (8000 for the vllm backends, as bench_serving)",
        args={"--host": {"metavar": "H"}, "--port": {"type": port_number, "metavar": "P"}}),
    Row("--model M", (SG, VL), "the model name sent in every request",
        note="default: the server's own (/v1/models), as theirs; the tokenizer is --tokenizer",
        args={"--model": {"metavar": "M"}}),
    Row("--tokenizer T", (SG, VL), "counts the prompts' input tokens",
        note="a tokenizer directory on this host (nothing is downloaded); default: the "
        "server's tokenizer (its directory here, else /v1/tokenize)",
        args={"--tokenizer": {"metavar": "DIR"}}),
    Row("--dataset-name random", (SG, VL), "--dataset random",
        note="the prompts are text fitted to each length, not random token ids; "
        "--dataset-path (their ShareGPT source of token ids) is not needed",
        args={"--dataset-name": {"metavar": "NAME"}, "--dataset-path": {"metavar": "PATH"}}),
    Row("--random-input-len I --random-output-len O", (SG, VL), "--input-len I --output-len O",
        note="with --dataset-name random only; their default 1024 each",
        args={**_int("--random-input-len", 1), **_int("--random-output-len", 1)}),
    Row("--random-range-ratio R", (SG, VL), "--input-len max(1,int(I*R)):I (and output)",
        note="bench_serving's formula: its default 0 draws each length from 1..N "
        "(--input-len 1:N), 1 is fixed lengths. vLLM's R means I(1-R)..I(1+R), its default "
        "0 fixed lengths: from vLLM give R 1 (or --input-len I)",
        args={"--random-range-ratio": {"type": number(0, maximum=1), "metavar": "R"}}),
    Row("--dataset-name sharegpt --dataset-path F", (SG, VL), "--dataset sharegpt:F",
        note="a file on this host (nothing is downloaded). Both shuffle with the seed "
        "(different orders); theirs drops prompts or replies under 2 tokens (and over "
        "--sharegpt-context-len), ours keeps every conversation and repeats them to fill "
        "--num-prompts"),
    Row("--sharegpt-output-len N", (SG,), "--output-len N",
        args=_int("--sharegpt-output-len")),
    Row("--dataset-name mooncake --dataset-path F", (SG,), "--dataset trace:F",
        note="with --use-trace-timestamps at the trace's times (our default for a trace); "
        "without, at --request-rate (theirs: inf, all at once). The prompts: ours fitted "
        "text of each row's input_length, theirs built from hash_ids",
        args={"--use-trace-timestamps": {"action": "store_true"}}),
    Row("--mooncake-slowdown-factor K", (SG,), "--trace-speed 1/K",
        args={"--mooncake-slowdown-factor": {"type": number(0, strict=True), "metavar": "K"}}),
    Row("--dataset-name generated-shared-prefix", (SG,), "(refused)", REFUSED,
        note="theirs is 64 groups of 16 prompts, each group its own system prompt; our "
        "--dataset shared-prefix:N puts one N-token prefix on every request"),
    Row("--num-warmups N / --warmup-requests N", (VL, SG), "--warmup N",
        note="ours at full length, distinct prompts; bench_serving repeats its first prompt "
        "at min(its output, 32) tokens",
        args={**_int("--num-warmups"), **_int("--warmup-requests")}),
    Row("--output-file F", (SG,), "--results F",
        note="ours appends a JSON line per level (and a CSV beside it), theirs one per run",
        args={"--output-file": {"metavar": "FILE"}}),
    Row("--disable-tqdm", (SG, VL), "no progress bars (the results and notes still print)",
        args={"--disable-tqdm": {"action": "store_true"}}),
    Row("--disable-stream", (SG,), "--disable-stream: one JSON answer per request", SAME,
        note="TTFT is then the whole request, and there is no ITL"),
    Row("--no-stream", (VL,), "(refused)", REFUSED,
        note="vLLM's --no-stream loads a Hugging Face dataset without streaming it; for one "
        "JSON answer per request use --disable-stream (sglang.bench_serving's name)"),
    Row("--disable-ignore-eos", (SG,), "--respect-eos",
        args={"--disable-ignore-eos": {"action": "store_true"}}),
    Row("--extra-request-body J", (SG,), "--extra-body J (vLLM's name)",
        args={"--extra-request-body": {"metavar": "JSON"}}),
    Row("--flush-cache", (SG,), "the default: the prefix cache is flushed before every level",
        note="theirs flushes once after the warm-up, only when asked (or in SGLang's CI); "
        "--no-flush-cache keeps it here",
        args={"--flush-cache": {"action": "store_true"}}),
    Row("--percentile-metrics M --metric-percentiles P", (VL,),
        "those percentiles of those metrics, printed per level and recorded "
        "(metric_percentiles)",
        note="vLLM's defaults ttft,tpot,itl and 99; without them ours prints p50/p90/p99",
        args={"--percentile-metrics": {"metavar": "M,..."},
              "--metric-percentiles": {"metavar": "P,..."}}),
    Row("--ready-check-timeout-sec S", (SG, VL), "wait up to S s for the server (0: ask once)",
        note="their default waits (bench_serving 60 s); ours asks once unless given",
        args=_int("--ready-check-timeout-sec")),
    Row("--ramp-up-strategy {linear,exponential} --ramp-up-start-rps A --ramp-up-end-rps B",
        (VL,), "one open-loop level whose rate goes from A to B req/s over its requests",
        note="vLLM's formula (request i of n at A+(B-A)i/(n-1), or A(B/A)^(i/(n-1))); "
        "not with --request-rate or --duration",
        args={"--ramp-up-strategy": {"choices": ("linear", "exponential")},
              "--ramp-up-start-rps": {"type": number(0, strict=True), "metavar": "A"},
              "--ramp-up-end-rps": {"type": number(0, strict=True), "metavar": "B"}}),
    # the names our parser has already
    Row("--request-rate R", (SG, VL), "--request-rate R", SAME,
        note="a list 1,2,4 sweeps; default here a closed-loop sweep (theirs inf)"),
    Row("--max-concurrency N", (SG, VL), "--max-concurrency N", SAME,
        note="alone: --request-rate inf --max-concurrency N (theirs), exactly --num-prompts "
        "requests at most N in flight; with --duration: --concurrency N"),
    Row("--num-prompts N", (SG, VL), "--num-prompts N", SAME,
        note="per level; a closed-loop level sends at least 5 x concurrency unless "
        "--prompts-per-concurrency 0 (their default 1000)"),
    Row("--seed S", (SG, VL), "--seed S", SAME, note="default 0 (bench_serving 42, vLLM 0)"),
    Row("--temperature T", (SG, VL), "--temperature T", SAME,
        note="default 0, sent on every request as bench_serving; vLLM sends none unless "
        "given (the server's default applies)"),
    Row("--header K=V K2=V2", (SG, VL), "--header K=V K2=V2", SAME,
        note="'K: V' too, or the flag repeated"),
    Row("--goodput ttft:500 tpot:50 e2el:900", (SG, VL), "--goodput (or --slo ttft=500,...)",
        SAME, note="keys ttft, tpot, e2el (e2e), itl; prints the attainment per metric as theirs"),
    Row("--burstiness B", (VL,), "--burstiness B", SAME,
        note="inf: even gaps (--arrival constant)"),
    Row("--endpoint PATH", (VL,), "--endpoint PATH or chat, completions, generate", SAME,
        note="vLLM's paths /v1/chat/completions, /v1/completions, /generate; our names too"),
    Row("--label L", (VL,), "--label L: the arm name in the records and plots", SAME,
        note="vLLM's labels the result file, defaulting to --backend: so does ours"),
)

# Defaults that differ: (what, theirs, ours); tests/test_bench_field_flags.py reads both
# parsers with no flags
DEFAULTS = (
    ("load", "inf (all at once), --num-prompts 1000",
     "a closed-loop sweep, concurrency 1,2,5,10,30,70,100,250, 5 x concurrency prompts each"),
    ("seed", "42 (vLLM 0)", "0"),
    ("warm-up", "1 request, its first prompt at min(output, 32) tokens (vLLM 0)",
     "2 full-length requests, distinct prompts"),
    ("prefix cache", "kept (flushed once after the warm-up with --flush-cache)",
     "flushed before every level"),
    ("dataset", "sharegpt, downloaded; random: 1024/1024 tokens, range ratio 0",
     "the shipped prompts; nothing is downloaded"),
    ("request", "backend sglang: /generate (vLLM: /v1/completions), temperature 0",
     "/v1/chat/completions, 256 tokens, EOS ignored, temperature 0"),
)
# fmt: on


def _dest(flag: str) -> str:
    return "field_" + flag.lstrip("-").replace("-", "_")


def register(p: argparse.ArgumentParser) -> None:
    """The field's flags on `bench sweep`'s parser, read by read()."""
    g = p.add_argument_group(f"{SG} / {VL} names (docs/bench-serving.md)")
    for row in ROWS:
        for flag, kw in row.args.items():
            how = f"{row.ours}" + (f"; {row.note}" if row.note else "")
            g.add_argument(flag, dest=_dest(flag), help=f"as {row.field}: {how}", **kw)
    p.set_defaults(field_flags=True)


def register_refusals(p: argparse.ArgumentParser) -> None:
    """The field's flags that mean something else here: one clear refusal each."""
    for row in ROWS:
        if row.kind == REFUSED and " " not in row.field:  # a bare flag (--no-stream)
            p.add_argument(
                row.field,
                dest=_dest(row.field),
                nargs=0,
                action=_Refuse,
                help=argparse.SUPPRESS,
                default=None,
            )


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        refuse(option_string)


def refuse(flag: str, value: str = "") -> None:
    row = next(r for r in ROWS if r.kind == REFUSED and r.field.split() in ([flag], [flag, value]))
    raise UserError(f"{row.field}: {row.note}.", fix="see docs/bench-serving.md")


# the field's flags that are one of ours by another name: (theirs, our dest, ours)
RENAMED = (
    ("--num-warmups", "warmup", "--warmup"),
    ("--warmup-requests", "warmup", "--warmup"),
    ("--output-file", "results", "--results"),
    ("--disable-ignore-eos", "respect_eos", "--respect-eos"),
    ("--extra-request-body", "extra_body", "--extra-body"),
    ("--flush-cache", "flush_cache", "--no-flush-cache"),
)


def _read_flag(args, flag: str):
    return getattr(args, _dest(flag), None)


def read(args: argparse.Namespace, defaults: dict) -> None:
    """Turn the field's flags given on `bench sweep` into ours (in place)."""
    if not getattr(args, "field_flags", False):
        return

    def put(dest, value, flag, ours):
        """Set our option from the field's flag; both given and disagreeing is an error."""
        have = getattr(args, dest, defaults.get(dest))
        if have != defaults.get(dest) and have != value:
            raise UserError(
                f"{flag} and {ours} disagree ({have!r} vs {value!r}).",
                fix=f"give one of them ({flag} is {ours} here)",
            )
        setattr(args, dest, value)

    backend = _read_flag(args, "--backend")
    if backend is not None:
        if backend not in BACKENDS:
            raise UserError(
                f"--backend {backend}: this tool sends SGLang's /generate or the OpenAI "
                f"chat or completions requests.",
                fix=f"use one of {', '.join(BACKENDS)} (or --endpoint)",
            )
        put("endpoint", BACKENDS[backend], "--backend", "--endpoint")
        if not args.label:  # vLLM's --label defaults to the backend
            args.label = backend
    _read_url(args, put, backend)
    for flag, dest, ours in RENAMED:
        value = _read_flag(args, flag)
        if value is not None and value is not False:  # a store_true flag not given: False
            put(dest, value, flag, ours)
    _read_dataset(args, put)
    _read_load(args, put)
    args.metric_percentiles = _read_percentiles(args)
    args.model = _read_flag(args, "--model")
    args.tokenizer = _read_flag(args, "--tokenizer")
    if args.tokenizer is not None and not Path(args.tokenizer).is_dir():
        raise UserError(
            f"--tokenizer {args.tokenizer}: not a directory on this host (this "
            "tool downloads nothing).",
            fix="give the tokenizer's directory, or drop --tokenizer (the "
            "server's own tokenizer counts)",
        )
    args.ready_timeout = _read_flag(args, "--ready-check-timeout-sec") or 0
    args.disable_tqdm = bool(_read_flag(args, "--disable-tqdm"))


def _read_url(args, put, backend) -> None:
    base, host, port = (_read_flag(args, f) for f in ("--base-url", "--host", "--port"))
    if base is not None and (host is not None or port is not None):
        raise UserError(
            "--base-url with --host/--port: one names the server.",
            fix="give --base-url URL, or --host H --port P",
        )
    if host is not None or port is not None:
        port = port if port is not None else PORTS.get(backend, DEFAULT_PORT)
        base = f"http://{host or '127.0.0.1'}:{port}"
    if base is not None:
        put(
            "url", base, "--base-url" if host is None and port is None else "--host/--port", "--url"
        )


def _lens(full: int, ratio: float) -> str:
    low = max(int(full * ratio), 1)  # bench_serving's compute_random_lens
    return str(full) if low == full else f"{low}:{full}"


def _read_dataset(args, put) -> None:
    name, path = _read_flag(args, "--dataset-name"), _read_flag(args, "--dataset-path")
    lens = {
        f: _read_flag(args, f)
        for f in ("--random-input-len", "--random-output-len", "--random-range-ratio")
    }
    if name is None and path is not None:
        name = "sharegpt"  # their default dataset
    if name is None:
        given = [f for f, v in lens.items() if v is not None]
        given += [
            f for f in ("--sharegpt-output-len", "--use-trace-timestamps") if _read_flag(args, f)
        ]
        if given:
            raise UserError(
                f"{given[0]} shapes a --dataset-name's requests; none was given.",
                fix="add --dataset-name random (or sharegpt/mooncake "
                "--dataset-path F), or use --dataset",
            )
        return
    if name == "generated-shared-prefix":
        refuse("--dataset-name", name)
    if name == "random":
        ratio = lens["--random-range-ratio"] or 0.0
        put("dataset", "random", "--dataset-name", "--dataset")
        for io in ("input", "output"):
            theirs = f"--random-{io}-len"
            put(f"{io}_len", _lens(lens[theirs] or 1024, ratio), theirs, f"--{io}-len")
        return
    stray = [f for f, v in lens.items() if v is not None]
    if stray:
        raise UserError(f"{stray[0]}: for --dataset-name random only.", fix=f"drop {stray[0]}")
    if name not in ("sharegpt", "mooncake"):
        raise UserError(
            f"--dataset-name {name}: not one this tool reads under that name.",
            fix="--dataset-name random, sharegpt or mooncake (with --dataset-path F), or our "
            "--dataset (long, shared-prefix:N, hf:PATH)",
        )
    if not path:
        raise UserError(
            f"--dataset-name {name} needs --dataset-path FILE (nothing is downloaded).",
            fix=f"--dataset-name {name} --dataset-path FILE",
        )
    kind = "sharegpt" if name == "sharegpt" else "trace"
    put("dataset", f"{kind}:{path}", "--dataset-name", "--dataset")
    out = _read_flag(args, "--sharegpt-output-len")
    if out is not None:
        put("output_len", str(out), "--sharegpt-output-len", "--output-len")
    timed = _read_flag(args, "--use-trace-timestamps")
    if name == "mooncake" and not timed and not args.concurrency:
        args.request_rate = args.request_rate or "inf"  # theirs: --request-rate (default inf)


def _read_load(args, put) -> None:
    factor = _read_flag(args, "--mooncake-slowdown-factor")
    if factor is not None:
        put("trace_speed", 1.0 / factor, "--mooncake-slowdown-factor", "--trace-speed")
    strategy = _read_flag(args, "--ramp-up-strategy")
    start, end = _read_flag(args, "--ramp-up-start-rps"), _read_flag(args, "--ramp-up-end-rps")
    args.ramp_up = None
    if strategy is None and (start is not None or end is not None):
        raise UserError(
            "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy.",
            fix="add --ramp-up-strategy linear (or exponential)",
        )
    if strategy is not None:
        if start is None or end is None:
            raise UserError(
                f"--ramp-up-strategy {strategy} needs --ramp-up-start-rps A and "
                "--ramp-up-end-rps B, both > 0.",
                fix="e.g. --ramp-up-start-rps 1 --ramp-up-end-rps 8",
            )
        if args.request_rate or args.concurrency or args.duration:
            raise UserError(
                "--ramp-up-strategy sets the request rate of one level itself (as in vLLM).",
                fix="drop --request-rate/--concurrency/--duration",
            )
        args.ramp_up = (strategy, float(start), float(end))
        args.request_rate = f"{end:g}"
    # bench_serving's --max-concurrency alone: every request at once, at most N in flight
    if args.max_concurrency is not None and not args.request_rate:
        if args.concurrency is None and args.duration is not None:
            args.concurrency, args.max_concurrency = str(args.max_concurrency), None
        elif args.concurrency is None:
            args.request_rate = "inf"


def _read_percentiles(args) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    metrics, pcts = (
        _read_flag(args, "--percentile-metrics"),
        _read_flag(args, "--metric-percentiles"),
    )
    if metrics is None and pcts is None:
        return None
    names = tuple(m.strip() for m in (metrics or "ttft,tpot,itl").split(",") if m.strip())
    bad = [m for m in names if m not in PERCENTILE_METRICS]
    if bad or not names:
        raise UserError(
            f"--percentile-metrics {metrics}: unknown metric {bad[0] if bad else ''}.",
            fix=f"a comma-separated list of {', '.join(PERCENTILE_METRICS)}",
        )
    try:
        ps = tuple(float(p) for p in (pcts or "99").split(",") if p.strip())
    except ValueError:
        ps = ()
    if not ps or not all(0 < p < 100 for p in ps):
        raise UserError(
            f"--metric-percentiles {pcts}: numbers between 0 and 100.",
            fix="e.g. --metric-percentiles 25,50,99",
        )
    return names, ps


def endpoint(text: str) -> str:
    """--endpoint: our name, or vLLM's API path."""
    from sgl_eagle_ext.tools.bench import client as cl

    name = ENDPOINT_PATHS.get(text.rstrip("/") or text, text)
    if name not in cl.ENDPOINTS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use chat, completions or generate, or vLLM's path "
            f"({', '.join(ENDPOINT_PATHS)})"
        )
    return name


def markdown() -> str:
    """The table docs/bench-serving.md holds (a test checks they are the same)."""
    out = [f"| {SG} / {VL} | who | `bench sweep` | how it differs |", "|---|---|---|---|"]
    for r in ROWS:
        who = ", ".join("SGLang" if t == SG else "vLLM" for t in r.tools)
        out.append(f"| `{r.field}` | {who} | {r.ours} | {r.note or 'the same'} |")
    out += ["", "| default | theirs | ours |", "|---|---|---|"]
    out += [f"| {what} | {theirs} | {ours} |" for what, theirs, ours in DEFAULTS]
    return "\n".join(out) + "\n"
