"""Argument groups shared by the bench subcommands, their typed options, and the
checks that read them.

Each subcommand module (commands/) builds its own parser from these groups and
reads the parsed flags into the group's frozen options (commands/groups.py), so
everything below the command line takes typed values:

    add_server    --url --api-key --endpoint --header ...   ConnectionOptions
    add_workload  --prompts --seed --max-tokens ...          RequestOptions
                  --results --no-records (--label --run-id)  RecordOptions
    add_sweep     --concurrency --request-rate --slo ...     SweepOptions

(--quiet and --progress-every, also in add_workload, make the Console: cli.py.)
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting, redaction, secret_flags
from sgl_eagle_ext.common.cli_args import number
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import limits, progress, prompts, records
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.commands import field_flags


def levels(text: str, flag: str = "--concurrency") -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UserError(
            f"{flag} {text}: not a comma-separated list of integers.",
            fix=f"e.g. {flag} 1,2,5,10,30",
        ) from None
    if not values or values[0] < 1:
        raise UserError(
            f"{flag} {text}: levels must be integers >= 1.",
            fix=f"e.g. {flag} 1,2,5,10,30",
        )
    limits.check_concurrency(values[-1], flag)
    return values


INF = math.inf
ARRIVALS = ("poisson", "gamma", "constant")


def rates(text: str, flag: str = "--request-rate") -> list[float]:
    """Request rates (req/s); `inf` is a burst: every request sent at once."""
    fix = f"e.g. {flag} 4, {flag} 1,2,4,8 or {flag} inf (a burst)"
    try:
        values = sorted({float(v) for v in str(text).split(",") if v.strip()})
    except ValueError:
        raise UserError(f"{flag} {text}: not a comma-separated list of numbers.", fix=fix) from None
    if not values or values[0] <= 0 or math.isnan(values[0]) or math.isnan(values[-1]):
        raise UserError(
            f"{flag} {text}: request rates must be positive numbers (req/s) or inf.", fix=fix
        )
    return values


def _closed_only(sweep: SweepOptions) -> None:
    for flag, value, why in (
        ("--burstiness", sweep.burstiness, "shapes the gaps between open-loop arrivals"),
        ("--arrival", sweep.arrival, "shapes open-loop arrivals"),
        (
            "--max-concurrency",
            sweep.max_concurrency,
            "caps an open-loop level; with --concurrency the level is the cap",
        ),
    ):
        if value is not None:
            raise UserError(
                f"{flag} {why}: it needs --request-rate.",
                fix="add --request-rate R (e.g. 4, 1,2,4 or inf), or drop it",
            )


def arrival_kind(kind: str | None, burst: float | None) -> tuple[str, float]:
    """(arrival process, gamma shape) from --arrival and --burstiness."""
    if burst == INF:  # vLLM's spelling of even gaps: a gamma of infinite shape
        if kind not in (None, "constant"):
            raise UserError(
                f"--arrival {kind} with --burstiness inf: infinite burstiness is constant "
                "arrivals (every gap 1/rate).",
                fix="use --arrival constant (or --burstiness inf alone)",
            )
        return "constant", 1.0
    if burst is not None:
        positive("--burstiness", burst)
    if kind is None:
        kind = "poisson" if burst in (None, 1.0) else "gamma"
    if kind == "poisson" and burst not in (None, 1.0):
        raise UserError(
            f"--arrival poisson with --burstiness {burst:g}: Poisson is burstiness 1.",
            fix="use --arrival gamma --burstiness B, or drop --burstiness",
        )
    if kind == "constant" and burst is not None:
        raise UserError(
            "--arrival constant has no burstiness (every gap is 1/rate).",
            fix="drop --burstiness, or use --arrival gamma",
        )
    return kind, (1.0 if burst is None else burst)


def load_levels(sweep: SweepOptions) -> tuple[list[float], sw.OpenLoop | None]:
    """The sweep's levels: concurrencies (closed loop) or request rates (open loop)."""
    rate_flag, text = sweep.rate_flag, sweep.request_rate
    if sweep.duration is not None:
        positive("--duration", sweep.duration)
    if text is None:
        _closed_only(sweep)
        return levels(sweep.concurrency or DEFAULT_CONCURRENCY), None
    if sweep.concurrency is not None:
        raise UserError(
            f"--concurrency and {rate_flag} both given: a sweep's levels are one or the other.",
            fix="closed loop: --concurrency 1,2,4; open loop: --request-rate 1,2,4 "
            "(with --max-concurrency N to cap what is in flight)",
        )
    values = rates(text, rate_flag)
    kind, burst = arrival_kind(sweep.arrival, sweep.burstiness)
    cap = sweep.max_concurrency
    if cap is not None:
        positive("--max-concurrency", cap)
        limits.check_concurrency(cap, "--max-concurrency")
    if sweep.duration is not None and values[-1] == INF:
        raise UserError(
            f"{rate_flag} inf with --duration: a burst sends every request at once; "
            "it has no arrivals to spread over a duration.",
            fix="give a finite rate with --duration, or --concurrency N --duration S "
            "(closed loop for S seconds)",
        )
    return values, sw.OpenLoop(burst, sweep.duration, kind, cap, ramp=sweep.ramp_up)


# Upper bounds where a server would accept nonsense (a 20-digit --max-tokens makes
# SGLang generate until the context ends, or overflow): far above any real use.
MOST = {"--max-tokens": 1 << 20, "--runs": 100_000, "--num-prompts": 10_000_000}


def positive(name: str, value: float, zero_ok: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise UserError(
            f"{name} {value:g}: must be {'>= 0' if zero_ok else '> 0'}.",
            fix=f"pass a {'non-negative' if zero_ok else 'positive'} {name}",
        )
    if name in MOST and value > MOST[name]:
        raise UserError(f"{name} {value}: too large.", fix=f"pass at most {MOST[name]}")


OPENAI_KEY_ENV = "OPENAI_API_KEY"


def add_server(p: argparse.ArgumentParser, url: bool = True) -> None:
    """--url (unless the command takes other URLs), --api-key, and how requests look:
    --endpoint, --header, --extra-body."""
    if url:
        p.add_argument(
            "--url",
            default="http://127.0.0.1:30000",
            help="server base URL; a trailing /v1 is accepted (default http://127.0.0.1:30000)",
        )
    p.add_argument(
        "--api-key",
        # The key itself never appears in help, output or records.
        default=os.environ.get(API_KEY_ENV) or os.environ.get(OPENAI_KEY_ENV),
        help=f"bearer key of the server (default ${API_KEY_ENV}, else ${OPENAI_KEY_ENV})",
    )
    p.add_argument(
        "--endpoint",
        type=field_flags.endpoint,
        default=cl.CHAT,
        metavar="{chat,completions,generate}",
        help="chat: /v1/chat/completions (default; the server applies the chat template); "
        "completions: /v1/completions; generate: SGLang's /generate (both: the prompt's "
        "messages as plain text); vLLM's paths are accepted too",
    )
    p.add_argument(
        "--header",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=VALUE",
        help="extra HTTP headers on every request: one or more after one --header (as "
        "sglang.bench_serving takes them, --header X-A=1 X-B=2), or --header repeated; "
        "NAME=VALUE or 'NAME: VALUE'; values are never recorded",
    )
    p.add_argument(
        "--disable-stream",
        dest="stream",
        action="store_false",
        help="one JSON answer per request instead of a stream (as sglang.bench_serving's): "
        "TTFT is then the whole request, and there is no ITL",
    )
    field_flags.register_refusals(p)  # --no-stream: vLLM's means something else
    p.add_argument(
        "--extra-body",
        metavar="JSON",
        help="JSON object merged into every request body, e.g. '{\"top_p\": 0.9}'",
    )


@dataclass(frozen=True)
class ConnectionOptions:
    """add_server's flags, read: where the server is and how every request looks."""

    url: str | None  # --url; None: the command has its own URLs (lossless) or servers (ab)
    api_key: str | None  # --api-key (checked: an HTTP header can carry it)
    endpoint: str  # --endpoint
    headers: dict[str, str]  # --header NAME=VALUE ..., parsed (request_headers)
    stream: bool  # False with --disable-stream
    extra_body: dict  # --extra-body, parsed (extra_body)
    # the field's flags (field_flags.py), bench sweep only
    model: str | None = None  # --model: the name sent (None: the server's own)
    tokenizer: str | None = None  # --tokenizer: the directory that counts input tokens
    ready_timeout: float = 0  # --ready-check-timeout-sec: wait this long for the server


def request_headers(texts: Iterable[str]) -> dict[str, str]:
    """--header values as a dict: `NAME=VALUE` (as sglang.bench_serving and vLLM take
    them) or `NAME: VALUE` (as curl does); the first `=` or `:` ends the name."""
    out = {}
    for h in texts:
        cut = min((i for i in (h.find("="), h.find(":")) if i >= 0), default=-1)
        name, value = (h[:cut], h[cut + 1 :]) if cut >= 0 else (h, "")
        if cut < 0 or not name.strip() or any(c.isspace() for c in name.strip()):
            shown = name.strip() if cut >= 0 else f"{h.split()[0] if h.split() else h} (no = or :)"
            raise UserError(
                f"--header {shown}: not NAME=VALUE or NAME: VALUE.",
                fix="e.g. --header X-Team=bench or --header 'X-Team: bench'",
            )
        out[name.strip()] = value.strip()
    return out


def check_headers(headers: dict[str, str]) -> None:
    """Refuse what no HTTP header can carry; remember secret-named values for masking."""
    for name, value in headers.items():
        if secret_flags.CONTROL.search(value) or secret_flags.CONTROL.search(name):
            raise UserError(
                f"--header {name[:40]}: holds a control character (CR, LF, NUL, ...), "
                f"which no HTTP header can carry.",
                fix="write the header on one line, without control characters",
            )
        if redaction.is_secret_name(name) or name.lower() in ("authorization", "cookie"):
            redaction.remember(value)


def extra_body(text: str | None) -> dict:
    """--extra-body: a JSON object ({} when not given)."""
    if not text:
        return {}
    try:
        obj = nesting.json_loads(text)
    except (ValueError, RecursionError) as e:
        raise UserError(
            f"--extra-body: not valid JSON ({e}).", fix="e.g. --extra-body '{\"top_p\": 0.9}'"
        ) from None
    if not isinstance(obj, dict):
        raise UserError(
            "--extra-body: must be a JSON object.", fix="e.g. --extra-body '{\"top_p\": 0.9}'"
        )
    return obj


@dataclass(frozen=True)
class RequestOptions:
    """add_workload's flags that shape every request: what it says, asks for and waits."""

    prompts: str  # --prompts: a shipped set's name or a JSONL file
    seed: int  # --seed: prompt order (and sampling)
    max_tokens: int  # --max-tokens (> 0)
    temperature: float  # --temperature (>= 0)
    respect_eos: bool  # --respect-eos (else EOS is ignored: fixed lengths)
    request_timeout: float  # --request-timeout, seconds (> 0)


@dataclass(frozen=True)
class RecordOptions:
    """Where the records go and what names them: --results / --no-records (add_workload),
    and the commands' own --run-id and --label."""

    results: Path | None  # --results; None with --no-records
    run_id: str | None  # --run-id (None: a new id)
    label: str  # --label: the arm name stored in the records ("" where none)


def add_workload(p: argparse.ArgumentParser, max_tokens: int) -> None:
    """Prompts, lengths, sampling, timeouts, records, verbosity."""
    p.add_argument(
        "--prompts",
        default=prompts.MIXED,
        help="coding, encyclopedic, mixed (default: both interleaved) or a JSONL "
        'file ({"prompt": ...} or {"messages": [...]} per line)',
    )
    p.add_argument("--seed", type=int, default=0, help="prompt order (and sampling) seed")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=max_tokens,
        help=f"tokens generated per request (default {max_tokens})",
    )
    p.add_argument("--temperature", type=number(0), default=0.0, help="sampling temperature (0)")
    p.add_argument(
        "--respect-eos",
        action="store_true",
        help="let the model stop at EOS (default: ignore EOS, fixed lengths)",
    )
    p.add_argument(
        "--request-timeout",
        type=number(0, strict=True),
        default=cl.DEFAULT_TIMEOUT,
        help="seconds before one request counts as timed out (default 600)",
    )
    p.add_argument(
        "--results",
        default=str(records.DEFAULT_RESULTS),
        help="JSONL file the records are appended to; the CSV goes next to it "
        "(default bench-results/results.jsonl)",
    )
    p.add_argument("--no-records", action="store_true", help="write no records")
    p.add_argument("--quiet", action="store_true", help="no progress bars or chatter")
    p.add_argument(
        "--progress-every",
        type=number(0),
        default=progress.DEFAULT_EVERY,
        metavar="SECONDS",
        help="off a terminal: a progress line with an ETA this often "
        f"(default {progress.DEFAULT_EVERY:g})",
    )


def add_common(p: argparse.ArgumentParser, max_tokens: int, url: bool = True) -> None:
    add_server(p, url)
    add_workload(p, max_tokens)


DEFAULT_CONCURRENCY = ",".join(map(str, sw.DEFAULT_LEVELS))


@dataclass(frozen=True)
class SweepOptions:
    """add_sweep's flags, read: the load levels (resolved by load_levels) and what each
    level sends."""

    concurrency: str | None  # --concurrency: closed-loop levels, as given
    request_rate: str | None  # --request-rate (or its alias --request-rates), as given
    rate_flag: str  # which of the two spellings was given, for messages
    max_concurrency: int | None  # --max-concurrency (open loop)
    arrival: str | None  # --arrival (open loop)
    burstiness: float | None  # --burstiness (open loop)
    duration: float | None  # --duration: seconds per level
    num_prompts: int  # --num-prompts per level (>= 0)
    prompts_per_concurrency: int  # --prompts-per-concurrency (>= 0)
    warmup: int  # --warmup requests before the sweep (>= 0)
    flush_cache: bool  # False with --no-flush-cache
    slo: sw.SLO  # --slo/--goodput and the --slo-ttft-ms/--slo-tpot-ms aliases, parsed
    # the field's flags (field_flags.py): vLLM's --ramp-up-* (strategy, start, end req/s)
    # and --percentile-metrics/--metric-percentiles ((metrics), (percentiles))
    ramp_up: tuple[str, float, float] | None = None
    metric_percentiles: tuple[tuple[str, ...], tuple[float, ...]] | None = None


def add_sweep(p: argparse.ArgumentParser) -> None:
    """Load levels and what each level sends."""
    p.add_argument(
        "--concurrency",
        help=f"closed loop: levels, comma-separated (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--request-rate",
        metavar="R[,R2,...]",
        help="open loop: requests arriving at R req/s (Poisson unless --arrival), or a list "
        "of rates to sweep; inf sends every request at once (a burst), as in "
        "sglang.bench_serving",
    )
    p.add_argument("--request-rates", metavar="R1,R2,...", help="the same as --request-rate")
    p.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="open loop: at most N requests in flight; an arrival waits for a free slot "
        "(sglang.bench_serving's meaning: the achieved rate may fall below --request-rate)",
    )
    p.add_argument(
        "--arrival",
        choices=ARRIVALS,
        help="open loop: gaps between arrivals: poisson (default; exponential), gamma "
        "(shape --burstiness) or constant (every gap 1/R)",
    )
    p.add_argument(
        "--burstiness",
        type=float,
        help="open loop: gamma shape of the gaps between arrivals (default 1 = Poisson, "
        "sglang.bench_serving's only process; <1 burstier, >1 more regular; inf: even gaps, "
        "as --arrival constant), mean gap 1/R, "
        "as vLLM's --burstiness",
    )
    p.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="seconds per level. Open loop: arrivals for that long. Closed loop: the "
        "workers keep sending (cycling through the level's prompts) until then, and the "
        "requests in flight finish (default: a request count, --num-prompts)",
    )
    p.add_argument(
        "--num-prompts",
        type=int,
        default=0,
        help="prompts per level (at least --prompts-per-concurrency x level)",
    )
    p.add_argument(
        "--prompts-per-concurrency",
        type=int,
        default=sw.PER_CONCURRENCY,
        help=f"minimum prompts per level as a multiple of its concurrency "
        f"(default {sw.PER_CONCURRENCY}, SGLang's steady-state advice)",
    )
    p.add_argument("--warmup", type=int, default=2, help="warm-up requests before the sweep")
    p.add_argument(
        "--no-flush-cache", action="store_true", help="keep the prefix cache between levels"
    )
    p.add_argument(
        "--slo",
        "--goodput",
        dest="slo",
        nargs="+",
        action="extend",
        metavar="KEY=MS",
        help="goodput: latency goals per request in ms, e.g. ttft=500,tpot=50 or "
        "ttft:500 tpot:50 (sglang.bench_serving's --goodput); keys ttft, tpot, e2e "
        "(or e2el), itl (every token's ITL)",
    )
    p.add_argument("--slo-tpot-ms", type=number(0, strict=True), help="alias of --slo tpot=MS")
    p.add_argument("--slo-ttft-ms", type=number(0, strict=True), help="alias of --slo ttft=MS")


def slo(goals_text: list[str] | None, ttft_ms: float | None, tpot_ms: float | None) -> sw.SLO:
    """The sweep's SLO: --slo (--goodput) KEY=MS..., or the aliases --slo-ttft-ms and
    --slo-tpot-ms."""
    from sgl_eagle_ext.tools.bench import goodput

    goals = goodput.parse_slo(goals_text)
    for key, alias in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        if alias is not None and key in goals and goals[key] != alias:
            raise UserError(
                f"--slo {key}={goals[key]:g} and --slo-{key}-ms {alias:g} disagree.",
                fix=f"give the {key} goal once (--slo-{key}-ms is an alias of --slo {key}=MS)",
            )
        if alias is not None:
            goals[key] = alias
    return sw.SLO(goals.get("tpot"), goals.get("ttft"), "given", goals.get("e2e"), goals.get("itl"))
