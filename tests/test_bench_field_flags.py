"""The field's flag names (tools/bench/commands/field_flags.py, one table): every
row's example read by sglang.bench_serving's own parser (in a subprocess of the SGLang
venv) and by ours, the defaults the table states in both, the refusals and their
messages, docs/bench-serving.md holding the code's table, the figures bench_serving
prints beside ours, and the issue's command line against the CPU harness server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fakes.fake_sglang import Background, FakeSGLang

from sgl_eagle_ext.tools.bench import arrivals, cli, level_metrics, level_view, loads
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench.commands import field_flags as ff

ROOT = Path(__file__).resolve().parents[1]
ROWS_SCRIPT = Path(__file__).parent / "fakes" / "bench_serving_rows.py"
# the command line, in the field's spelling (URL appended)
FIELD_COMMAND = [  # fmt: skip
    "sweep",
    "--backend",
    "sglang-oai-chat",
    "--dataset-name",
    "random",
    "--random-input-len",
    "64",
    "--random-output-len",
    "24",
    "--num-prompts",
    "8",
    "--max-concurrency",
    "4",
    "--base-url",
]


def ours(*argv: str):
    args = cli.parser().parse_args(["sweep", *argv])
    return args.read(args)


def get(obj, path: str):
    for key in path.split("."):
        obj = getattr(obj, key)
    return str(obj) if path == "records.results" else obj


def bench_serving_parse(argvs: list[list[str]], tmp_path: Path) -> list[dict]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"parse": argvs}))
    out = subprocess.run(
        [sys.executable, str(ROWS_SCRIPT), str(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["parse"]


# Each row of field_flags.ROWS, by its field: an example in the field's spelling,
# bench_serving's namespace after it, our typed options after it ("sweep.warmup")
EXAMPLES = {
    "--backend B": (
        ("--backend", "sglang-oai-chat"),
        {"backend": "sglang-oai-chat"},
        {"connection.endpoint": "chat", "records.label": "sglang-oai-chat"},
    ),
    "--base-url U": (
        ("--base-url", "http://h:1"),
        {"base_url": "http://h:1"},
        {"connection.url": "http://h:1"},
    ),
    "--host H --port P": (
        ("--host", "h", "--port", "31000"),
        {"host": "h", "port": 31000},
        {"connection.url": "http://h:31000"},
    ),
    "--model M": (
        ("--model", "m"),
        {"model": "m"},
        {"connection.model": "m"},
    ),
    "--tokenizer T": (
        ("--tokenizer", "."),
        {"tokenizer": "."},
        {"connection.tokenizer": "."},
    ),
    "--dataset-name random": (
        ("--dataset-name", "random"),
        {"dataset_name": "random"},
        {
            "workload.dataset": "random",
            "workload.input_len": "1:1024",
            "workload.output_len": "1:1024",
        },
    ),
    "--random-input-len I --random-output-len O": (
        (
            "--dataset-name",
            "random",
            "--random-input-len",
            "64",
            "--random-output-len",
            "24",
            "--random-range-ratio",
            "1",
        ),
        {"random_input_len": 64, "random_output_len": 24, "random_range_ratio": 1.0},
        {"workload.input_len": "64", "workload.output_len": "24"},
    ),
    "--random-range-ratio R": (
        ("--dataset-name", "random", "--random-input-len", "64", "--random-range-ratio", "0.5"),
        {"random_range_ratio": 0.5},
        {"workload.input_len": "32:64"},
    ),
    "--dataset-name sharegpt --dataset-path F": (
        ("--dataset-name", "sharegpt", "--dataset-path", "sg.json"),
        {"dataset_name": "sharegpt", "dataset_path": "sg.json"},
        {"workload.dataset": "sharegpt:sg.json"},
    ),
    "--sharegpt-output-len N": (
        ("--dataset-path", "sg.json", "--sharegpt-output-len", "9"),
        {"sharegpt_output_len": 9},
        {"workload.output_len": "9"},
    ),
    "--dataset-name mooncake --dataset-path F": (
        ("--dataset-name", "mooncake", "--dataset-path", "t.jsonl", "--use-trace-timestamps"),
        {"dataset_name": "mooncake", "use_trace_timestamps": True},
        {"workload.dataset": "trace:t.jsonl", "sweep.request_rate": None},
    ),
    "--mooncake-slowdown-factor K": (
        ("--mooncake-slowdown-factor", "2"),
        {"mooncake_slowdown_factor": 2.0},
        {"workload.trace_speed": 0.5},
    ),
    "--dataset-name generated-shared-prefix": (
        ("--dataset-name", "generated-shared-prefix"),
        {
            "dataset_name": "generated-shared-prefix",
            "gsp_num_groups": 64,
            "gsp_prompts_per_group": 16,
        },
        {},
    ),
    "--num-warmups N / --warmup-requests N": (
        ("--warmup-requests", "3"),
        {"warmup_requests": 3},
        {"sweep.warmup": 3},
    ),
    "--output-file F": (
        ("--output-file", "o.jsonl"),
        {"output_file": "o.jsonl"},
        {"records.results": "o.jsonl"},
    ),
    "--disable-tqdm": (
        ("--disable-tqdm",),
        {"disable_tqdm": True},
        {},
    ),
    "--disable-stream": (
        ("--disable-stream",),
        {"disable_stream": True},
        {"connection.stream": False},
    ),
    "--no-stream": (
        ("--no-stream",),
        {},
        {},
    ),
    "--disable-ignore-eos": (
        ("--disable-ignore-eos",),
        {"disable_ignore_eos": True},
        {"requests.respect_eos": True},
    ),
    "--extra-request-body J": (
        ("--extra-request-body", '{"top_p": 0.5}'),
        {"extra_request_body": '{"top_p": 0.5}'},
        {"connection.extra_body": {"top_p": 0.5}},
    ),
    "--flush-cache": (
        ("--flush-cache",),
        {"flush_cache": True},
        {"sweep.flush_cache": True},
    ),
    "--percentile-metrics M --metric-percentiles P": (
        ("--percentile-metrics", "ttft,e2el", "--metric-percentiles", "25,75"),
        {},
        {"sweep.metric_percentiles": (("ttft", "e2el"), (25.0, 75.0))},
    ),
    "--ready-check-timeout-sec S": (
        ("--ready-check-timeout-sec", "0"),
        {"ready_check_timeout_sec": 0},
        {"connection.ready_timeout": 0},
    ),
    "--ramp-up-strategy {linear,exponential} --ramp-up-start-rps A --ramp-up-end-rps B": (
        ("--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "8"),
        {},
        {"sweep.ramp_up": ("linear", 1.0, 8.0), "sweep.request_rate": "8"},
    ),
    "--request-rate R": (
        ("--request-rate", "inf"),
        {"request_rate": "inf"},
        {"sweep.request_rate": "inf"},
    ),
    "--max-concurrency N": (
        ("--max-concurrency", "8"),
        {"max_concurrency": 8, "request_rate": "inf"},
        {"sweep.max_concurrency": 8, "sweep.request_rate": "inf"},
    ),
    "--num-prompts N": (
        ("--num-prompts", "7"),
        {"num_prompts": 7},
        {"sweep.num_prompts": 7},
    ),
    "--seed S": (
        ("--seed", "5"),
        {"seed": 5},
        {"requests.seed": 5},
    ),
    "--temperature T": (
        ("--temperature", "0.5"),
        {"temperature": 0.5},
        {"requests.temperature": 0.5},
    ),
    "--header K=V K2=V2": (
        ("--header", "X-A=1", "X-B=2"),
        {"header": ["X-A=1", "X-B=2"]},
        {"connection.headers": {"X-A": "1", "X-B": "2"}},
    ),
    "--goodput ttft:500 tpot:50 e2el:900": (
        ("--goodput", "ttft:500", "tpot:50"),
        {},
        {"sweep.slo.ttft_ms": 500.0},
    ),
    "--burstiness B": (
        ("--request-rate", "4", "--burstiness", "2"),
        {},
        {"sweep.burstiness": 2.0},
    ),
    "--endpoint PATH": (
        ("--endpoint", "/v1/completions"),
        {},
        {"connection.endpoint": "completions"},
    ),
    "--label L": (
        ("--label", "x"),
        {},
        {"records.label": "x"},
    ),
}
# Defaults that differ (field_flags.DEFAULTS, by name): bench_serving's namespace with no
# flags, our typed options with no flags
DEFAULTS = {
    "load": (
        {"request_rate": "inf", "num_prompts": 1000, "max_concurrency": None},
        {"sweep.request_rate": None, "sweep.concurrency": None, "sweep.num_prompts": 0},
    ),
    "seed": ({"seed": 42}, {"requests.seed": 0}),
    "warm-up": ({"warmup_requests": 1}, {"sweep.warmup": 2}),
    "prefix cache": ({"flush_cache": False}, {"sweep.flush_cache": True}),
    "dataset": (
        {
            "dataset_name": "sharegpt",
            "random_input_len": 1024,
            "random_output_len": 1024,
            "random_range_ratio": 0.0,
        },
        {"workload.dataset": "shipped"},
    ),
    "request": (
        {"backend": "sglang", "temperature": 0.0, "disable_ignore_eos": False},
        {
            "connection.endpoint": "chat",
            "requests.max_tokens": 256,
            "requests.temperature": 0.0,
            "requests.respect_eos": False,
        },
    ),
}


# ------------------------------------------------------------------ both parsers
def test_every_row_and_default_has_its_example():
    assert list(EXAMPLES) == [r.field for r in ff.ROWS]
    assert list(DEFAULTS) == [d[0] for d in ff.DEFAULTS]


@pytest.mark.parametrize("field", [f for f, ex in EXAMPLES.items() if ex[2]])
def test_ours_reads_each_row_as_the_table_says(field):
    argv, _theirs, we = EXAMPLES[field]
    opts = ours(*argv)
    for path, want in we.items():
        assert get(opts, path) == want, (field, path)


def test_our_defaults_are_the_tables():
    opts = ours()
    for what, (_their_ns, our_values) in DEFAULTS.items():
        for path, want in our_values.items():
            assert get(opts, path) == want, (what, path)


@pytest.mark.harness
def test_bench_serving_reads_each_row_as_the_table_says(tmp_path):
    """bench_serving's own parser: its defaults are the table's, every row the table
    gives bench_serving parses to the values it states, and the rows it gives vLLM alone
    are not bench_serving's flags (its parser refuses them)."""
    theirs = [r for r in ff.ROWS if ff.SG in r.tools]
    vllm_only = [r for r in ff.ROWS if r.tools == (ff.VL,)]
    argvs = [[]] + [list(EXAMPLES[r.field][0]) for r in theirs + vllm_only]
    got = bench_serving_parse(argvs, tmp_path)
    defaults, read, refused = got[0], got[1 : 1 + len(theirs)], got[1 + len(theirs) :]
    for what, (their_ns, _ours) in DEFAULTS.items():
        for key, want in their_ns.items():
            assert defaults["args"][key] == want, (what, key)
    for row, g in zip(theirs, read):
        assert not g.get("refused"), row.field
        for key, want in EXAMPLES[row.field][1].items():
            assert g["args"][key] == want, (row.field, key)
    for row, g in zip(vllm_only, refused):
        assert g.get("refused"), f"{row.field} is bench_serving's too: the table says vLLM only"
    # their random lengths are the range ours reads the same row into
    ratio_row = next(r for r in ff.ROWS if r.field.startswith("--random-range-ratio"))
    low, high = read[theirs.index(ratio_row)]["random_input_lens"]
    assert (low, high) == (32, 64) and EXAMPLES[ratio_row.field][2]["workload.input_len"] == "32:64"


def test_docs_hold_the_code_table():
    assert ff.markdown() in (ROOT / "docs" / "bench-serving.md").read_text()


def test_each_field_flag_reaches_help():
    text = cli.parser()._subparsers._group_actions[0].choices["sweep"].format_help()
    for row in ff.ROWS:
        for flag in row.args:
            assert flag in text, flag


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    "argv, words",
    [
        (["sweep", "--no-stream"], "loads a Hugging Face dataset without streaming"),
        (["single", "--no-stream"], "use --disable-stream"),
        (["sweep", "--dataset-name", "generated-shared-prefix"], "64 groups of 16 prompts"),
        (["sweep", "--backend", "trt"], "--backend trt"),
        (["sweep", "--random-input-len", "5"], "none was given"),
        (["sweep", "--dataset-name", "sharegpt"], "needs --dataset-path"),
        (["sweep", "--base-url", "http://a:1", "--url", "http://b:2"], "disagree"),
        (["sweep", "--ramp-up-strategy", "linear"], "--ramp-up-start-rps A"),
        (["sweep", "--metric-percentiles", "101"], "between 0 and 100"),
        (["sweep", "--percentile-metrics", "ttft,foo"], "unknown metric foo"),
        (["sweep", "--tokenizer", "no/such/dir"], "not a directory"),
        (["sweep", "--endpoint", "/v1/embeddings"], "vLLM's path"),
    ],
)
def test_refused_with_the_fields_meaning(argv, words, capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own refusals exit 2 too
        raise SystemExit(cli.main(argv))
    assert e.value.code == 2
    assert words in capsys.readouterr().err


# ------------------------------------------------------------------ figures
def _result(i: int, start: float, chunks: list[float], tokens: list[int]) -> cl.RequestResult:
    r = cl.RequestResult(i, f"p{i}", ok=True, start=start, ttft=chunks[0], e2e=chunks[-1])
    r.chunk_times, r.chunk_tokens = chunks, tokens
    r.completion_tokens = sum(tokens)
    return r


def test_bench_serving_figures_per_level():
    """ITL std/p95/max (numpy's, as bench_serving's), the peaks over one-second buckets,
    SLO attainment overall and per goal over the requests sent."""
    a = _result(0, 100.0, [0.2, 0.5, 1.4], [1, 3, 2])  # tokens at 100.2, 100.5, 101.4
    b = _result(1, 100.3, [0.1, 0.2], [1, 4])  # at 100.4, 100.5
    bad = cl.RequestResult(2, "p2", ok=False, error="http")
    slo = loads.SLO(ttft_ms=150.0, e2e_ms=1000.0)
    f = level_metrics.level_metrics([a, b, bad], 2.0, loads.Load(max_tokens=8), slo)
    itls = [0.1] * 3 + [0.45] * 2 + [0.025] * 4
    assert f["itl_ms"]["std"] == pytest.approx(np.std(itls) * 1e3)
    assert f["itl_ms"]["p95"] == pytest.approx(np.percentile(itls, 95) * 1e3)
    assert f["itl_ms"]["max"] == pytest.approx(450.0)
    assert f["peak_output_tok_s"] == 1 + 3 + 1 + 4  # the first second; 2 in the next
    assert f["peak_concurrency"] == 2
    assert f["slo_attainment"] == pytest.approx(1 / 3)  # b alone meets both, of 3 sent
    assert f["slo_attainment_by_metric"] == pytest.approx({"ttft_ms": 1 / 3, "e2e_ms": 1 / 3})
    line = level_view.field_line(f, "c=2")
    assert "ITL ms std" in line and "peak 9.0 output tok/s" in line
    assert "SLO attainment 33.3% (ttft 33.3%, e2e 33.3%)" in line
    chosen = level_metrics.metric_percentiles([a, b, bad], (("ttft", "e2el"), (50.0,)))
    assert chosen == {"ttft": {"p50": pytest.approx(150.0)}, "e2el": {"p50": pytest.approx(800)}}


def test_ramp_up_rates_are_vllms():
    """Request i of n at start + (end - start) i/(n-1) (linear) or start (end/start)^(i/(n-1))
    (exponential): with constant gaps each gap is 1/that rate."""
    lin = arrivals.ramp("linear", 1.0, 4.0, 4, kind="constant")
    assert np.diff(lin) == pytest.approx([1 / 2, 1 / 3, 1 / 4])
    exp = arrivals.ramp("exponential", 1.0, 8.0, 4, kind="constant")
    assert np.diff(exp) == pytest.approx([1 / 2, 1 / 4, 1 / 8])
    drawn = arrivals.ramp("linear", 1.0, 4.0, 50, seed=3)
    assert drawn[0] == 0 and np.all(np.diff(drawn) > 0)
    assert np.array_equal(drawn, arrivals.ramp("linear", 1.0, 4.0, 50, seed=3))


# ------------------------------------------------------------------ runs
def test_field_command_against_a_fake(tmp_path, capsys):
    """The field's spelling end to end: --model reaches the body, --backend the path,
    --output-file the records, the printed line bench_serving's figures."""
    res = tmp_path / "out.jsonl"
    with Background(FakeSGLang(delay_ms=5)) as bg:
        rc = cli.main(
            [*FIELD_COMMAND, bg.url, "--model", "served-name", "--output-file", str(res)]
            + ["--goodput", "ttft:60000", "--metric-percentiles", "50", "--disable-tqdm"]
            + ["--warmup-requests", "1"]
        )
        assert rc == 0
        assert bg.fake.last_body["model"] == "served-name"
    (r,) = [json.loads(x) for x in res.read_text().splitlines()]
    assert (r["endpoint"], r["arm"], r["arrival"]) == ("chat", "sglang-oai-chat", "burst")
    assert (r["completed"], r["concurrency"], r["max_concurrency"]) == (8, 4, 4)
    assert r["input_len"] == "1:64" and r["output_len"] == "1:24"  # their range ratio 0
    assert r["slo_attainment"] == 1.0 and set(r["metric_percentiles"]) == {"ttft", "tpot", "itl"}
    out = capsys.readouterr().out
    assert "ITL ms std" in out and "SLO attainment 100.0% (ttft 100.0%)" in out


@pytest.mark.server
def test_field_command_against_the_cpu_server(spec_server, tmp_path, capsys):
    """The issue's command line, as a bench_serving user types it, against the shared
    CPU harness server: 8 requests, at most 4 in flight, lengths drawn as theirs."""
    res = tmp_path / "out.jsonl"
    rc = cli.main([*FIELD_COMMAND, spec_server.base_url, "--output-file", str(res), "--quiet"])
    assert rc == 0
    (r,) = [json.loads(x) for x in res.read_text().splitlines()]
    assert "peak" in capsys.readouterr().out
    print(
        f"completed {r['completed']}, {r['output_tokens']} tokens, peak "
        f"{r['peak_output_tok_s']} tok/s, peak {r['peak_concurrency']} in flight, ITL "
        f"std/p95/max {r['itl_ms']['std']:.1f}/{r['itl_ms']['p95']:.1f}/{r['itl_ms']['max']:.1f}"
    )
    assert r["completed"] == 8 and r["errors"] == {}
    assert r["endpoint"] == "chat" and r["arrival"] == "burst" and r["max_concurrency"] == 4
    assert 8 <= r["output_tokens"] <= 8 * 24
    assert 1 <= r["peak_concurrency"] <= 8 and r["peak_output_tok_s"] > 0
    assert r["itl_ms"]["max"] >= r["itl_ms"]["p95"] >= r["itl_ms"]["p50"]
