"""python -m sgl_eagle_ext.bench: unit tests, fault tests against a local fake
endpoint (fast), and real SGLang CPU servers with the tiny model pair (marked
`server`): single, a short sweep, a server killed mid-sweep, and an A/B between
the CPU baseline and EAGLE-3 presets (with the lossless check and a plot).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import signal
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from conftest import SPEC_SERVER_ARGS, TARGET_DRAFT, wait_until
from fakes.fake_sglang import Background, FakeSGLang, Faults

from sgl_eagle_ext.common import figures, http, ports
from sgl_eagle_ext.tools.bench import (
    cli,
    compare,
    lossless,
    probe,
    prompts,
    provenance,
    records,
    stats,
)
from sgl_eagle_ext.tools.bench import client as cl

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sgl_eagle_ext.bench", *args]


def run_bench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(bench_cmd(*args), capture_output=True, text=True, timeout=timeout)


def read_records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines]  # every line must parse: no partial records


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == records.CSV_COLUMNS
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def result(**kw) -> cl.RequestResult:
    base = dict(
        index=0,
        prompt_id="p",
        ok=True,
        ttft=0.1,
        e2e=1.1,
        completion_tokens=11,
        tokens_from_usage=True,
        chunk_times=[0.1 + 0.1 * i for i in range(11)],
    )
    base.update(kw)
    return cl.RequestResult(**base)


# ------------------------------------------------------------------ stats
def test_summary_matches_hand_computed_values():
    s = stats.summary([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s.n == 5 and s.mean == 11.0 and s.median == 11.0
    assert s.min == 9.0 and s.max == 13.0
    assert s.stdev == pytest.approx(math.sqrt(2.5))
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, df 4)
    assert s.ci95_low == pytest.approx(11.0 - half) and s.ci95_high == pytest.approx(11 + half)
    one = stats.summary([5.0])
    assert one.mean == 5.0 and one.stdev is None and one.ci95_low is None
    assert stats.summary([]).n == 0
    assert stats.t975(1) == 12.706 and stats.t975(100) == 1.96


def test_percentiles_and_steady_state_warnings():
    p = stats.percentiles(range(1, 101))
    assert p["p50"] == pytest.approx(50.5) and p["p90"] == pytest.approx(90.1)
    assert p["p99"] == pytest.approx(99.01) and p["mean"] == 50.5
    assert stats.percentiles([])["p50"] is None
    assert stats.steady_state_warnings([80.0, 80.5, 79.8, 80.2]) == []
    spread = stats.steady_state_warnings([70.0, 89.0, 75.0, 85.0])
    assert len(spread) == 1 and "not in a steady state" in spread[0]
    rising = stats.steady_state_warnings([78.0, 79.0, 80.0, 81.0, 82.0], max_cv=0.5)
    assert len(rising) == 1 and "rising" in rising[0]


# ------------------------------------------------------------------ prompts
def test_shipped_prompt_sets():
    for name in prompts.SHIPPED:
        ps = prompts.load(name)
        assert len(ps.prompts) >= 24, name
        assert len({p.id for p in ps.prompts}) == len(ps.prompts)
        assert all(p.messages[-1][0] == "user" for p in ps.prompts)
    cats = {p.category for p in prompts.load("coding").prompts}
    assert cats == {"coding", "agentic"}
    mixed = prompts.load("mixed")
    assert len(mixed.prompts) == 64
    assert [p.category for p in mixed.prompts[:2]] == ["coding", "encyclopedic"]
    # seeded order: reproducible, cycles when more prompts are needed than exist
    a, b = mixed.take(100, seed=3), mixed.take(100, seed=3)
    assert a == b and a[64] == a[0] and mixed.take(5, seed=4) != a[:5]
    assert mixed.sha256 == prompts.load("mixed").sha256 != prompts.load("coding").sha256


def test_user_prompt_file(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(
        '{"prompt": "hello"}\n\n{"id": "q2", "messages": [{"role": "system", '
        '"content": "be brief"}, {"role": "user", "content": "why?"}]}\n'
    )
    ps = prompts.load(str(f))
    assert [p.id for p in ps.prompts] == ["line-1", "q2"]
    assert ps.prompts[1].as_messages()[0] == {"role": "system", "content": "be brief"}
    assert ps.name == str(f.resolve())


@pytest.mark.parametrize(
    "text, line, words",
    [
        ('{"prompt": "ok"}\n{"prompt": "a",\n', 2, "not valid JSON"),
        ('{"prompt": "ok"}\n["a list"]\n', 2, "expected a JSON object"),
        ('{"text": "x"}\n', 1, "needs a 'prompt' string or a 'messages' list"),
        ('{"prompt": ""}\n', 1, "non-empty string"),
        ('{"messages": [{"role": "robot", "content": "x"}]}\n', 1, "messages[0] needs a role"),
        (
            '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n',
            1,
            "nothing to answer",
        ),
    ],
)
def test_bad_prompt_files_name_file_and_line(tmp_path, text, line, words):
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(prompts.UserError) as e:
        prompts.load(str(f))
    assert f"{f}:{line}:" in str(e.value) and words in str(e.value)
    assert "fix:" in str(e.value)


def test_missing_or_empty_prompt_file(tmp_path):
    with pytest.raises(prompts.UserError, match="no such file, and not a shipped set"):
        prompts.load(str(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(prompts.UserError, match="no prompts in the file"):
        prompts.load(str(tmp_path / "empty.jsonl"))


# ------------------------------------------------------------------ records
def test_jsonl_appends_are_whole_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    records.append_jsonl(
        path, {"kind": "x", "v": 1, "bad": math.nan, "big": math.inf, "text": "multi\nline"}
    )
    path.write_bytes(path.read_bytes() + b'{"kind": "torn by a crash elsewh')  # no newline
    records.append_jsonl(path, {"kind": "y", "v": 2})
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0]) == {
        "kind": "x",
        "v": 1,
        "bad": None,
        "big": None,
        "text": "multi\nline",
    }
    assert json.loads(lines[2]) == {"kind": "y", "v": 2}  # ours stayed whole
    got, problems = records.read_jsonl(path)
    assert [r["kind"] for r in got] == ["x", "y"]
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:2: skipped: not a JSON record (Unterminated string")


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "r.jsonl"
    big = "x" * 200_000

    def writer(k):
        for i in range(20):
            records.append_jsonl(path, {"kind": "w", "k": k, "i": i, "pad": big})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = read_records(path)
    assert len(recs) == 80 and all(r["pad"] == big for r in recs)


def test_csv_rows_and_foreign_header(tmp_path):
    rec = records.Recorder(tmp_path / "out.jsonl", run_id="RUN")
    prov = {
        "host": {
            "date": "D",
            "project": {"version": "0.1.0"},
            "gpu": {"gpus": [{"name": "NVIDIA RTX PRO 6000", "driver": "580.1"}]},
        },
        "server": {"url": "http://h:1", "sglang_version": "0.5.23", "preset": "baseline"},
        "prompts": {"set": "mixed", "sha256": "abc"},
    }
    rec.write(
        "sweep",
        {
            "arm": "A",
            "status": "ok",
            "concurrency": 4,
            "output_tok_s": 12.5,
            "errors": {"http 500": 2, "timeout": 1},
            "tpot_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
        },
        prov,
    )
    rows = read_csv(tmp_path / "out.csv")
    assert len(rows) == 1
    r = rows[0]
    assert (r["run_id"], r["kind"], r["arm"], r["concurrency"], r["output_tok_s"]) == (
        "RUN",
        "sweep",
        "A",
        "4",
        "12.5",
    )
    assert r["errors"] == "3" and r["tpot_p99_ms"] == "3.0" and r["ttft_p50_ms"] == ""
    assert r["gpus"] == "NVIDIA RTX PRO 6000 (driver 580.1)" and r["preset"] == "baseline"
    (tmp_path / "other.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(records.UserError, match="not this tool's CSV layout"):
        records.Recorder(tmp_path / "other.jsonl")


# ------------------------------------------------------------------ provenance
def test_secrets_never_reach_provenance():
    args = [
        "--model-path",
        "m",
        "--api-key",
        "s3cret",
        "--admin-api-key=x",
        "--max-tokens",
        "5",
        "--speculative-num-draft-tokens",
        "4",
    ]
    assert provenance.redact_args(args) == [
        "--model-path",
        "m",
        "--api-key",
        "***",
        "--admin-api-key=***",
        "--max-tokens",
        "5",
        "--speculative-num-draft-tokens",
        "4",
    ]
    env = provenance.redact_env(
        {
            "HF_TOKEN": "t",
            "NCCL_PROTO": "LL",
            "HOME": "/root",
            "EAGLE_EXT_API_KEY": "k",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    assert env == {"EAGLE_EXT_API_KEY": "***", "HF_TOKEN": "***", "NCCL_PROTO": "LL"}
    info = provenance.redact_info(
        {
            "api_key": "k",
            "ssl_keyfile_password": None,
            "max_total_tokens": 5,
            "internal_states": [{}],
        }
    )
    assert info == {"api_key": "***", "ssl_keyfile_password": None, "max_total_tokens": 5}


def test_prometheus_counters_are_summed_over_labels():
    text = (
        '# HELP x\nsglang:generation_tokens_total{is_streaming="false",m="a"} 40.0\n'
        'sglang:generation_tokens_total{is_streaming="true",m="a"} 12.0\n'
        'sglang:spec_verify_calls_total{m="a"} 30.0\nsglang:other 1\n'
    )
    got = probe.parse_prometheus(
        text, {"sglang:generation_tokens_total", "sglang:spec_verify_calls_total"}
    )
    assert got == {"sglang:generation_tokens_total": 52.0, "sglang:spec_verify_calls_total": 30.0}
    # a sample may carry a timestamp (ms) after its value: the value is not the last token
    stamped = (
        "# TYPE sglang:generation_tokens counter\n"
        'sglang:generation_tokens_total{m="a b"} 40 1700000000000\n'
        'sglang:generation_tokens_total{m="c\\\\"} 2.5e1 1700000000001\n'
    )
    got = probe.parse_prometheus(stamped, {"sglang:generation_tokens_total"})
    assert got == {"sglang:generation_tokens_total": 65.0}
    assert probe.parse_prometheus("not a metric {{{ page", {"x"}) == {}
    acc = probe.accept_from_counters(probe.Counters(52, 30, 3), probe.Counters(152, 70, 13))
    assert acc == probe.Counters(generation_tokens=100, verify_calls=40, requests=10)
    assert acc.accept_length == 2.5  # prefill-inclusive
    assert acc.decode_only(past_end=0, finished=99) == 90 / 40  # the 10 requests' prefill off
    assert acc.decode_only(past_end=4, finished=99) == 94 / 40
    no_requests = probe.accept_from_counters(probe.Counters(52, 30), probe.Counters(152, 70))
    assert no_requests.decode_only(0, finished=5) == 95 / 40  # the client's count instead
    assert (
        probe.accept_from_counters(probe.Counters(1, None), probe.Counters(9, None)).accept_length
        is None
    )


# ------------------------------------------------------------------ stream parsing
def test_stream_parser_handles_split_and_malformed_chunks():
    r = cl.RequestResult(index=0, prompt_id="p", start=0.0)
    p = cl.StreamParser(r)
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
        b": keep-alive comment\n\n"
        b"data: {not json}\n\n"
        b"garbage line\n\n"
        b'data: {"choices":[{"index":0,"delta":"oops"}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}'
        b'\n\ndata: {"choices":[],"usage":null,"sglext":{"spec_tokens_details":'
        b'{"spec_verify_ct":3}}}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9}}\n\n'
        b"data: [DONE]\n\n"
    )
    for i in range(0, len(stream), 7):  # arbitrary TCP boundaries
        p.feed(stream[i : i + 7], now=1.0 + i / 1000)
    p.finish(2.0)
    assert p.done and p.error is None
    assert r.text == "Hello" and r.malformed == 3 and len(r.chunk_times) == 2
    assert (r.prompt_tokens, r.completion_tokens, r.spec_verify_ct) == (7, 9, 3)
    assert r.finish_reason == "length" and r.ttft is not None
    q = cl.StreamParser(cl.RequestResult(index=0, prompt_id="p"))
    q.feed(b'data: {"error": {"message": "overloaded", "code": 503}}\n\ndata: [DONE]\n\n', 1.0)
    assert q.error == "overloaded"


# ------------------------------------------------------------------ analysis
def test_level_metrics():
    from sgl_eagle_ext.tools.bench.level_metrics import level_metrics
    from sgl_eagle_ext.tools.bench.loads import SLO, Load

    rs = [
        result(index=0, spec_verify_ct=4),
        result(index=1, spec_verify_ct=6, ttft=0.5),
        result(index=2, completion_tokens=5, finish_reason="stop", chunk_times=[0.1, 0.2]),
        cl.RequestResult(index=3, prompt_id="x", error="http 500", detail="boom"),
    ]
    f = level_metrics(rs, 2.0, Load(max_tokens=11), SLO(tpot_ms=100.1))
    assert (f["requests"], f["completed"], f["errors"], f["short"]) == (4, 3, {"http 500": 1}, 1)
    assert f["output_tokens"] == 27 and f["output_tok_s"] == 13.5 and f["request_s"] == 1.5
    # decode-only (SGLang's /server_info convention): each request's prefill token left out
    assert f["accept_length_requests"] == pytest.approx((22 - 2) / 10)
    assert f["accept_length_requests_with_prefill"] == pytest.approx(22 / 10)
    assert f["tpot_ms"]["p50"] == pytest.approx(100.0)
    assert f["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert f["tokens_per_chunk"] == pytest.approx(27 / 24)
    # TPOT of request 1 is 60 ms, of 0 is 100, of 2 is 250: two meet the SLO
    assert f["goodput_tok_s"] == pytest.approx(22 / 2.0) and f["goodput_req_s"] == 1.0
    assert f["error_examples"] == ["http 500: boom"]


def test_crossover():
    cx = compare.crossover
    assert cx([1, 2, 4], [1.3, 1.1, 1.01]).verdict == "always"
    never = cx([1, 2, 4], [0.9, 0.8, 0.7])
    assert never.verdict == "never" and never.level == 1
    until = cx([1, 2, 4, 8], [1.5, 1.2, 0.8, 0.6])
    assert (until.verdict, until.level, until.last_paying) == ("until", 4, 2)
    assert until.estimate == pytest.approx(2**1.5)  # crosses 1 halfway, log scale
    mixed = cx([1, 2, 4, 8], [1.5, 0.95, 1.1, 0.7])
    assert (mixed.verdict, mixed.level, mixed.losing_levels) == ("mixed", 8, (2,))
    assert cx([1, 2], [None, None]).verdict == "no data"
    assert compare.ratio(2.0, 0.0) == math.inf and compare.ratio(0.0, 0.0) is None
    none = dict.fromkeys(f.name for f in dataclasses.fields(compare.Pair))
    per = [
        compare.Pair(**{**none, "level": c, "throughput_ratio": r, "a_errors": 0, "b_errors": 0})
        for c, r in zip([1, 2, 4, 8], [1.5, 1.2, 0.8, 0.6])
    ]
    text = compare.recommend(
        "baseline", "eagle3-2step", until, figures.Crossover("no data"), per, "IDENTICAL", ""
    )
    assert "Serve eagle3-2step while the server runs at most ~2 concurrent" in text
    assert "from ~4 concurrent requests serve baseline" in text
    text = compare.recommend("baseline", "eagle3-2step", never, never, per, "DIFFERS", "x")
    assert text.startswith("Do not serve eagle3-2step") and "Serve baseline" in text


def test_lossless_compare():
    P = [prompts.Prompt(f"p{i}", (("user", "q"),)) for i in range(3)]
    a = [result(index=0, text="same"), result(index=1, text="abcdef"), result(index=2, text="z")]
    b = [
        result(index=0, text="same"),
        result(index=1, text="abcXef"),
        cl.RequestResult(index=2, prompt_id="p2", error="timeout"),
    ]
    f = lossless.compare(P, a, b)
    assert (f.verdict, f.identical, f.compared) == ("DIFFERS", 1, 2)
    assert f.differences[0].common_prefix_chars == 3
    assert f.failed == [lossless.NotCompared(2, "p2", "B: timeout")]
    lines = lossless.verdict_lines(f, "base", "spec")
    assert lines[0].startswith("lossless: DIFFERS: 1/2") and "same for 3 chars" in lines[1]
    assert lossless.compare(P[:1], a[:1], b[:1]).verdict == "IDENTICAL"


# ------------------------------------------------------------------ CLI: bad input
@pytest.mark.parametrize(
    "args, words",
    [
        (["sweep", "--concurrency", "1,x"], "not a comma-separated list of integers"),
        (["sweep", "--concurrency", "0,2"], "levels must be integers >= 1"),
        (["single", "--max-tokens", "0"], "--max-tokens 0: must be > 0"),
        (["single", "--prompts", "/nonexistent/p.jsonl"], "no such file, and not a shipped set"),
        (["sweep", "--url", "ftp://x"], "not an http(s) URL"),
        (["plot", "/nonexistent/r.jsonl"], "no such file"),  # checked before matplotlib
        (["ab", "--preset-a", "baseline", "--preset-b", "baseline"], "both 'baseline'"),
        (
            ["ab", "--preset-b", "eagle3-3step", "--cpu", "--model-path", "/tmp"],
            "speculates but no draft model is given",
        ),
        (["ab", "--preset-b", "no-such-preset", "--cpu", "--model-path", "/tmp"], "no-such-preset"),
        (["single", "--", "--port", "1"], "only go to `bench ab`"),
        (["sweep", "--header", "NoColon"], "--header NoColon (no = or :): not NAME=VALUE"),
        (["sweep", "--header", "Two Words: v"], "--header Two Words: not NAME=VALUE or NAME: V"),
        (["sweep", "--request-rate", "inf", "--duration", "5"], "a burst sends every request"),
        # alone it is bench_serving's (--request-rate inf, at most N in flight):
        # tests/test_bench_field_flags.py; with --concurrency it is refused
        (
            ["sweep", "--max-concurrency", "4", "--concurrency", "2"],
            "--max-concurrency caps an open-loop level",
        ),
        (["sweep", "--arrival", "constant"], "--arrival shapes open-loop arrivals"),
        (
            ["sweep", "--request-rate", "2", "--arrival", "constant", "--burstiness", "2"],
            "--arrival constant has no burstiness",
        ),
        (
            ["sweep", "--request-rate", "2", "--arrival", "poisson", "--burstiness", "2"],
            "Poisson is burstiness 1",
        ),
        (["sweep", "--slo", "ttft=5,latency=9"], "unknown goal 'latency'"),
        (["sweep", "--slo", "ttft:5", "tpot"], "'tpot' is not KEY=MS or KEY:MS"),
        (["sweep", "--slo", "ttft=5", "--slo-ttft-ms", "6"], "disagree"),
        (["sweep", "--extra-body", "{x"], "--extra-body: not valid JSON"),
        (["sweep", "--extra-body", "[1]"], "--extra-body: must be a JSON object"),
    ],
)
def test_bad_input_is_one_message(capsys, args, words):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and err.startswith("sgl_eagle_ext.bench: error")


def test_url_with_nothing_listening(tmp_path):
    out = run_bench(
        "sweep",
        "--url",
        f"http://127.0.0.1:{ports.pick()}",
        "--results",
        str(tmp_path / "r.jsonl"),
        timeout=120,
    )
    assert out.returncode == 2, out
    assert "nothing answers at http://127.0.0.1:" in out.stderr and "fix:" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "r.jsonl").exists()


# ------------------------------------------------------------------ fake endpoint: faults
@pytest.fixture
def fake():
    servers = []

    def start(**kw) -> Background:
        faults = Faults(**kw.pop("faults", {}))
        tls = kw.pop("tls", None)
        bg = Background(FakeSGLang(faults=faults, **kw), tls=tls).__enter__()
        servers.append(bg)
        return bg

    yield start
    for bg in servers:
        bg.stop()


def test_sweep_counts_every_fault_and_keeps_going(fake, tmp_path, capsys):
    bg = fake(
        accept_length=2.5, faults=dict(fail_every=5, malformed_every=4, drop_every=7, error_every=9)
    )
    res = tmp_path / "r.jsonl"
    rc = cli.main(
        [
            "sweep",
            "--url",
            bg.url,
            "--concurrency",
            "1,4",
            "--num-prompts",
            "20",
            "--max-tokens",
            "20",
            "--warmup",
            "1",
            "--results",
            str(res),
            "--label",
            "F",
        ]
    )
    assert rc == 0
    out = capsys.readouterr()
    recs = read_records(res)
    assert [r["concurrency"] for r in recs] == [1, 4]
    for r in recs:
        assert r["kind"] == "sweep" and r["status"] == "errors" and r["arm"] == "F"
        errs = r["errors"]
        assert errs["http 500"] >= 3 and errs["error in stream"] >= 2
        assert errs.get("stream ended early", 0) + errs.get("connection lost", 0) >= 1
        assert r["completed"] + sum(errs.values()) == r["requests"] == 20
        assert r["malformed_chunks"] >= 4 * r["completed"]
        assert r["output_tokens"] == 20 * r["completed"]
        # decode-only: 19 tokens after the prefill's in 8 cycles (the fake's 2.5 per cycle,
        # rounded up); the server also counted the in-stream-error requests' halves (9/4)
        assert 9 / 4 <= r["accept_length"] <= 19 / 8
        assert r["accept_length_source"] == "metrics delta"
        assert r["accept_length_requests"] == pytest.approx(19 / 8)
        assert r["accept_length_with_prefill"] > r["accept_length"]
        assert "other_traffic" not in r
    assert "failed request(s)" in out.err and "malformed stream chunk(s) skipped" in out.err
    assert len(read_csv(tmp_path / "r.csv")) == 2


def sweep_args(url: str, res: Path, *extra: str) -> list[str]:
    """A tiny sweep: levels 1,2, two prompts each, 6 tokens, no warm-up."""
    return [
        "sweep",
        "--url",
        url,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "2",
        "--prompts-per-concurrency",
        "0",
        "--max-tokens",
        "6",
        "--warmup",
        "0",
        "--results",
        str(res),
        *extra,
    ]


def test_interop_v1_url_headers_extra_body_and_openai_key(fake, tmp_path, capsys, monkeypatch):
    bg = fake(accept_length=2.0)
    res = tmp_path / "r.jsonl"
    monkeypatch.delenv("EAGLE_EXT_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
    monkeypatch.setattr(sys, "argv", ["bench", "sweep", "--header", "X-Team: secret-team"])
    args = sweep_args(
        bg.url + "/v1/", res, "--header", "X-Team: secret-team", "--extra-body", '{"top_p": 0.5}'
    )
    assert cli.main(args) == 0
    cap = capsys.readouterr()
    body, headers = bg.fake.last_body, bg.fake.last_headers
    assert headers["Authorization"] == "Bearer sk-never-shown"
    assert headers["X-Team"] == "secret-team" and body["top_p"] == 0.5
    assert body["messages"] and body["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
    recs = read_records(res)
    assert [(r["status"], r["completed"]) for r in recs] == [("ok", 2), ("ok", 2)]
    assert recs[0]["url"] == bg.url and recs[0]["endpoint"] == "chat"
    assert recs[0]["extra_body"] == {"top_p": 0.5}
    assert "--header 'X-Team:***'" in recs[0]["provenance"]["host"]["command"]
    everything = cap.out + cap.err + res.read_text() + (tmp_path / "r.csv").read_text()
    assert "sk-never-shown" not in everything and "secret-team" not in everything


@pytest.mark.parametrize("endpoint, path", [("completions", "prompt"), ("generate", "text")])
def test_completions_and_generate_endpoints(fake, tmp_path, endpoint, path):
    bg = fake(accept_length=2.0, token_text=" y")
    res = tmp_path / "r.jsonl"
    assert cli.main(sweep_args(bg.url, res, "--endpoint", endpoint)) == 0
    body = bg.fake.last_body
    assert isinstance(body[path], str) and "messages" not in body
    if endpoint == "generate":
        assert body["sampling_params"]["max_new_tokens"] == 6
        assert body["sampling_params"]["ignore_eos"] is True
    for r in read_records(res):
        assert (r["status"], r["completed"], r["output_tokens"]) == ("ok", 2, 12)
        assert r["endpoint"] == endpoint and r["tokens_estimated"] == 0
        # 6 tokens: the prefill's, then 5 at 2 per cycle (3 cycles), decode-only 5 / 3
        assert r["accept_length_requests"] == pytest.approx(5 / 3)
        assert r["accept_length"] == pytest.approx(5 / 3)
        assert r["itl_ms"]["p50"] is not None and r["ttft_ms"]["p50"] is not None


def test_generate_stream_text_cumulative_or_incremental():
    for incremental, texts in ((False, ["a", "ab", "abc"]), (True, ["a", "b", "c"])):
        r = cl.RequestResult(index=0, prompt_id="p")
        p = cl.StreamParser(r, cl.GENERATE, incremental)
        for k, t in enumerate(texts, start=1):
            meta = {"completion_tokens": k, "prompt_tokens": 4, "spec_verify_ct": 1}
            if k == 3:
                meta["finish_reason"] = {"type": "length", "length": 3}
            p.feed(f"data: {json.dumps({'text': t, 'meta_info': meta})}\n\n".encode(), k)
        p.feed(b"data: [DONE]\n\n", 4.0)
        assert (r.text, r.completion_tokens, r.finish_reason) == ("abc", 3, "length")
        assert (r.chunk_times, r.spec_verify_ct, p.done) == ([1, 2, 3], 1, True)


def test_timeouts_are_counted(fake, tmp_path):
    bg = fake(faults=dict(hang_every=2))
    res = tmp_path / "r.jsonl"
    rc = cli.main(
        [
            "sweep",
            "--url",
            bg.url,
            "--concurrency",
            "2",
            "--num-prompts",
            "4",
            "--max-tokens",
            "10",
            "--warmup",
            "0",
            "--request-timeout",
            "1",
            "--prompts-per-concurrency",
            "0",
            "--results",
            str(res),
        ]
    )
    assert rc == 0
    (r,) = read_records(res)
    assert r["errors"] == {"timeout": 2} and r["completed"] == 2
    assert r["accept_length"] is None and r["accept_length_source"] is None


def test_a_level_without_any_success_fails_the_command(fake, tmp_path, capsys):
    bg = fake(faults=dict(fail_every=1))
    rc = cli.main(
        [
            "sweep",
            "--url",
            bg.url,
            "--concurrency",
            "1",
            "--num-prompts",
            "2",
            "--max-tokens",
            "5",
            "--warmup",
            "0",
            "--prompts-per-concurrency",
            "0",
            "--results",
            str(tmp_path / "r.jsonl"),
        ]
    )
    assert rc == 1
    assert "no request succeeded at concurrency 1" in capsys.readouterr().err
    (r,) = read_records(tmp_path / "r.jsonl")
    assert r["errors"] == {"http 500": 2} and r["output_tok_s"] == 0.0


def test_single_flags_short_runs_and_averages_the_rest(fake, tmp_path, capsys):
    bg = fake(faults=dict(short_every=2))
    res = tmp_path / "r.jsonl"
    rc = cli.main(
        [
            "single",
            "--url",
            bg.url,
            "--max-tokens",
            "20",
            "--runs",
            "4",
            "--warmup",
            "1",
            "--results",
            str(res),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "warm-up 1/1: 20 tokens" in out
    assert out.count("SHORT: 10/20 tokens (finish stop): not averaged") == 2
    assert "over 2 counted run(s) of 4" in out and "95% CI" in out
    (r,) = read_records(res)
    # bench single is a sweep's one level at concurrency 1, its requests read as runs
    assert (r["kind"], r["shape"], r["concurrency"]) == ("sweep", "single", 1)
    assert r["short"] == 2 and r["tok_s"]["n"] == 2 and len(r["warmup"]) == 1
    assert [x["counted"] for x in r["runs_detail"]] == [False, True, False, True]
    assert [x["tokens"] for x in r["runs_detail"]] == [10, 20, 10, 20]


def _sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "sig, preexec",
    [
        (signal.SIGINT, None),
        (signal.SIGTERM, None),
        # started as a script's `bench ... &` is: SIGINT ignored, inherited; kill still works
        (signal.SIGTERM, _sigint_ignored),
        (signal.SIGINT, _sigint_ignored),
    ],
    ids=["SIGINT", "SIGTERM", "SIGTERM-sigint-ignored", "SIGINT-sigint-ignored"],
)
def test_ctrl_c_writes_what_was_finished(fake, tmp_path, sig, preexec):
    # Level 1 (3 requests) finishes; level 2's first request (the 4th) hangs halfway, so
    # level 2 cannot finish before the signal, however slow the machine.
    bg = fake(delay_ms=5, faults=dict(hang_every=4))
    res = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        bench_cmd(
            "sweep",
            "--url",
            bg.url,
            "--concurrency",
            "1,2",
            "--num-prompts",
            "3",
            "--prompts-per-concurrency",
            "1",
            "--max-tokens",
            "20",
            "--warmup",
            "0",
            "--results",
            str(res),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    lines = []
    for line in proc.stdout:  # wait for level 1's row
        lines.append(line)
        if line.startswith("    1 "):
            break
    # level 2 is running: its first request has reached the server
    wait_until(lambda: bg.fake.requests >= 4, 120, "level 2's first request")
    proc.send_signal(sig)  # SIGTERM (kill, a service manager) records it like Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (lines, out, err)
    assert "interrupted at concurrency 2; finished results are recorded" in err
    assert "Traceback" not in err
    recs = read_records(res)
    assert [(r["concurrency"], r["status"]) for r in recs] == [(1, "ok"), (2, "interrupted")]
    assert recs[0]["completed"] == 3 and recs[1]["completed"] < 3


def test_lossless_between_two_endpoints(fake, tmp_path, capsys):
    a, same, other = fake(), fake(), fake(token_text=" y")
    res = tmp_path / "r.jsonl"
    assert (
        cli.main(
            [
                "lossless",
                "--url-a",
                a.url,
                "--url-b",
                same.url,
                "--num-prompts",
                "3",
                "--max-tokens",
                "5",
                "--results",
                str(res),
            ]
        )
        == 0
    )
    assert "lossless: IDENTICAL: 3/3 outputs of B match A" in capsys.readouterr().out
    assert (
        cli.main(
            [
                "lossless",
                "--url-a",
                a.url,
                "--url-b",
                other.url,
                "--num-prompts",
                "2",
                "--max-tokens",
                "5",
                "--results",
                str(res),
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "lossless: DIFFERS: 2/2 compared outputs of B differ from A" in out
    assert "same for 1 chars, then" in out and "A: ' x x x x x'" in out
    ok, bad = read_records(res)
    assert (ok["kind"], ok["verdict"], ok["identical"]) == ("lossless", "IDENTICAL", 3)
    assert (bad["verdict"], len(bad["differences"])) == ("DIFFERS", 2)
    assert bad["url_b"] == other.url and bad["provenance"]["arms"]["B"]["url"] == other.url


@pytest.mark.harness  # bench plot: matplotlib (the test extra)
def test_plot_draws_both_arms(tmp_path, capsys):
    rec = records.Recorder(tmp_path / "r.jsonl", run_id="R1")
    prov = {
        "host": {},
        "server": {"model_path": "m", "sglang_version": "0.5.23"},
        "prompts": {"set": "mixed"},
    }
    for arm, scale in (("baseline", 1.0), ("eagle3-2step", 1.4)):
        for c in (1, 2, 4, 8):
            lat = {"p50": 10.0 * c, "p90": 12.0 * c, "p99": 15.0 * c}
            rec.write(
                "sweep",
                {
                    "arm": arm,
                    "status": "ok",
                    "concurrency": c,
                    "max_tokens": 64,
                    "output_tok_s": scale * 50 * c**0.5,
                    "tpot_ms": lat,
                    "ttft_ms": lat,
                    "e2e_ms": lat,
                },
                prov,
            )
    rec.write("sweep", {"arm": "baseline", "status": "interrupted", "concurrency": 16}, prov)
    with open(tmp_path / "r.jsonl", "a") as f:
        f.write('{"torn')
    out_png = tmp_path / "fig.png"
    assert cli.main(["plot", str(tmp_path / "r.jsonl"), "-o", str(out_png)]) == 0
    cap = capsys.readouterr()
    assert out_png.read_bytes()[:8] == PNG_MAGIC and out_png.stat().st_size > 20_000
    assert "baseline: 4 level(s), eagle3-2step: 4 level(s)" in cap.out
    assert "baseline c=16 (interrupted)" in cap.err and "r.jsonl:10: skipped" in cap.err


def test_plot_without_matplotlib_is_one_line(monkeypatch, tmp_path, capsys):
    rec = records.Recorder(tmp_path / "r.jsonl", run_id="R1")
    for c in (1, 2):  # two levels: one level draws nothing, matplotlib or not
        rec.write("sweep", {"arm": "a", "status": "ok", "concurrency": c}, {})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert cli.main(["plot", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "bench plot needs matplotlib" in err and "sgl-eagle-ext[plot]" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------ open loop
def test_arrival_schedule_statistics():
    """Gamma gaps with shape = burstiness and mean 1/rate (Poisson at 1), seeded."""
    import numpy as np

    from sgl_eagle_ext.tools.bench import arrivals

    for burst in (1.0, 0.25, 4.0):
        t = arrivals.schedule(4.0, burst, seed=7, count=20001)
        gaps = np.diff(t)
        assert t[0] == 0.0 and len(t) == 20001 and np.all(gaps >= 0)
        assert gaps.mean() == pytest.approx(0.25, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burst), rel=0.06)
    # Poisson: arrivals per second have variance = mean, gaps are memoryless
    t = arrivals.schedule(4.0, 1.0, seed=3, duration=5000.0)
    assert t.max() < 5000.0
    counts = np.bincount(t.astype(int), minlength=5000)
    assert counts.mean() == pytest.approx(4.0, rel=0.03)
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.08)
    gaps = np.diff(t)
    assert (gaps > 0.5).mean() == pytest.approx(math.exp(-2.0), rel=0.05)
    assert ((gaps > 0.75).mean() / (gaps > 0.25).mean()) == pytest.approx(math.exp(-2.0), rel=0.08)
    # the same (seed, rate, burstiness): the same arrivals, for every arm
    a = arrivals.schedule(2.0, 0.5, seed=1, count=50)
    assert np.array_equal(a, arrivals.schedule(2.0, 0.5, seed=1, count=50))
    assert not np.array_equal(a, arrivals.schedule(2.0, 0.5, seed=2, count=50))
    assert not np.array_equal(a, arrivals.schedule(2.5, 0.5, seed=1, count=50))


@pytest.mark.parametrize(
    "args, words",
    [
        (["--concurrency", "1", "--request-rate", "2"], "both given"),
        (["--duration", "0"], "--duration 0: must be > 0"),
        (["--request-rate", "2", "--max-concurrency", "0"], "--max-concurrency 0: must be > 0"),
        (["--request-rates", "0,1"], "request rates must be positive"),
        (["--request-rates", "1,x"], "not a comma-separated list of numbers"),
        (["--request-rate", "2", "--burstiness", "0"], "--burstiness 0: must be > 0"),
    ],
)
def test_open_loop_bad_input(fake, tmp_path, capsys, args, words):
    bg = fake()
    assert cli.main(["sweep", "--url", bg.url, "--results", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_open_loop_sweep_follows_the_schedule(fake, tmp_path, capsys):
    from sgl_eagle_ext.tools.bench import arrivals

    bg = fake(accept_length=2.0)
    res = tmp_path / "r.jsonl"
    args = sweep_args(bg.url, res, "--request-rates", "40,20", "--burstiness", "2")
    args.remove("--concurrency")
    args.remove("1,2")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "request rates 20,40 req/s (open loop, gamma arrivals, burstiness 2)" in out
    assert out.count("\n") and " rate  done" in out
    recs = read_records(res)
    assert [(r["request_rate"], r["concurrency"]) for r in recs] == [(20.0, None), (40.0, None)]
    for r in recs:
        sched = arrivals.schedule(r["request_rate"], 2.0, seed=0, count=2)
        assert r["arrivals"] == r["requests"] == r["completed"] == 2
        assert r["burstiness"] == 2.0 and r["status"] == "ok"
        assert r["offered_rate"] == pytest.approx(1 / sched[1])
        assert r["send_lag_ms"]["p50"] is not None
    # --duration: as many arrivals as the schedule puts in it
    res2 = tmp_path / "d.jsonl"
    args = sweep_args(bg.url, res2, "--request-rate", "50", "--duration", "0.3")
    args.remove("--concurrency")
    args.remove("1,2")
    assert cli.main(args) == 0
    (r,) = read_records(res2)
    expected = len(arrivals.schedule(50.0, 1.0, seed=0, duration=0.3))
    assert r["arrivals"] == r["requests"] == expected and r["duration_target_s"] == 0.3


def test_progress_lines_off_a_tty(fake, tmp_path, capsys):
    bg = fake(delay_ms=5)
    res = tmp_path / "r.jsonl"
    assert cli.main(sweep_args(bg.url, res, "--progress-every", "0")) == 0
    err = capsys.readouterr().err  # not a TTY under pytest
    lines = [x for x in err.splitlines() if x.startswith("progress c=")]
    assert lines and all("ETA" in x and "/2 requests" in x for x in lines), err


def test_dead_server_cuts_the_level_short(fake, tmp_path, capsys):
    bg = fake(delay_ms=30)  # 6 tokens: ~0.2 s per request
    res = tmp_path / "r.jsonl"
    args = sweep_args(bg.url, res, "--num-prompts", "12")
    threading.Timer(1.2, bg.stop).start()  # level 1 (12 requests) takes ~2.5 s
    rc = cli.main(args)
    out = capsys.readouterr()
    assert rc == 1
    recs = read_records(res)
    died = recs[-1]
    assert died["status"] == "server died" and died["cut_short"] is True
    assert died["not_sent"] > 0 and died["requests"] + died["not_sent"] == 12
    assert "SERVER DIED: cut short" in out.out and "stopped answering" in out.err


# ------------------------------------------------------------------ compare (fake arms)
@pytest.fixture
def fake_arms(fake, monkeypatch):
    """bench ab/compare with each preset served by a fake endpoint instead of a launcher."""
    from sgl_eagle_ext.tools.bench import arms

    urls: dict[str, str] = {}
    trust: dict[str, object] = {}  # how each arm's launcher trusts its server (TLS)

    def plan_arm(label, preset, **kw):
        return arms.ArmPlan(label, preset, ["--preset", preset], {"preset": preset})

    class Launched:
        def __init__(self, plan):
            self.plan = plan
            self.stopped_cleanly = True
            self.tls = trust.get(plan.preset)

        def wait_ready(self, timeout):
            return urls[self.plan.preset]

        def stop(self):
            return 0

    monkeypatch.setattr(arms, "plan_arm", plan_arm)
    monkeypatch.setattr(arms, "LauncherProcess", Launched)

    def serve(preset: str, cert: tuple[Path, Path] | None = None, **kw) -> None:
        if cert is not None:  # SGLang given its own certificate: https, trusted pinned
            kw["tls"] = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            kw["tls"].load_cert_chain(*cert)
            trust[preset] = http.tls_context(cafile=str(cert[0]), pinned=True)
        urls[preset] = fake(**kw).url

    return serve


def compare_args(res: Path, tmp_path: Path, *arms_and_levels: str) -> list[str]:
    return [
        *arms_and_levels,
        "--num-prompts",
        "8",
        "--prompts-per-concurrency",
        "0",
        "--max-tokens",
        "4",
        "--warmup",
        "0",
        "--lossless-prompts",
        "2",
        "--lossless-max-tokens",
        "3",
        "--results",
        str(res),
        "--log-dir",
        str(tmp_path / "logs"),
    ]


def test_compare_n_arms_best_arm_ratios_and_crossover(fake_arms, tmp_path, capsys):
    # "spec" wins alone and slows down with load; "baseline" barely does; "slow" never wins.
    # Per token: c=1 spec 21 ms vs baseline 40 ms (32 tokens a level: 0.6 s apart); c=8
    # spec 161 ms vs baseline 42 ms (4 tokens a stream: 0.48 s apart); slow 200 ms (0.6 s
    # behind at c=8). One scheduling stall on a busy machine cannot flip a winner (gaps of
    # ~0.1 s could, and once did).
    fake_arms("baseline", delay_ms=40, delay_per_stream_ms=0.2)
    fake_arms("spec", delay_ms=1, delay_per_stream_ms=20, accept_length=2.5)
    fake_arms("slow", delay_ms=200)
    res = tmp_path / "c.jsonl"
    args = ["compare", "--arm", "baseline", "--arm", "spec", "--arm", "slow"]
    rc = cli.main(compare_args(res, tmp_path, *args, "--concurrency", "1,8"))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "=== compare " in out and "(reference baseline)" in out
    assert "best arm by throughput: spec at c=1, baseline at c=8" in out
    assert "crossover by throughput, spec vs baseline: c=8" in out
    assert "crossover by throughput, slow vs baseline: speculation never pays" in out
    assert "lossless: IDENTICAL: 2/2 outputs of spec match baseline" in out
    recs = read_records(res)
    sweeps = [r for r in recs if r["kind"] == "sweep"]
    assert [(r["arm"], r["arm_label"], r["concurrency"]) for r in sweeps] == [
        ("baseline", "A", 1),
        ("baseline", "A", 8),
        ("spec", "B", 1),
        ("spec", "B", 8),
        ("slow", "C", 1),
        ("slow", "C", 8),
    ]
    (c,) = [r for r in recs if r["kind"] == "compare"]
    assert c["arms"] == ["baseline", "spec", "slow"] and c["reference"] == "baseline"
    assert [(lv["level"], lv["best"]) for lv in c["levels"]] == [(1, "spec"), (8, "baseline")]
    by = {(r["arm"], r["concurrency"]): r["output_tok_s"] for r in sweeps}
    for lv in c["levels"]:
        top = by[(lv["best"], lv["level"])]
        for arm, ratio in lv["ratio_to_best"].items():
            assert ratio == pytest.approx(by[(arm, lv["level"])] / top)
        assert lv["ratio_to_best"][lv["best"]] == 1.0
    assert c["crossover_throughput"]["spec"]["verdict"] == "until"
    assert c["crossover_throughput"]["slow"]["verdict"] == "never"
    assert c["lossless"] == {"spec": "IDENTICAL", "slow": "IDENTICAL"}
    assert all(r["run_id"] == c["run_id"] for r in recs)


def test_an_arm_on_its_own_certificate_is_trusted_as_its_launcher_trusts_it(
    fake_arms, tmp_path, capsys
):
    """An arm started with --ssl-certfile (a self-signed certificate) serves https: bench
    reaches it as the launcher polled it, with that certificate alone, no --insecure."""
    from tests.test_http_origin_tls import make_cert

    fake_arms("baseline")
    fake_arms("spec", cert=make_cert(tmp_path), accept_length=2.0)
    res = tmp_path / "ab.jsonl"
    args = ["ab", "--preset-a", "baseline", "--preset-b", "spec", "--concurrency", "1"]
    rc = cli.main(compare_args(res, tmp_path, *args))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "[B] ready: https://127.0.0.1:" in out
    sweeps = [r for r in read_records(res) if r["kind"] == "sweep"]
    assert [(r["arm"], r["url"][:6]) for r in sweeps] == [
        ("baseline", "http:/"),
        ("spec", "https:"),
    ]


def test_ab_is_compare_with_two_arms_over_request_rates(fake_arms, tmp_path, capsys):
    fake_arms("baseline")
    fake_arms("spec", accept_length=2.0, token_text=" z")
    res = tmp_path / "ab.jsonl"
    args = ["ab", "--preset-a", "baseline", "--preset-b", "spec", "--request-rates", "50,100"]
    rc = cli.main(compare_args(res, tmp_path, *args))
    out = capsys.readouterr().out
    assert rc == 1  # the lossless check found differences
    assert "A/B run " in out and "request rates 50,100 req/s (open loop, Poisson" in out
    assert "crossover by throughput, spec vs baseline: " in out and "lossless: DIFFERS" in out
    assert "B/A" in out and "recommendation (spec vs baseline): " in out  # the A/B table
    recs = read_records(res)
    assert [r["kind"] for r in recs] == ["sweep"] * 4 + ["lossless", "compare"]
    ab = recs[-1]
    assert ab["level_key"] == "request_rate" and ab["burstiness"] == 1.0
    assert ab["arms"] == ["baseline", "spec"] and ab["lossless"] == {"spec": "DIFFERS"}
    assert [lv["request_rate"] for lv in ab["pairs"]["spec"]] == [50.0, 100.0]
    assert [r["request_rate"] for r in recs[:4]] == [50.0, 100.0, 50.0, 100.0]
    assert [r["arrivals"] for r in recs[:4]] == [8, 8, 8, 8]
    # the same arrivals on both arms: a level's offered rate is its schedule's
    assert recs[0]["offered_rate"] == pytest.approx(recs[2]["offered_rate"])
    assert recs[1]["offered_rate"] == pytest.approx(recs[3]["offered_rate"])


@pytest.mark.harness  # bench plot: matplotlib (the test extra)
def test_plot_draws_every_arm_of_a_compare_over_request_rates(fake_arms, tmp_path, capsys):
    for name in ("baseline", "spec", "other"):
        fake_arms(name)
    res = tmp_path / "c.jsonl"
    args = ["compare", "--arm", "baseline", "--arm", "spec", "--arm", "other"]
    assert cli.main(compare_args(res, tmp_path, *args, "--request-rates", "50,100")) == 0
    capsys.readouterr()
    png = tmp_path / "c.png"
    assert cli.main(["plot", str(res), "-o", str(png)]) == 0
    assert "baseline: 2 level(s), spec: 2 level(s), other: 2 level(s)" in capsys.readouterr().out
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20_000


@pytest.mark.parametrize(
    "arms, words",
    [
        (["--arm", "baseline"], "needs at least two --arm"),
        (["--arm", "baseline", "--arm", "baseline"], "--arm baseline is given more than once"),
    ],
)
def test_compare_bad_arms(capsys, arms, words):
    assert cli.main(["compare", *arms]) == 2
    assert words in capsys.readouterr().err


# ------------------------------------------------------------------ packaging
@pytest.mark.harness  # builds a wheel: setuptools with bdist_wheel
def test_wheel_ships_no_test_double(tmp_path):
    """The built wheel holds the bench package but no fake server; matplotlib is an extra."""
    import shutil
    import zipfile

    root = Path(__file__).resolve().parents[1]
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    for name in ("sgl_eagle_ext", "launch", "patches"):  # the package links into launch/, patches/
        shutil.copytree(
            root / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("sgl_eagle_ext-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "sgl_eagle_ext/tools/bench/client.py" in names
    assert "sgl_eagle_ext/tools/bench/prompt_sets/coding.jsonl" in names
    assert not [n for n in names if "fake" in n.lower() or n.startswith("tests/")]
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: matplotlib")]
    assert requires and all("extra ==" in line for line in requires), requires


# ------------------------------------------------------------------ real SGLang on CPU


def corpus_prompts(tmp_path: Path, indexes) -> Path:
    """A prompts file of the tiny target's corpus texts: the trained pair keeps its
    designed acceptance on that text, not on the shipped coding/encyclopedic sets."""
    from sgl_eagle_ext.cpu.tiny_corpus import CORPUS

    path = tmp_path / "corpus.jsonl"
    lines = (
        json.dumps({"id": f"corpus-{i + 1}", "messages": [{"role": "user", "content": CORPUS[i]}]})
        for i in indexes
    )
    path.write_text("".join(line + "\n" for line in lines))
    return path


def check_provenance(
    rec: dict, tiny_models: dict, speculative: bool, prompt_set: str = "mixed"
) -> None:
    prov = rec["provenance"]
    host = prov["host"]
    assert host["date"] and host["command"].startswith("python -m sgl_eagle_ext.bench")
    assert host["project"]["version"] and host["sglang_installed"] == "0.5.23"
    assert host["gpu"]["gpus"] == [] and "nvidia-smi" in host["gpu"]["note"]
    srv = prov["server"]
    assert srv["sglang_version"] == "0.5.23"
    assert srv["model_path"] == str(tiny_models["target"])
    assert srv["resolved_args"]["device"] == "cpu"
    if speculative:
        assert srv["draft_model_path"] == str(tiny_models[TARGET_DRAFT])
        assert srv["speculative"]["speculative_algorithm"] == "EAGLE3"
        assert srv["speculative"]["speculative_num_steps"] == 3
    assert prov["prompts"]["sha256"] == prompts.load(prompt_set).sha256
    assert prov["prompts"]["set"] == prompt_set


@pytest.mark.server
def test_single_on_cpu_server(spec_server, tiny_models, tmp_path):
    # the launcher's spec check (one generation after READY) must not fall in the window
    spec_server.wait_for("spec check")
    # The tiny target was trained on the project's corpus: its designed acceptance
    # holds on that text, not on the shipped coding/encyclopedic sets.
    corpus_prompt = corpus_prompts(tmp_path, [4])
    res = tmp_path / "r.jsonl"
    out = run_bench(
        "single",
        "--url",
        spec_server.base_url,
        "--prompts",
        str(corpus_prompt),
        "--max-tokens",
        "8",
        "--runs",
        "3",
        "--warmup",
        "1",
        "--results",
        str(res),
        "--label",
        "spec",
    )
    assert out.returncode == 0, out.stderr
    for words in (
        "warm-up 1/1: 8 tokens",
        "run 1/3: 8 tokens",
        "run 3/3: 8 tokens",
        "95% CI",
        "tokens per verify cycle (metrics delta)",
    ):
        assert words in out.stdout, out.stdout
    (r,) = read_records(res)
    assert (r["kind"], r["shape"], r["status"], r["arm"], r["url"]) == (
        "sweep",
        "single",
        "ok",
        "spec",
        spec_server.base_url,
    )
    assert (r["concurrency"], r["max_tokens"], r["ignore_eos"]) == (1, 8, True)
    assert r["temperature"] == 0.0
    assert len(r["warmup"]) == 1 and len(r["runs_detail"]) == 3
    for i, run in enumerate(r["runs_detail"], start=1):
        assert run["run"] == i and run["ok"] and run["tokens"] == 8 and not run["short"]
        assert run["counted"] and run["prompt_tokens"] > 8 and run["seconds"] > 0
        assert run["tok_s"] == pytest.approx(8 / run["seconds"])
        assert 1.0 <= run["accept_length"] <= 4.0 and run["verify_calls"] >= 2
    t = r["tok_s"]
    assert t["n"] == 3 and t["min"] <= t["median"] <= t["max"]
    assert t["ci95_low"] <= t["mean"] <= t["ci95_high"]
    seconds = sum(run["seconds"] for run in r["runs_detail"])
    assert r["overall_tok_s"] == pytest.approx(24 / seconds)
    assert r["short"] == 0 and r["errors"] == {} and isinstance(r["steady"], bool)
    # decode-only (SGLang's /server_info figure): drafts accepted, so above 1 per cycle
    assert 1.0 < r["accept_length"] <= 4.0 and r["accept_length_source"] == "metrics delta"
    assert r["accept_length_requests_with_prefill"] > r["accept_length"]
    assert r["accept_length"] == pytest.approx(r["accept_length_requests"])
    check_provenance(r, tiny_models, speculative=True, prompt_set=str(corpus_prompt))
    proc = r["provenance"]["server"]["process"]
    assert "--speculative-num-steps" in proc["cmdline"] and proc["env"]["NCCL_PROTO"] == "LL"
    (row,) = read_csv(tmp_path / "r.csv")
    assert (row["kind"], row["run_id"], row["sglang_version"]) == ("sweep", r["run_id"], "0.5.23")
    assert float(row["tok_s_mean"]) == pytest.approx(t["mean"]) and row["runs"] == "3"


@pytest.mark.server
def test_sweep_on_cpu_server(spec_server, tiny_models, tmp_path):
    spec_server.wait_for("spec check")  # its generation must not fall in a level
    res = tmp_path / "r.jsonl"
    out = run_bench(
        "sweep",
        "--url",
        spec_server.base_url,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "2",
        "--prompts-per-concurrency",
        "1",
        "--max-tokens",
        "8",
        "--warmup",
        "1",
        "--results",
        str(res),
        "--slo-tpot-ms",
        "100000",
    )
    assert out.returncode == 0, out.stderr
    assert "TTFT ms p50/90/99" in out.stdout
    recs = read_records(res)
    assert [r["concurrency"] for r in recs] == [1, 2]
    assert len({r["run_id"] for r in recs}) == 1
    for r in recs:
        assert (r["kind"], r["status"], r["requests"], r["completed"]) == ("sweep", "ok", 2, 2)
        assert r["errors"] == {} and r["short"] == 0 and r["malformed_chunks"] == 0
        assert r["output_tokens"] == 16 and r["prompt_tokens"] > 16
        assert r["output_tok_s"] == pytest.approx(16 / r["duration_s"])
        assert r["request_s"] == pytest.approx(2 / r["duration_s"])
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert 0 < r[m]["p50"] <= r[m]["p90"] <= r[m]["p99"], (m, r[m])
        assert r["e2e_ms"]["p99"] <= r["duration_s"] * 1e3
        assert 1.0 < r["accept_length"] <= 4.0  # decode-only: the prefill's token left out
        # the prefill-inclusive figure counts each request's first token; the decode-only
        # one leaves it out and counts the drafts SGLang accepted past a request's end
        # (equal where each request accepted one: this machine's build of the pair did)
        assert r["accept_length_with_prefill"] - r["accept_length"] == pytest.approx(
            (r["completed"] - r["accepted_past_end"]) / r["verify_calls_metrics"]
        )
        assert r["accept_length_source"] == "metrics delta"
        assert r["generation_tokens_metrics"] == 16  # exactly this level's tokens
        assert r["accept_length"] == pytest.approx(r["accept_length_requests"])
        assert r["goodput_tok_s"] == pytest.approx(r["output_tok_s"])  # generous SLO
        # one stream has no ramp-up or drain to note; its requests are runs (a 95% CI)
        assert r["prompts_per_level"] == 2
        assert ("steady_state_note" in r) == ("tok_s" not in r) == (r["concurrency"] > 1)
        if r["concurrency"] == 1:
            t = r["tok_s"]
            assert t["n"] == 2 and t["ci95_low"] <= t["mean"] <= t["ci95_high"]
            assert isinstance(r["steady"], bool)
        check_provenance(r, tiny_models, speculative=True)
    assert len(read_csv(tmp_path / "r.csv")) == 2
    # the batch cap the sweep names levels above: real SGLang's resolved value (the CPU
    # overlay's --max-running-requests)
    from sgl_eagle_ext.tools.bench import probe, session

    assert session.batch_cap(probe.Server(spec_server.base_url).connect().info) == 8


@pytest.mark.server
@pytest.mark.parametrize("endpoint", ["completions", "generate"])
def test_other_endpoints_and_v1_url_on_cpu_server(spec_server, tmp_path, endpoint):
    """/v1/completions and SGLang's /generate, with the URL as OpenAI clients write it."""
    res = tmp_path / "r.jsonl"
    out = run_bench(
        "sweep",
        "--url",
        spec_server.base_url + "/v1",
        "--endpoint",
        endpoint,
        "--concurrency",
        "2",
        "--num-prompts",
        "2",
        "--prompts-per-concurrency",
        "0",
        "--max-tokens",
        "8",
        "--warmup",
        "0",
        "--results",
        str(res),
    )
    assert out.returncode == 0, out.stderr
    (r,) = read_records(res)
    assert (r["status"], r["completed"], r["output_tokens"]) == ("ok", 2, 16)
    assert r["endpoint"] == endpoint and r["url"] == spec_server.base_url
    assert r["tokens_estimated"] == 0 and r["prompt_tokens"] > 2
    assert 1.0 <= r["accept_length_requests"] <= 4.0  # streamed per-request verify counts
    assert r["accept_length"] == pytest.approx(r["accept_length_requests"])


@pytest.mark.server
def test_server_killed_mid_sweep(tiny_models, start_launcher, tmp_path):
    """Kills its server: its own, not the shared spec_server."""
    server = start_launcher(
        *SPEC_SERVER_ARGS,
        "--no-spec-check",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models[TARGET_DRAFT]),
    )
    server.wait_for("READY in")
    res = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        bench_cmd(
            "sweep",
            "--url",
            server.base_url,
            "--concurrency",
            "1,2",
            "--num-prompts",
            "2",
            "--prompts-per-concurrency",
            "1",
            "--max-tokens",
            "32",
            "--warmup",
            "0",
            "--results",
            str(res),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # level 1 done: level 2 (2 x 32 tokens) is next
        if line.startswith("    1 "):
            break
    # Kill at once: whether level 2's requests are refused or cut, it cannot finish
    # (a pause here gave a quiet machine time to finish it).
    for pid in http.listener_pids(server.port) or ():
        psutil.Process(pid).kill()  # the SGLang HTTP server; its scheduler follows it
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out, err)
    assert "stopped answering during concurrency 2" in err and "Traceback" not in err
    recs = read_records(res)
    assert [(r["concurrency"], r["status"]) for r in recs] == [(1, "ok"), (2, "server died")]
    died = recs[1]
    assert died["requests"] == 2 and died["completed"] < 2 and died["cut_short"] is True
    assert set(died["errors"]) <= {"connection lost", "stream ended early", "connection refused"}
    assert "SERVER DIED: cut short" in out
    assert len(read_csv(tmp_path / "r.csv")) == 2


@pytest.mark.server
def test_ab_baseline_vs_eagle3_on_cpu(tiny_models, tmp_path):
    """bench ab: two presets started in process from their plans, the same prompts on
    both, the A/B report, the lossless check and a plot. (bench compare runs the same
    arms and load: its N-arm report and open-loop levels are tested on stand-in arms
    above; two more real servers would check nothing this one does not.)"""
    res = tmp_path / "ab.jsonl"
    out = run_bench(
        "ab",
        "--preset-a",
        "baseline",
        "--preset-b",
        "eagle3-3step",
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models[TARGET_DRAFT]),
        "--concurrency",
        "1,2",
        "--prompts",
        str(corpus_prompts(tmp_path, [4, 5])),
        "--num-prompts",
        "2",
        "--prompts-per-concurrency",
        "1",
        "--max-tokens",
        "6",
        "--warmup",
        "0",
        "--lossless-prompts",
        "2",
        "--lossless-max-tokens",
        "8",
        "--results",
        str(res),
        "--log-dir",
        str(tmp_path / "logs"),
        timeout=1500,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "[A] starting baseline:" in text and "--cpu" in text
    for words in (
        "[A] baseline stopped (cleanly)",
        "[B] eagle3-3step stopped (cleanly)",
        "=== A/B ",
        "crossover by throughput, eagle3-3step vs baseline:",
        "crossover by latency goodput",
        "lossless: IDENTICAL: 2/2 outputs of eagle3-3step match baseline",
        "recommendation (eagle3-3step vs baseline): ",
    ):
        assert words in text, text
    recs = read_records(res)
    kinds = [r["kind"] for r in recs]
    assert kinds == ["sweep", "sweep", "sweep", "sweep", "lossless", "compare"]
    run_id = recs[0]["run_id"]
    assert all(r["run_id"] == run_id for r in recs)
    sweeps = recs[:4]
    assert [(r["arm"], r["concurrency"]) for r in sweeps] == [
        ("baseline", 1),
        ("baseline", 2),
        ("eagle3-3step", 1),
        ("eagle3-3step", 2),
    ]
    for r in sweeps:
        assert r["status"] == "ok" and r["completed"] == 2 and r["output_tokens"] == 12
        assert r["slo"]["source"].startswith("default: 2 x p50 TPOT of the first arm at c=1")
        srv = r["provenance"]["server"]
        assert srv["started_by"].startswith("bench ab")
        assert "--cpu" in srv["launch_command"]
        assert str(tiny_models["target"]) in srv["launch_command"]
        assert srv["preset_env"]["NCCL_PROTO"] == "LL"
        assert srv["preset_env"]["TRITON_INTERPRET"] == "1"
        assert srv["args"][srv["args"].index("--device") + 1] == "cpu"
        assert Path(srv["log_file"]).is_file()
    a1, a2, b1, b2 = sweeps
    assert a1["accept_length"] is None and a1["provenance"]["server"]["preset"] == "baseline+cpu"
    assert 1.0 < b1["accept_length"] <= 4.0  # decode-only, as /server_info
    assert b1["provenance"]["server"]["preset"] == "eagle3-3step+cpu"
    assert "--speculative-num-steps" in b1["provenance"]["server"]["args"]
    assert str(tiny_models[TARGET_DRAFT]) in b1["provenance"]["server"]["launch_command"]
    ll, ab = recs[4], recs[5]
    assert (ll["verdict"], ll["compared"], ll["identical"], ll["differences"]) == (
        "IDENTICAL",
        2,
        2,
        [],
    )
    assert ab["arms"] == ["baseline", "eagle3-3step"] and ab["reference"] == "baseline"
    assert ab["lossless"] == {"eagle3-3step": "IDENTICAL"} and ab["recommendation"]["eagle3-3step"]
    pairs = ab["pairs"]["eagle3-3step"]
    assert [lv["concurrency"] for lv in pairs] == [1, 2]
    for lv, fa, fb in zip(pairs, (a1, a2), (b1, b2)):
        assert lv["throughput_ratio"] == pytest.approx(fb["output_tok_s"] / fa["output_tok_s"])
        assert lv["b_accept_length"] == pytest.approx(fb["accept_length"])
    verdict = ab["crossover_throughput"]["eagle3-3step"]["verdict"]
    assert verdict in ("always", "never", "until", "mixed")
    assert set(ab["provenance"]["arms"]) == {"A", "B"}
    # both servers are gone
    port = int(a1["url"].rsplit(":", 1)[1])
    assert not http.listener_pids(port)
    # the records make a figure
    png = tmp_path / "ab.png"
    plot = run_bench("plot", str(res), "--run-id", run_id, "-o", str(png), timeout=120)
    assert plot.returncode == 0, plot.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "baseline: 2 level(s), eagle3-3step: 2 level(s)" in plot.stdout
