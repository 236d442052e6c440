"""The flag groups several subcommands share, read from the parsed namespace into
their typed options (options.py, workload.py). The range checks run here, while
each group is read, so a bad value stops the command before anything starts; the
rest of the tool only sees the typed options.

    options.add_server      -> connection(args) -> options.ConnectionOptions
    options.add_workload    -> requests(args)   -> options.RequestOptions
                               records(args)    -> options.RecordOptions
    options.add_sweep       -> sweep(args)      -> options.SweepOptions
    workload.add_options    -> workload(args)   -> workload.WorkloadOptions
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sgl_eagle_ext.common import secret_flags
from sgl_eagle_ext.tools.bench import datasets, options
from sgl_eagle_ext.tools.bench import workload as wl


def connection(args: argparse.Namespace) -> options.ConnectionOptions:
    headers = options.request_headers(args.header)
    api_key = args.api_key
    if api_key:  # one HTTP header cannot carry, or SGLang cannot compare
        api_key = secret_flags.check_value("api-key", api_key)
    options.check_headers(headers)
    return options.ConnectionOptions(
        url=getattr(args, "url", None),  # lossless has --url-a/--url-b, ab/compare none
        api_key=api_key,
        endpoint=args.endpoint,
        headers=headers,
        stream=args.stream,
        extra_body=options.extra_body(args.extra_body),
        model=getattr(args, "model", None),  # the field's flags: bench sweep only
        tokenizer=getattr(args, "tokenizer", None),
        ready_timeout=getattr(args, "ready_timeout", 0),
    )


def requests(args: argparse.Namespace) -> options.RequestOptions:
    options.positive("--max-tokens", args.max_tokens)
    options.positive("--request-timeout", args.request_timeout)
    options.positive("--temperature", args.temperature, zero_ok=True)
    return options.RequestOptions(
        prompts=args.prompts,
        seed=args.seed,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        respect_eos=args.respect_eos,
        request_timeout=args.request_timeout,
    )


def records(args: argparse.Namespace) -> options.RecordOptions:
    return options.RecordOptions(
        results=None if args.no_records else Path(args.results),
        run_id=getattr(args, "run_id", None),  # single and sweep have --run-id
        label=getattr(args, "label", ""),  # single and sweep have --label
    )


def sweep(args: argparse.Namespace) -> options.SweepOptions:
    """The levels stay as given: options.load_levels resolves them when the run starts."""
    options.positive("--num-prompts", args.num_prompts, zero_ok=True)
    slo = options.slo(args.slo, args.slo_ttft_ms, args.slo_tpot_ms)
    options.positive("--warmup", args.warmup, zero_ok=True)
    options.positive("--prompts-per-concurrency", args.prompts_per_concurrency, zero_ok=True)
    return options.SweepOptions(
        concurrency=args.concurrency,
        request_rate=args.request_rates or args.request_rate,
        rate_flag="--request-rates" if args.request_rates else "--request-rate",
        max_concurrency=args.max_concurrency,
        arrival=args.arrival,
        burstiness=args.burstiness,
        duration=args.duration,
        num_prompts=args.num_prompts,
        prompts_per_concurrency=args.prompts_per_concurrency,
        warmup=args.warmup,
        flush_cache=not args.no_flush_cache,
        slo=slo,
        ramp_up=getattr(args, "ramp_up", None),
        metric_percentiles=getattr(args, "metric_percentiles", None),
    )


def workload(args: argparse.Namespace) -> wl.WorkloadOptions:
    """--dataset's form is checked now, before any server is asked; the lengths and
    the dataset's rules when the workload is built (workload.WorkloadSet)."""
    if args.dataset:
        datasets.parse_spec(args.dataset)
    options.positive("--trace-speed", args.trace_speed)
    return wl.WorkloadOptions(
        dataset=args.dataset,
        input_len=args.input_len,
        output_len=args.output_len,
        long_text=args.long_text,
        trace_speed=args.trace_speed,
        multi_turn=args.multi_turn,
        max_turns=args.max_turns,
        save_requests=args.save_requests,
    )
