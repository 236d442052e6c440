"""The flags the bench subcommands share, each declared once: a field of the frozen options
it is read into (common/declared_flags.py turns the fields into the parser and reads the
namespace back through each field's check), so everything below the command line takes
typed values:

    ConnectionOptions  --url --api-key --endpoint --header --disable-stream --extra-body
    RequestOptions     --prompts --seed --max-tokens --temperature --respect-eos ...
    RecordOptions      --results --no-records (--label --run-id where a command asks)
    ConsoleOptions     --quiet --progress-every (cli.py makes the Console)
    SweepOptions       --concurrency --request-rate --max-concurrency --slo ...
    (workload.WorkloadOptions: --dataset --input-len ...)

A new flag is one field here (and its use); tests/test_bench_declared.py shows it reaches
--help and the run.
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import http
from sgl_eagle_ext.common.cli_args import integer, number, seconds
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.declared_flags import add_flags, flag
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import flag_values, loads, progress, prompts, records
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.commands import field_flags
from sgl_eagle_ext.tools.bench.levels import ARRIVALS, DEFAULT_CONCURRENCY, above

OPENAI_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class ConnectionOptions:
    """Where the server is and how every request looks."""

    url: str | None = flag(  # None: the command has its own URLs (lossless) or servers (ab)
        "--url",
        cli_default="http://127.0.0.1:30000",
        help="server base URL; a trailing /v1 is accepted (default %(default)s)",
    )
    api_key: str | None = flag(  # the key itself never appears in help, output or records
        "--api-key",
        cli_default=lambda: os.environ.get(API_KEY_ENV) or os.environ.get(OPENAI_KEY_ENV),
        check=flag_values.api_key,
        help=f"bearer key of the server (default ${API_KEY_ENV}, else ${OPENAI_KEY_ENV})",
    )
    endpoint: str = flag(
        "--endpoint",
        default=cl.CHAT,
        type=field_flags.endpoint,
        metavar="{chat,completions,generate}",
        help="chat: /v1/chat/completions (default; the server applies the chat template); "
        "completions: /v1/completions; generate: SGLang's /generate (both: the prompt's "
        "messages as plain text); vLLM's paths are accepted too",
    )
    headers: dict = flag(
        "--header",
        cli_default=list,
        check=flag_values.headers,
        nargs="+",
        action="extend",
        metavar="NAME=VALUE",
        help="extra HTTP headers on every request: one or more after one --header (as "
        "sglang.bench_serving takes them, --header X-A=1 X-B=2), or --header repeated; "
        "NAME=VALUE or 'NAME: VALUE'; values are never recorded",
    )
    stream: bool = flag(
        "--disable-stream",
        default=True,
        action="store_false",
        help="one JSON answer per request instead of a stream (as sglang.bench_serving's): "
        "TTFT is then the whole request, and there is no ITL",
    )
    extra_body: dict = flag(
        "--extra-body",
        check=lambda _n, text: flag_values.extra_body(text),
        metavar="JSON",
        help="JSON object merged into every request body, e.g. '{\"top_p\": 0.9}'",
    )
    insecure: bool = flag(
        "--insecure",
        default=False,
        action="store_true",
        help="https: do not verify the server's certificate (a self-signed test server)",
    )
    ca_cert: str | None = flag(
        "--ca-cert",
        metavar="FILE",
        help="https: trust the certificate(s) in this PEM file (the server's own, or its CA)",
    )
    # the field's flags (field_flags.py), bench sweep only
    model: str | None = None  # --model: the name sent (None: the server's own)
    tokenizer: str | None = None  # --tokenizer: the directory that counts input tokens
    ready_timeout: float = 0  # --ready-check-timeout-sec: wait this long for the server
    # not a flag: how the launcher that started this server trusts it (bench compare's
    # arms: SGLang's own --ssl-certfile, pinned)
    server_tls: ssl.SSLContext | None = None

    @functools.cached_property
    def tls(self) -> ssl.SSLContext | None:
        """The TLS context --insecure / --ca-cert ask for, else the launcher's own trust
        of a server it started (None: the system's trust store), or one clear UserError
        (http.tls_from_flags)."""
        return http.tls_from_flags(self.insecure, self.ca_cert) or self.server_tls


@dataclass(frozen=True)
class RequestOptions:
    """What every request says, asks for and waits."""

    prompts: str = flag(
        "--prompts",
        default=prompts.MIXED,
        help="coding, encyclopedic, mixed (default: both interleaved) or a JSONL "
        'file ({"prompt": ...} or {"messages": [...]} per line)',
    )
    seed: int = flag("--seed", default=0, type=integer(), help="prompt order (and sampling) seed")
    max_tokens: int = flag(  # the default is each command's (add_common)
        "--max-tokens",
        default=256,
        type=integer(),
        check=above(0),
        help="tokens generated per request (default %(default)s)",
    )
    temperature: float = flag(
        "--temperature",
        default=0.0,
        type=number(0),
        check=above(0, zero_ok=True),
        help="sampling temperature (0)",
    )
    respect_eos: bool = flag(
        "--respect-eos",
        default=False,
        action="store_true",
        help="let the model stop at EOS (default: ignore EOS, fixed lengths)",
    )
    request_timeout: float = flag(
        "--request-timeout",
        default=cl.DEFAULT_TIMEOUT,
        type=seconds(0, strict=True),
        check=above(0),
        help="seconds before one request counts as timed out (default 600)",
    )


@dataclass(frozen=True)
class RecordOptions:
    """Where the records go and what names them."""

    results: Path | None = flag(  # None with --no-records
        "--results",
        cli_default=str(records.DEFAULT_RESULTS),
        check=lambda _n, path: Path(path),
        help="JSONL file the records are appended to; the CSV goes next to it "
        "(default bench-results/results.jsonl)",
    )
    no_records: bool = flag(
        "--no-records", default=False, action="store_true", help="write no records"
    )
    run_id: str | None = flag(
        "--run-id",
        opt_in=True,
        help="share a run id with another run (e.g. the other server of a manual A/B) so "
        "`plot` draws both; default: a new id",
    )
    label: str = flag(
        "--label", default="", opt_in=True, help="arm name stored in the records (for plot)"
    )

    def __post_init__(self):
        if self.no_records:
            object.__setattr__(self, "results", None)


@dataclass(frozen=True)
class ConsoleOptions:
    """Verbosity (cli.py reads them into the Console)."""

    quiet: bool = flag(
        "--quiet", default=False, action="store_true", help="no progress bars or chatter"
    )
    progress_every: float = flag(
        "--progress-every",
        default=progress.DEFAULT_EVERY,
        type=number(0),
        metavar="SECONDS",
        help="off a terminal: a progress line with an ETA this often (default %(default)g)",
    )


def add_common(
    p: argparse.ArgumentParser, max_tokens: int, url: bool = True, records: tuple = ()
) -> None:
    """The shared flags; `records`: the opt-in record flags the command has (label, run_id)."""
    add_flags(p, ConnectionOptions, skip=() if url else ("url",))
    field_flags.register_refusals(p)  # --no-stream: vLLM's means something else
    add_flags(p, RequestOptions, defaults={"max_tokens": max_tokens})
    add_flags(p, RecordOptions, use=records)
    add_flags(p, ConsoleOptions)


@dataclass(frozen=True)
class SweepOptions:
    """The load levels (resolved by levels.load_levels) and what each level sends."""

    concurrency: str | None = flag(
        "--concurrency",
        help=f"closed loop: levels, comma-separated (default {DEFAULT_CONCURRENCY})",
    )
    request_rate: str | None = flag(
        "--request-rate",
        "--request-rates",
        metavar="R[,R2,...]",
        help="open loop: requests arriving at R req/s (Poisson unless --arrival), or a list "
        "of rates to sweep; inf sends every request at once (a burst), as in "
        "sglang.bench_serving",
    )
    max_concurrency: int | None = flag(
        "--max-concurrency",
        type=integer(),
        metavar="N",
        help="at most N requests in flight; an arrival waits for a free slot "
        "(sglang.bench_serving's: alone, every request at once with that cap)",
    )
    arrival: str | None = flag(
        "--arrival",
        choices=ARRIVALS,
        help="open loop: gaps between arrivals: poisson (default; exponential), gamma "
        "(shape --burstiness) or constant (every gap 1/R)",
    )
    burstiness: float | None = flag(
        "--burstiness",
        type=number(0, infinity=True),  # 0 refused by arrival_kind, which says why
        help="open loop: gamma shape of the gaps between arrivals (default 1 = Poisson, "
        "sglang.bench_serving's only process; <1 burstier, >1 more regular; inf: even gaps, "
        "as --arrival constant), mean gap 1/R, as vLLM's --burstiness",
    )
    duration: float | None = flag(
        "--duration",
        type=seconds(0),  # 0 refused by load_levels, which says why
        metavar="SECONDS",
        help="seconds per level. Open loop: arrivals for that long. Closed loop: the "
        "workers keep sending (cycling through the level's prompts) until then, and the "
        "requests in flight finish (default: a request count, --num-prompts)",
    )
    num_prompts: int = flag(
        "--num-prompts",
        default=0,
        type=integer(),
        check=above(0, zero_ok=True),
        help="prompts per level (at least --prompts-per-concurrency x level)",
    )
    prompts_per_concurrency: int = flag(
        "--prompts-per-concurrency",
        default=sw.PER_CONCURRENCY,
        type=integer(),
        check=above(0, zero_ok=True),
        help="minimum prompts per level as a multiple of its concurrency "
        "(default %(default)s, SGLang's steady-state advice)",
    )
    warmup: int = flag(
        "--warmup",
        default=2,
        type=integer(),
        check=above(0, zero_ok=True),
        help="warm-up requests before the sweep",
    )
    flush_cache: bool = flag(
        "--no-flush-cache",
        default=True,
        action="store_false",
        help="keep the prefix cache between levels",
    )
    slo: loads.SLO = flag(  # parsed with the two aliases below (__post_init__)
        "--slo",
        "--goodput",
        nargs="+",
        action="extend",
        metavar="KEY=MS",
        help="goodput: latency goals per request in ms, e.g. ttft=500,tpot=50 or "
        "ttft:500 tpot:50 (sglang.bench_serving's --goodput); keys ttft, tpot, e2e "
        "(or e2el), itl (every token's ITL)",
    )
    slo_tpot_ms: float | None = flag(
        "--slo-tpot-ms", type=number(0, strict=True), help="alias of --slo tpot=MS"
    )
    slo_ttft_ms: float | None = flag(
        "--slo-ttft-ms", type=number(0, strict=True), help="alias of --slo ttft=MS"
    )
    # the field's flags (field_flags.py): vLLM's --ramp-up-* (strategy, start, end req/s)
    # and --percentile-metrics/--metric-percentiles ((metrics), (percentiles))
    ramp_up: tuple[str, float, float] | None = None
    metric_percentiles: tuple[tuple[str, ...], tuple[float, ...]] | None = None

    def __post_init__(self):
        if not isinstance(self.slo, loads.SLO):
            object.__setattr__(
                self, "slo", flag_values.slo(self.slo, self.slo_ttft_ms, self.slo_tpot_ms)
            )


def add_sweep(p: argparse.ArgumentParser) -> None:
    add_flags(p, SweepOptions)
