"""Workload features of `bench` (issue 12): length control, long prompts, datasets
(ShareGPT, the project's JSONL, random, long), multi-turn replay, per-request
records and goodput, speculation by workload, Pareto, the HTML report checked in
a real headless browser. Fast tests use a local fake endpoint; one real CPU
SGLang server (module-scoped, marked `server`) checks what depends on SGLang:
`usage` token counts and the per-request speculation figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from fakes.fake_sglang import Background, FakeSGLang

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import (
    datasets,
    goodput,
    loads,
    multiturn,
    records,
    request_log,
    session,
    spec_view,
    tokens,
)
from sgl_eagle_ext.tools.bench.lengths import LengthSpec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ lengths
def test_length_specs():
    assert LengthSpec.parse("dataset", "--input-len").own
    assert LengthSpec.parse(None, "--input-len").own
    fixed = LengthSpec.parse("4096", "--input-len")
    assert (fixed.low, fixed.high, fixed.describe()) == (4096, 4096, "4096")
    rng = random.Random(1)
    assert {fixed.sample(rng) for _ in range(5)} == {4096}
    rng_spec = LengthSpec.parse("512:2048", "--input-len")
    draws = [rng_spec.sample(random.Random(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # seeded: the same draw every time
    many = [rng_spec.sample(rng) for _ in range(500)]
    assert 512 <= min(many) < 600 and 1950 < max(many) <= 2048
    assert rng_spec.as_record() == "512:2048" and rng_spec.describe() == "uniform 512..2048"


@pytest.mark.parametrize("text", ["abc", "0", "10:5", "1:x", "-3", "99999999"])
def test_bad_length_specs_are_one_message(text):
    with pytest.raises(UserError) as e:
        LengthSpec.parse(text, "--output-len")
    assert "--output-len" in str(e.value) and "512:2048" in e.value.fix


# ------------------------------------------------------------------ long prompts
@pytest.fixture(scope="module")
def target_tokenizer(tiny_models):
    return tokens.LocalTokenizer(tiny_models["target"])


@pytest.mark.harness
@pytest.mark.parametrize("target", [1024, 8192, 65536])
def test_long_prompts_hit_their_token_count(target_tokenizer, target):
    b = tokens.PromptBuilder(tokens.shipped_paragraphs(), target_tokenizer, seed=0)
    f = b.build(3, target)
    real = target_tokenizer.count(f)
    assert abs(real - target) <= max(tokens.FIT_SLACK, tokens.FIT_TOLERANCE * target) + 16
    assert f.startswith("Document 3.") and f.endswith(tokens.QUESTION)
    # another request: another order of paragraphs, so no shared prefix to cache
    g = b.build(4, target)
    assert g[:300] != f[:300]


@pytest.mark.harness
def test_user_text_file_for_long_prompts(tmp_path, target_tokenizer):
    f = tmp_path / "book.txt"
    f.write_text(("A paragraph of the user's own text about rivers and boats.\n\n") * 20)
    paras = tokens.file_paragraphs(str(f))
    assert len(paras) == 20
    fitted = tokens.PromptBuilder(paras, target_tokenizer).build(0, 2000)
    assert abs(target_tokenizer.count(fitted) - 2000) <= 40
    with pytest.raises(UserError, match="no such file"):
        tokens.file_paragraphs(str(tmp_path / "missing.txt"))
    (tmp_path / "tiny.txt").write_text("too short")
    with pytest.raises(UserError, match="characters of text"):
        tokens.file_paragraphs(str(tmp_path / "tiny.txt"))


def test_usage_check_flags_a_wrong_count():
    good = tokens.check_against_usage([(1000, 1020), (2000, 2030)])
    assert good["ok"] and good["checked"] == 2
    bad = tokens.check_against_usage([(1000, 700)])
    assert not bad["ok"] and bad["worst_relative_error"] == pytest.approx(-0.3)
    assert tokens.check_against_usage([]) == {"checked": 0}


def test_counter_choice_falls_back_to_the_estimate(tmp_path):
    c = tokens.pick_counter(str(tmp_path / "nope"), None, "m")
    assert not c.exact and c.count("x" * 400) == 100


# ------------------------------------------------------------------ datasets
SHAREGPT = [
    {
        "id": "c1",
        "conversations": [
            {"from": "system", "value": "You are terse."},
            {"from": "human", "value": "What is a queue?"},
            {"from": "gpt", "value": "A FIFO structure. " * 10},
            {"from": "human", "value": "And a stack?"},
            {"from": "gpt", "value": "LIFO."},
        ],
    },
    {"id": "c2", "conversations": [{"from": "gpt", "value": "orphan answer"}]},
    {"conversations": [{"from": "user", "value": "Name a prime."}]},
]


def test_a_sharegpt_file_is_parsed_once_while_unchanged(tmp_path, monkeypatch):
    """The plan, the server's attach and each growing take read the dataset: one parse
    (and one digest) while the file is unchanged, a fresh one once it changes."""
    from sgl_eagle_ext.common import safe_files
    from sgl_eagle_ext.tools.bench import workload

    reads = []
    real = safe_files.read_text
    monkeypatch.setattr(safe_files, "read_text", lambda *a, **k: reads.append(a) or real(*a, **k))
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    opts = workload.WorkloadOptions(dataset=f"sharegpt:{f}")
    w = workload.WorkloadSet(opts, 16, seed=0, prompt_set="mixed")
    w.attach(None)
    first = w.take(2, 0)
    assert len(w.take(9, 0)) == 9 and w.take(2, 0) == first
    assert len(reads) == 1, reads
    # its provenance counts the file's conversations (not the one request it probed)
    assert session.prompt_facts(w, 0)["count"] == 2
    mine = datasets.load_sharegpt(str(f))
    mine.reverse()  # a caller's copy: the kept list is not touched
    assert datasets.load_sharegpt(str(f)) == mine[::-1]
    f.write_text(json.dumps(SHAREGPT[:1]))
    assert [c.id for c in datasets.load_sharegpt(str(f))] == ["c1"] and len(reads) == 2


def test_a_trace_file_is_read_once_while_unchanged(tmp_path, monkeypatch):
    """A replayed trace is read for its times (the plan) and for its requests (each
    build): one read while the file is unchanged."""
    from sgl_eagle_ext.tools.bench import traces, workload

    reads = []
    real = traces.load
    monkeypatch.setattr(traces, "load", lambda p: reads.append(p) or real(p))
    f = tmp_path / "t.jsonl"
    rows = [{"timestamp": t, "input_length": 40, "output_length": 3} for t in (0, 500, 900)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert datasets.trace_times(str(f)) == [0.0, 0.5, 0.9]
    opts = workload.WorkloadOptions(dataset=f"trace:{f}")
    w = workload.WorkloadSet(opts, 16, seed=0, prompt_set="mixed")
    assert len(w.take(5, 0)) == 5 and session.prompt_facts(w, 0)["count"] == 3
    assert len(reads) == 1, reads


def test_sharegpt_json_and_jsonl_give_the_same_conversations(tmp_path):
    j = tmp_path / "sg.json"
    j.write_text(json.dumps(SHAREGPT, indent=2))
    jl = tmp_path / "sg.jsonl"
    jl.write_text("\n".join(json.dumps(c) for c in SHAREGPT) + "\n")
    a, b = datasets.load_sharegpt(str(j)), datasets.load_sharegpt(str(jl))
    assert a == b
    assert [c.id for c in a] == ["c1", "conv-2"]  # c2 has no user turn: skipped
    c1 = a[0]
    assert c1.system == "You are terse." and len(c1.turns) == 2
    assert c1.turns[1] == datasets.Turn("And a stack?", "LIFO.")


@pytest.mark.parametrize(
    "content, where, words",
    [
        (
            '{"conversations": []}\n{"conversations": [{"from": "alien", "value": "x"}]}\n',
            ":2:",
            "conversations[0].from is 'alien'",
        ),
        (
            '{"conversations": [{"from": "human", "value": 3}]}\n',
            ":1:",
            "conversations[0].value must be a string",
        ),
        (
            '{"conversations": [{"from": "human", "value": "ok"}]}\n{"conv": 1}\n',
            ":2:",
            "needs a 'conversations' list",
        ),
        (
            '{"conversations": [{"from": "human", "value": "ok"}]}\n{broken\n',
            ":2:",
            "not valid JSON",
        ),
        (
            '[\n {"conversations": [{"from": "human", "value": "ok"}]},\n'
            ' {"conversations": [{"from": "human"}]}\n]',
            ":3:",
            "conversations[0].value",
        ),
        (
            '[\n {"conversations": [{"from": "human", "value": "ok"}]},\n {oops}\n]',
            ":3:",
            "not valid JSON",
        ),
        (
            '{"conversations": [{"from": "gpt", "value": "only an answer"}]}\n',
            "",
            "no conversation",
        ),
    ],
)
def test_bad_sharegpt_files_name_file_line_and_field(tmp_path, content, where, words):
    f = tmp_path / ("d.json" if content.startswith("[") else "d.jsonl")
    f.write_text(content)
    with pytest.raises(UserError) as e:
        datasets.load_sharegpt(str(f))
    assert f"{f}{where}" in str(e.value) and words in str(e.value), str(e.value)
    assert e.value.fix


def test_dataset_spec():
    assert datasets.parse_spec("sharegpt:/x.json") == ("sharegpt", "/x.json")
    assert datasets.parse_spec("random") == ("random", None)
    for bad in ("sharegpt", "random:/x", "csv:/x"):
        with pytest.raises(UserError, match="--dataset"):
            datasets.parse_spec(bad)


@pytest.mark.harness
def test_workloads_from_every_dataset(tmp_path, target_tokenizer):
    b = tokens.PromptBuilder(tokens.shipped_paragraphs(), target_tokenizer, seed=0)
    common = dict(default_output=64, counter=target_tokenizer, seed=1, builder=b)
    fixed_out = LengthSpec.parse("32", "--output-len")
    own = LengthSpec()
    # random and long: fitted to --input-len, unique
    for kind in ("random", "long"):
        w = datasets.build(
            kind,
            None,
            4,
            input_len=LengthSpec.parse("1000:3000", "x"),
            output_len=fixed_out,
            **common,
        )
        assert len(w.requests) == 4 and len({r.messages for r in w.requests}) == 4
        for r in w.requests:
            assert 1000 <= r.input_len <= 3000 and r.output_len == 32
            assert abs(target_tokenizer.count(r.messages[-1][1]) - r.input_len) <= 40
    with pytest.raises(UserError, match="needs --input-len"):
        datasets.build("long", None, 2, input_len=own, output_len=own, **common)
    # the project's JSONL (shipped set) at its own lengths, and refitted to 2048
    w = datasets.build(
        "shipped", None, 5, input_len=own, output_len=own, prompt_set="coding", **common
    )
    assert [r.output_len for r in w.requests] == [64] * 5 and w.sha256
    w2 = datasets.build(
        "shipped",
        None,
        3,
        input_len=LengthSpec(2048, 2048),
        output_len=own,
        prompt_set="coding",
        **common,
    )
    for r, orig in zip(w2.requests, w.requests):
        assert r.messages[-1][1].endswith(orig.messages[-1][1])  # its question, last
        assert abs(target_tokenizer.count(r.messages[-1][1]) - 2048) <= 60
    # ShareGPT: output length = the dataset reply's token count
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    w = datasets.build("sharegpt", str(f), 4, input_len=own, output_len=own, **common)
    by_id = {r.id: r for r in w.requests}
    assert set(by_id) == {"c1", "conv-2", "c1#2", "conv-2#2"}
    assert by_id["c1"].output_len == target_tokenizer.count("A FIFO structure. " * 10)
    assert by_id["conv-2"].output_len == 64  # no reply in the dataset: the default
    assert by_id["c1"].messages[0] == ("system", "You are terse.")


# ------------------------------------------------------------------ fake endpoint
class RecordingFake(FakeSGLang):
    """The fake endpoint, keeping every chat request body."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.bodies = []

    async def chat(self, req):
        self.bodies.append(await req.json())
        return await super().chat(req)


@pytest.fixture
def recording_fake():
    with Background(RecordingFake(accept_length=2.5)) as bg:
        yield bg


async def _replay(url, convs, lens, concurrency):
    async with cl.Client(url, spec_details_field="return_spec_tokens_details") as c:
        return await multiturn.replay(c, convs, lens, concurrency)


def test_multi_turn_replay_grows_the_context(recording_fake, tmp_path):
    f = tmp_path / "sg.jsonl"
    f.write_text("\n".join(json.dumps(c) for c in SHAREGPT[:1] + SHAREGPT[2:]) + "\n")
    convs = datasets.load_sharegpt(str(f))
    lens = multiturn.plan_turns(convs, LengthSpec.parse("5", "x"), tokens.Counter(), 64, 0)
    assert lens == [[5, 5], [5]]
    results, meta, took, interrupted = asyncio.run(
        _replay(recording_fake.url, convs, lens, concurrency=2)
    )
    assert not interrupted and took > 0 and len(results) == 3 and all(r.ok for r in results)
    assert sorted((m["conversation"], m["turn"]) for m in meta) == [
        ("c1", 0),
        ("c1", 1),
        ("conv-1", 0),
    ]
    bodies = {tuple(m["content"] for m in b["messages"]): b for b in recording_fake.fake.bodies}
    second = [k for k in bodies if "And a stack?" in k]
    assert len(second) == 1
    msgs = bodies[second[0]]["messages"]
    # system, turn 1, the SERVER's answer to turn 1 (not the dataset's), turn 2
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == " x" * 5 and msgs[1]["content"] == "What is a queue?"
    assert all(b["max_tokens"] == 5 for b in recording_fake.fake.bodies)


# ------------------------------------------------------------------ per-request records
def _result(i, ttft, e2e, tokens_, start=0.0, verify=None, hist=None, prompt=100):
    chunks = [ttft + (e2e - ttft) * k / max(1, tokens_ - 1) for k in range(tokens_)]
    r = cl.RequestResult(
        index=i,
        prompt_id=f"p{i}",
        ok=True,
        start=start,
        ttft=ttft,
        e2e=e2e,
        chunk_times=chunks,
        completion_tokens=tokens_,
        prompt_tokens=prompt,
        tokens_from_usage=True,
        spec_verify_ct=verify,
    )
    if hist is not None:
        r.spec_details = {"spec_verify_ct": verify, "spec_correct_drafts_histogram": hist}
    return r


def test_request_records_and_goodput_recomputed(tmp_path, capsys):
    path = tmp_path / "req.jsonl"
    log = request_log.RequestLog(path)
    t0 = 1000.0
    # level c=1: two requests, TTFT 0.1 s / 0.8 s, 11 tokens over 1.1 s (TPOT 100 ms)
    lv1 = [_result(0, 0.1, 1.1, 11, t0, 4, [1, 1, 2]), _result(1, 0.8, 1.8, 11, t0 + 1.1, 4)]
    log.write_level(lv1, t0, 2.9, {"run_id": "r1", "arm": "B", "concurrency": 1})
    failed = cl.RequestResult(index=1, prompt_id="p1", error="http 500", start=t0)
    lv2 = [_result(0, 0.2, 0.7, 6, t0), failed]
    log.write_level(lv2, t0, 0.7, {"run_id": "r1", "arm": "B", "concurrency": 2})
    rows, problems = request_log.read(path)
    assert len(rows) == 4 and problems == []
    r0 = rows[0]
    assert r0["ttft_ms"] == 100.0 and r0["e2e_ms"] == 1100.0 and r0["tpot_ms"] == 100.0
    assert len(r0["itl_ms"]) == 10 and r0["itl_ms"][0] == pytest.approx(100.0)
    assert r0["accept_length"] == pytest.approx(11 / 4) and r0["correct_drafts_histogram"] == [
        1,
        1,
        2,
    ]
    assert rows[3]["ok"] is False and rows[3]["error"] == "http 500"

    res = dict(goodput.compute(rows, {"ttft": 500, "tpot": 150}, (50, 99)))
    f1 = res[("r1", "B", 1)]
    assert f1.duration_s == pytest.approx(2.9) and f1.slo_met == 1
    assert f1.goodput_tok_s == pytest.approx(11 / 2.9)
    assert f1.ttft_ms["p50"] == pytest.approx(450.0) and set(f1.ttft_ms) == {"p50", "p99"}
    # decode-only (each request's prefill token left out), and with it
    assert f1.accept_length == pytest.approx(20 / 8)
    assert f1.accept_length_with_prefill == pytest.approx(22 / 8)
    f2 = res[("r1", "B", 2)]
    assert f2.slo_met == 1 and f2.requests == 2 and f2.goodput_tok_s == pytest.approx(6 / 0.7)
    strict = dict(goodput.compute(rows, {"tpot": 50}, (50,)))
    assert strict[("r1", "B", 1)].slo_met == 0

    from sgl_eagle_ext.tools.bench.cli import main

    code = main(["goodput", str(path), "--slo", "ttft=500,tpot=150", "--percentiles", "50,99"])
    out = capsys.readouterr().out
    assert code == 0
    assert "TTFT <= 500 ms and TPOT <= 150 ms" in out and "TTFT ms p50/99" in out
    assert re.search(r"B\s+1\s+2\s+.*\s1/2\s+3\.8\s+0\.34", out), out


@pytest.mark.parametrize(
    "goals",
    [
        {"ttft": 500, "tpot": 150},
        {"tpot": 50},
        {"e2e": 1000},
        {"itl": 120},  # the one-token request has no gap: it meets an itl goal
        {"itl": 50, "ttft": 150},
    ],
)
def test_the_sweep_and_bench_goodput_share_one_goodput_rule(tmp_path, goals):
    """The same requests, live (the sweep's RequestResult) and recorded (bench goodput's
    per-request rows): the same requests meet the same goals."""
    live = [
        _result(0, 0.1, 1.1, 11),
        _result(1, 0.8, 1.8, 11),
        _result(2, 0.2, 0.2, 1),
        cl.RequestResult(index=3, prompt_id="p3", error="http 500"),
    ]
    log = request_log.RequestLog(tmp_path / "req.jsonl")
    log.write_level(live, 0.0, 2.0, {"run_id": "r", "arm": "B", "concurrency": 1})
    rows, _ = request_log.read(tmp_path / "req.jsonl")
    recorded = [
        goodput.meets(records.decode(r, records.Request), loads.SLO.of(goals)) for r in rows
    ]
    assert [loads.SLO.of(goals).met(r) for r in live] == recorded
    assert recorded[3] is False  # an unanswered request meets no goal


@pytest.mark.parametrize(
    "args, words",
    [
        (["--slo", "ttft"], "is not KEY=MS"),
        (["--slo", "latency=5"], "unknown goal 'latency'"),
        (["--slo", "ttft=-1"], "must be a number > 0"),
        (["--percentiles", "50,101"], "--percentiles 50,101"),
    ],
)
def test_goodput_bad_input(tmp_path, capsys, args, words):
    from sgl_eagle_ext.tools.bench.cli import main

    path = tmp_path / "req.jsonl"
    request_log.RequestLog(path).write_level([_result(0, 0.1, 1.1, 11, 5.0)], 5.0, 1.1, {})
    assert main(["goodput", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_goodput_on_a_file_without_requests(tmp_path, capsys):
    from sgl_eagle_ext.tools.bench.cli import main

    f = tmp_path / "results.jsonl"
    f.write_text('{"kind": "sweep"}\n')
    assert main(["goodput", str(f)]) == 2
    assert "no per-request records" in capsys.readouterr().err


# ------------------------------------------------------------------ speculation by workload
@pytest.mark.harness  # bench plots/report: matplotlib (the test extra)
def test_acceptance_by_input_length_and_draft_position(tmp_path):
    rows = [
        {
            "ok": True,
            "prompt_tokens": 300,
            "completion_tokens": 30,
            "verify_ct": 10,
            "correct_drafts_histogram": [2, 3, 5],
        },
        {
            "ok": True,
            "prompt_tokens": 5000,
            "completion_tokens": 20,
            "verify_ct": 10,
            "correct_drafts_histogram": [5, 5],
        },
        {"ok": True, "prompt_tokens": 6000, "completion_tokens": 10, "verify_ct": 10},
        {"ok": False, "prompt_tokens": 10, "verify_ct": 99},
    ]
    b = spec_view.by_input_bucket(rows)
    assert [(x.bucket, x.requests) for x in b] == [("256-512", 1), ("4k-8k", 2)]
    assert b[0].accept_length == 3.0 and b[1].accept_length == 1.5
    h = spec_view.hist_from_requests(rows)
    assert h == Counter({0: 7, 1: 8, 2: 5})
    rates = spec_view.position_rates(h)
    assert [r.position for r in rates] == [1, 2]
    assert rates[0].rate == pytest.approx(13 / 20) and rates[1].rate == pytest.approx(5 / 20)
    assert figures.from_histogram(h) == pytest.approx((7 + 16 + 15) / 20)
    # the profiler's windows: accept_hist keys count the bonus token
    # a v=1 line as an earlier release of the profiler wrote it (still read)
    line = (
        "EAGLE3_PROFILE v=1 rank=0 cycles=3 bs=1:3 draft_tokens=4:3 cycle_ms=1.00/1.00/1.00 "
        "draft_ms=1.00/1.00/1.00 verify_fwd_ms=1.00/1.00/1.00 accept_ms=1.00/1.00/1.00 "
        "draft_extend_ms=1.00/1.00/1.00 other_ms=1.00/1.00/1.00 "
        "share=draft:20.0,verify_fwd:20.0,accept:20.0,draft_extend:20.0,other:20.0 "
        "accept_len=2.00 accept_hist=1:4,2:2,4:2 tok_s=100.00 prefill=0/0.00 syncs=0 "
        "dropped=0 clock=cpu"
    )
    log = tmp_path / "server.log"
    log.write_text("noise\n[2026] " + line + "\n")
    ph = spec_view.hist_from_profile([log])
    assert ph == Counter({0: 4, 1: 2, 3: 2})
    prates = spec_view.position_rates(ph)
    assert [round(r.rate, 3) for r in prates] == [0.5, 0.25, 0.25]
    lines = spec_view.tables(b, {"SGLang": rates, "EAGLE3_PROFILE": prates})
    assert any("4k-8k" in line and "1.50" in line for line in lines)
    assert any(line.split()[:1] == ["1"] and "65.0%" in line for line in lines)
    png = spec_view.render_spec(b, {"SGLang": rates}, tmp_path / "s.png")
    assert png.startswith(PNG_MAGIC) and (tmp_path / "s.png").read_bytes() == png


def sweep_record(arm, c, tok_s, tpot, status="ok", run="r1"):
    return {
        "schema": 1,
        "kind": "sweep",
        "run_id": run,
        "arm": arm,
        "concurrency": c,
        "status": status,
        "completed": 10,
        "errors": {},
        "output_tok_s": tok_s,
        "request_s": 1.0,
        "max_tokens": 64,
        "accept_length": 2.5 if arm == "eagle3" else None,
        "ttft_ms": {"p50": 50, "p90": 60, "p99": 70},
        "tpot_ms": {"p50": tpot, "p90": tpot * 1.2, "p99": tpot * 1.5},
        "e2e_ms": {"p50": 3000, "p90": 3500, "p99": 4000},
        "provenance": {
            "server": {"model_path": "/m", "sglang_version": "0.5.23", "api_key": "***"},
            "prompts": {"set": "mixed"},
        },
    }


@pytest.mark.harness  # bench plots/report: matplotlib (the test extra)
def test_pareto_points_one_curve_per_arm(tmp_path):
    recs = [sweep_record("baseline", c, 50 * c, 20 + c) for c in (1, 4, 16)]
    recs += [sweep_record("eagle3", c, 90 * c, 11 + 2 * c) for c in (1, 4, 16)]
    recs.append(sweep_record("eagle3", 64, 1.0, 99, status="server died"))
    pts = spec_view.pareto_points([records.decode(r) for r in recs])
    assert set(pts) == {"baseline", "eagle3"}
    assert [p.concurrency for p in pts["eagle3"]] == [1, 4, 16]
    assert pts["eagle3"][0].user_tok_s == pytest.approx(1000 / 13)
    assert pts["baseline"][2].total_tok_s == 800
    assert spec_view.render_pareto(pts, tmp_path / "p.png").startswith(PNG_MAGIC)
    rates = []
    for rate in (2.0, 0.5):
        r = sweep_record("eagle3", None, 40 * rate, 12 + rate)
        r["request_rate"] = rate
        rates.append(r)
    (curve,) = spec_view.pareto_points([records.decode(r) for r in rates]).values()
    assert [p.label for p in curve] == ["0.5/s", "2/s"]


# ------------------------------------------------------------------ HTML report
# A system tool like hadolint: the harness tier needs it, and fails (not skips) without it.
CHROMIUM_HOWTO = (
    "no headless browser: install Debian's chromium (apt-get install -y chromium) "
    "to check the HTML report"
)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(CHROMIUM_HOWTO, pytrace=False)


def browser(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.harness
def test_html_report_renders_in_a_headless_browser(tmp_path, capsys):
    from sgl_eagle_ext.tools.bench.cli import main

    res = tmp_path / "results.jsonl"
    recs = [sweep_record("baseline", c, 50 * c, 20 + c) for c in (1, 4, 16)]
    recs += [sweep_record("eagle3", c, 90 * c, 11 + 2 * c) for c in (1, 4, 16)]
    recs.append(sweep_record("eagle3", 64, 1.0, 99, status="server died"))
    recs.append(
        {
            "schema": 1,
            "kind": "ab",
            "run_id": "r1",
            "preset_a": "baseline",
            "preset_b": "eagle3",
            "verdict": "until",
            "lossless": "IDENTICAL",
            "crossover_throughput": {"verdict": "until", "level": 16, "estimate": 11.3},
            "recommendation": "use <eagle3> up to concurrency 11",
            "provenance": {},
        }
    )
    for rate in (0.5, 2.0):  # an open-loop run: levels are request rates
        r = sweep_record("eagle3", None, 40 * rate, 12 + rate, run="r2")
        r["request_rate"] = rate
        recs.append(r)
    recs.append(
        {
            "schema": 1,
            "kind": "compare",
            "run_id": "r2",
            "arms": ["baseline", "eagle3", "eagle3-adaptive"],
            "reference": "baseline",
            "crossover_throughput": {
                "eagle3": {"verdict": "always", "level": None, "estimate": None},
                "eagle3-adaptive": {"verdict": "until", "level": 2.0, "estimate": 1.4},
            },
            "lossless": {"eagle3": "IDENTICAL", "eagle3-adaptive": "IDENTICAL"},
            "recommendation": {"eagle3-adaptive": "serve <eagle3-adaptive> below 1.4 req/s"},
            "provenance": {},
        }
    )
    # bench single: a one-stream level now, a record of its own kind before (still read)
    one = sweep_record("eagle3-one", 1, 30.0, 30, run="r3")
    one |= {"shape": "single", "tok_s": {"n": 5, "mean": 31.5, "median": 31.0}}
    legacy = {"kind": "single", "run_id": "r3", "arm": "eagle3-old", "status": "ok"}
    recs += [one, legacy | {"tok_s": {"n": 4, "mean": 29.25, "ci95_low": 28.0}}]
    res.write_text("".join(json.dumps(r) + "\n" for r in recs) + "torn line\n")
    req = tmp_path / "req.jsonl"
    log = request_log.RequestLog(req)
    log.write_level(
        [
            _result(i, 0.05 * (i + 1), 1.0, 21, 10.0 + i * 0.1, 8, [2, 3, 3], prompt=300 + 900 * i)
            for i in range(6)
        ],
        10.0,
        1.6,
        {"run_id": "r1", "arm": "eagle3", "concurrency": 4},
    )
    out = tmp_path / "report.html"
    code = main(
        [
            "report",
            str(res),
            "--requests",
            str(req),
            "--slo",
            "ttft=200",
            "--percentiles",
            "50,95",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr()
    html = out.read_text()
    # self-contained: nothing to fetch, no script
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "<script" not in html.lower()
    # per run: sweep figure and Pareto (r1, r2), and the speculation plot
    assert html.count("data:image/png;base64,") == 5
    assert "use &lt;eagle3&gt; up to concurrency 11" in html  # escaped (an older ab record)
    assert "serve &lt;eagle3-adaptive&gt; below 1.4 req/s" in html  # compare's, per arm
    assert '"api_key": "***"' in html

    # the browser's own rendering: a copy with a probe that reports decoded images
    probe_copy = tmp_path / "probe.html"
    probe_copy.write_text(
        html.replace(
            "</body>",
            "<script>document.body.setAttribute('data-imgs', Array.from(document.images)"
            ".map(i => i.complete && i.naturalWidth > 100 ? 'ok' : 'broken').join(','))"
            "</script></body>",
        )
    )
    dom = browser("--dump-dom", probe_copy.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-imgs="ok,ok,ok,ok,ok"' in dom.stdout, dom.stdout[:500]
    for words in (
        "Run r1",
        "Pareto",
        "Speculation by workload",
        "SERVER DIED: cut short",  # the sweep's own table (level_view)
        "TTFT ms p50/95",  # bench goodput's own table
        "acceptance per draft position",
        "256-512",
        "1k-2k",
        "provenance: eagle3",
        "Run r2",
        "0.5 req/s",
        "Compare: baseline vs eagle3 vs eagle3-adaptive (reference baseline)",
        "until, about 1.4 (level 2)",
        "until, about 11.3 (level 16)",
        "Single stream (eagle3-one)",
        "31.50",
        "Single stream (eagle3-old)",
        "29.25",
        "28.00..-",
    ):
        assert words in dom.stdout, words
    shot = tmp_path / "report.png"
    s = browser(f"--screenshot={shot}", "--window-size=1400,2400", out.as_uri())
    assert s.returncode == 0 and shot.read_bytes().startswith(PNG_MAGIC), s.stderr[-2000:]
    keep = Path("/tmp/h7/report-screenshot.png")
    if keep.parent.is_dir():
        shutil.copy(shot, keep)


@pytest.mark.harness  # bench plots/report: matplotlib (the test extra)
def test_report_bad_input(tmp_path, capsys):
    from sgl_eagle_ext.tools.bench.cli import main

    assert main(["report", str(tmp_path / "none.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps(sweep_record("a", 1, 10, 10)) + "\n")
    assert main(["report", str(f), "--run-id", "nope"]) == 2
    assert "no records of run nope" in capsys.readouterr().err
    # -o the results file itself would replace the records with HTML: refused, kept
    before = f.read_bytes()
    assert main(["report", str(f), "-o", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"-o {f}: is an input of this command" in err and f.read_bytes() == before
    assert main(["report", str(f), "--profile-log", str(f), "-o", str(tmp_path / "x.html")]) == 2
    assert "--profile-log is read with --requests" in capsys.readouterr().err
    # plot and speculation: -o checked before anything is drawn; no traceback
    req = tmp_path / "req.jsonl"
    req.write_text("")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    for cmd, src in (("plot", f), ("speculation", req)):
        for bad, says in (
            (tmp_path, "is a directory"),
            (tmp_path / "x.txt", "does not end in .png or .svg or .pdf"),
            (src, "is an input of this command"),
            *([(ro / "x.png", "permission denied")] if os.geteuid() != 0 else []),
        ):
            assert main([cmd, str(src), "-o", str(bad)]) == 2, (cmd, bad)
            err = capsys.readouterr().err
            assert says in err and "Traceback" not in err, (cmd, bad, err)
    assert f.read_bytes() == before and req.read_text() == ""


# ------------------------------------------------------------------ real CPU server
async def _send(url, reqs, max_tokens):
    async with cl.Client(url, spec_details_field="return_spec_tokens_details") as c:
        return [
            await c.chat(r.as_messages(), max_tokens, index=i, prompt_id=r.id)
            for i, r in enumerate(reqs)
        ]


@pytest.mark.server
def test_lengths_and_speculation_per_request_on_cpu_server(spec_server, tiny_models, tmp_path):
    url = spec_server.base_url
    local = tokens.LocalTokenizer(tiny_models["target"])
    server_tok = tokens.ServerTokenizer(url, "default")
    assert server_tok.works()
    sample = tokens.shipped_paragraphs()[0]
    assert server_tok.count(sample) == local.count(sample)  # SGLang's tokenizer is the model's
    assert isinstance(
        tokens.pick_counter(str(tiny_models["target"]), url, "m"), tokens.LocalTokenizer
    )
    assert isinstance(tokens.pick_counter(None, url, "default"), tokens.ServerTokenizer)

    builder = tokens.PromptBuilder(tokens.shipped_paragraphs(), server_tok, seed=0)
    w = datasets.build(
        "long",
        None,
        3,
        input_len=LengthSpec.parse("150:500", "--input-len"),
        output_len=LengthSpec.parse("8", "--output-len"),
        default_output=8,
        counter=server_tok,
        seed=0,
        builder=builder,
    )
    results = asyncio.run(_send(url, w.requests, 8))
    assert all(r.ok and r.tokens_from_usage and r.completion_tokens == 8 for r in results)
    check = tokens.check_against_usage(
        [(q.input_len, r.prompt_tokens) for q, r in zip(w.requests, results)]
    )
    assert check["ok"], check  # the server's usage agrees with the fitted length
    for q, r in zip(w.requests, results):
        over = r.prompt_tokens - q.input_len  # fit within FIT_SLACK, plus the chat template
        assert -tokens.FIT_SLACK <= over <= tokens.TEMPLATE_SLACK, (q.input_len, r.prompt_tokens)

    path = tmp_path / "req.jsonl"
    t0 = min(r.start for r in results)
    request_log.RequestLog(path).write_level(
        results,
        t0,
        max(r.start + r.e2e for r in results) - t0,
        {"run_id": "x", "arm": "eagle3", "concurrency": 1},
    )
    rows, _ = request_log.read(path)
    for row in rows:
        # per request: 1 (nothing accepted) .. 4 (3 drafts + bonus) tokens per cycle
        assert row["verify_ct"] >= 2 and 1.0 <= row["accept_length"] <= 4.0, row
        hist = row["correct_drafts_histogram"]
        assert hist and sum(hist) == row["verify_ct"], row
        assert len(hist) <= 4  # 3 steps: 0..3 correct drafts per cycle
    h = spec_view.hist_from_requests(rows)
    rates = spec_view.position_rates(h)
    assert len(rates) <= 3 and rates[0].rate >= rates[-1].rate > 0
    buckets = spec_view.by_input_bucket(rows)
    assert sum(b.requests for b in buckets) == 3


@pytest.mark.server
def test_multi_turn_replay_on_cpu_server(spec_server, tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    convs = datasets.load_sharegpt(str(f))[:1]
    lens = multiturn.plan_turns(convs, LengthSpec.parse("8", "x"), tokens.Counter(), 8, 0)
    results, meta, _, interrupted = asyncio.run(
        _replay(spec_server.base_url, convs, lens, concurrency=1)
    )
    assert not interrupted and [m["turn"] for m in meta] == [0, 1]
    first, second = results
    assert first.ok and second.ok
    # turn 2 carries turn 1, the server's answer to it, and its own question
    assert second.prompt_tokens > first.prompt_tokens + first.completion_tokens


# ------------------------------------------------------------------ sweep with workloads (fake)
def run_main(*args) -> int:
    from sgl_eagle_ext.tools.bench.cli import main

    return main(list(args))


def test_sweep_long_prompts_ranges_and_request_records(recording_fake, tmp_path, capsys):
    req, res = tmp_path / "req.jsonl", tmp_path / "r.jsonl"
    code = run_main(
        "sweep",
        "--url",
        recording_fake.url,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "3",
        "--prompts-per-concurrency",
        "1",
        "--warmup",
        "0",
        "--dataset",
        "long",
        "--input-len",
        "500:900",
        "--output-len",
        "4:12",
        "--save-requests",
        str(req),
        "--results",
        str(res),
        "--slo-ttft-ms",
        "60000",
        "--quiet",
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "goodput tok/s" in out.splitlines()[0]
    # the fake says every prompt has 16 tokens: the length check must not stay quiet
    assert "the server counted prompts -9" in err and "off the --input-len" in err
    rows, _ = request_log.read(req)
    assert len(rows) == 6 and {r["concurrency"] for r in rows} == {1, 2}
    for r in rows:
        assert 500 <= r["input_len_target"] <= 900 and 4 <= r["output_len_target"] <= 12
        assert r["completion_tokens"] == r["output_len_target"]  # each its own length
        assert r["accept_length"] == pytest.approx(r["completion_tokens"] / r["verify_ct"])
        assert r["run_id"] and len(r["chunk_gap_ms"]) == r["chunks"] - 1
        assert len(r["itl_ms"]) >= len(r["chunk_gap_ms"])  # per token: a gap per token
    # the same prompts, in the same order, at every level
    by_level = {c: [r["input_len_target"] for r in rows if r["concurrency"] == c] for c in (1, 2)}
    assert by_level[1] == by_level[2]
    sent = [len(b["messages"][0]["content"]) for b in recording_fake.fake.bodies]
    assert min(sent) > 1500  # ~4 characters per token: long prompts went out
    recs = [json.loads(line) for line in res.read_text().splitlines()]
    for rec in recs:
        assert rec["workload"]["dataset"] == "long" and rec["workload"]["input_len"] == "500:900"
        assert rec["input_tokens_check"]["ok"] is False and rec["short"] == 0
        assert rec["provenance"]["workload"]["token_counter"].startswith("estimate")
        assert rec["goodput_tok_s"] == pytest.approx(rec["output_tok_s"])
    # goodput recomputed from the records equals the sweep's own
    figures = dict(goodput.compute(rows, {"ttft": 60000}, (50,)))
    for rec in recs:
        f = figures[(rec["run_id"], "", rec["concurrency"])]
        assert f.completed == rec["completed"] and f.slo_met == rec["completed"]


def test_sweep_multi_turn_sharegpt(recording_fake, tmp_path, capsys):
    f = tmp_path / "sg.jsonl"
    f.write_text("\n".join(json.dumps(c) for c in SHAREGPT) + "\n")
    req = tmp_path / "req.jsonl"
    code = run_main(
        "sweep",
        "--url",
        recording_fake.url,
        "--concurrency",
        "2",
        "--num-prompts",
        "2",
        "--prompts-per-concurrency",
        "1",
        "--warmup",
        "0",
        "--dataset",
        f"sharegpt:{f}",
        "--multi-turn",
        "--output-len",
        "6",
        "--save-requests",
        str(req),
        "--no-records",
        "--quiet",
    )
    assert code == 0, capsys.readouterr().err
    rows, _ = request_log.read(req)
    turns = sorted((r["conversation"], r["turn"], r["context_messages"]) for r in rows)
    assert turns == [("c1", 0, 2), ("c1", 1, 4), ("conv-2", 0, 1)]
    assert all(r["completion_tokens"] == 6 for r in rows)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--dataset", "csv:x"], "--dataset csv:x: unknown"),
        (["--dataset", "long"], "needs --input-len"),
        (["--multi-turn"], "needs --dataset sharegpt:FILE"),
        (["--input-len", "9:3"], "LOW <= HIGH"),
        (
            ["--dataset", "long", "--input-len", "100", "--long-text", "/nonexistent.txt"],
            "no such file",
        ),
    ],
)
def test_sweep_workload_bad_input(recording_fake, tmp_path, capsys, extra, words):
    code = run_main("sweep", "--url", recording_fake.url, "--no-records", "--quiet", *extra)
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err
    assert recording_fake.fake.bodies == []  # nothing was sent


def test_sweep_bad_sharegpt_file_names_the_line(recording_fake, tmp_path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"conversations": [{"from": "human", "value": "ok"}]}\n{"conversations": 5}\n')
    code = run_main(
        "sweep",
        "--url",
        recording_fake.url,
        "--dataset",
        f"sharegpt:{f}",
        "--no-records",
        "--quiet",
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{f}:2: needs a 'conversations' list" in err, err


@pytest.mark.server
def test_sweep_long_prompts_then_goodput_speculation_report_on_cpu_server(
    spec_server, tiny_models, tmp_path, capsys
):
    req, res = tmp_path / "req.jsonl", tmp_path / "r.jsonl"
    code = run_main(
        "sweep",
        "--url",
        spec_server.base_url,
        "--concurrency",
        "1,2",
        "--num-prompts",
        "4",
        "--prompts-per-concurrency",
        "1",
        "--warmup",
        "0",
        "--dataset",
        "long",
        "--input-len",
        "150:500",  # long for the tiny pair; prefill under the Triton interpreter is slow
        "--output-len",
        "8",
        "--save-requests",
        str(req),
        "--results",
        str(res),
        "--slo-tpot-ms",
        "100000",
        "--label",
        "eagle3",
        "--quiet",
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "off the --input-len" not in err  # the server agrees with the fitted lengths
    recs = [json.loads(line) for line in res.read_text().splitlines()]
    for rec in recs:
        assert rec["status"] == "ok" and rec["completed"] == 4
        assert rec["input_tokens_check"]["ok"] and rec["input_tokens_check"]["checked"] == 4
        assert rec["workload"]["token_counter"] == f"tokenizer of {tiny_models['target']}"
    rows, _ = request_log.read(req)
    assert len(rows) == 8
    for r in rows:
        assert r["completion_tokens"] == 8 and 150 <= r["input_len_target"] <= 500
        assert abs(r["prompt_tokens"] - r["input_len_target"]) <= tokens.TEMPLATE_SLACK
        assert sum(r["correct_drafts_histogram"]) == r["verify_ct"] >= 2

    assert run_main("goodput", str(req), "--slo", "tpot=100000", "--percentiles", "50,99") == 0
    out = capsys.readouterr().out
    assert re.search(r"eagle3\s+1\s+4\s", out) and " 4/4 " in out, out

    png = tmp_path / "spec.png"
    assert run_main("speculation", str(req), "-o", str(png)) == 0
    out = capsys.readouterr().out
    assert "acceptance per draft position (SGLang per request)" in out
    assert png.read_bytes().startswith(PNG_MAGIC)

    html = tmp_path / "report.html"
    assert run_main("report", str(res), "--requests", str(req), "-o", str(html)) == 0
    dom = browser("--dump-dom", html.as_uri())
    assert dom.returncode == 0
    for words in ("Sweep", "Pareto", "Speculation by workload", "eagle3", "0.5.23"):
        assert words in dom.stdout, words


# ------------------------------------------------------------------ compare with workloads (fake arms)
@pytest.fixture
def fake_arm_servers(monkeypatch):
    """bench ab/compare with each preset served by a fake endpoint instead of a launcher."""
    from sgl_eagle_ext.tools.bench import arms

    started: dict[str, Background] = {}
    waited: list[str] = []

    def plan_arm(label, preset, **kw):
        return arms.ArmPlan(label, preset, ["--preset", preset], {"preset": preset})

    class Launched:
        def __init__(self, plan):
            self.plan = plan
            self.stopped_cleanly = True
            self.tls = None  # plain http

        def wait_ready(self, timeout):
            waited.append(self.plan.preset)
            return started[self.plan.preset].url

        def stop(self):
            return 0

    monkeypatch.setattr(arms, "plan_arm", plan_arm)
    monkeypatch.setattr(arms, "LauncherProcess", Launched)
    for name, acc in (("baseline", 0.0), ("eagle3", 2.5)):
        started[name] = Background(RecordingFake(accept_length=acc)).__enter__()
    yield started, waited
    for bg in started.values():
        bg.stop()


def test_compare_arms_share_the_workload_and_save_requests(fake_arm_servers, tmp_path, capsys):
    started, waited = fake_arm_servers
    req, res = tmp_path / "req.jsonl", tmp_path / "r.jsonl"
    code = run_main(
        "compare",
        "--arm",
        "baseline",
        "--arm",
        "eagle3",
        "--concurrency",
        "1,2",
        "--num-prompts",
        "3",
        "--prompts-per-concurrency",
        "0",
        "--warmup",
        "0",
        "--lossless-prompts",
        "0",
        "--dataset",
        "long",
        "--input-len",
        "300:600",
        "--output-len",
        "5",
        "--save-requests",
        str(req),
        "--results",
        str(res),
        "--log-dir",
        str(tmp_path / "logs"),
        "--quiet",
    )
    assert code == 0, capsys.readouterr()
    assert waited == ["baseline", "eagle3"]
    rows, _ = request_log.read(req)
    assert {r["arm"] for r in rows} == {"baseline", "eagle3"} and len(rows) == 12
    targets = {
        a: [r["input_len_target"] for r in rows if r["arm"] == a] for a in ("baseline", "eagle3")
    }
    assert targets["baseline"] == targets["eagle3"]  # the same prompts on every arm
    sent = {
        a: sorted(b["messages"][0]["content"] for b in started[a].fake.bodies)
        for a in ("baseline", "eagle3")
    }
    assert sent["baseline"] == sent["eagle3"]
    assert all(r["accept_length"] for r in rows if r["arm"] == "eagle3")
    assert not any(r["verify_ct"] for r in rows if r["arm"] == "baseline")
    recs = [json.loads(line) for line in res.read_text().splitlines()]
    sweeps = [r for r in recs if r["kind"] == "sweep"]
    assert len(sweeps) == 4
    assert all(r["provenance"]["workload"]["dataset"] == "long" for r in sweeps)
    res_figures = dict(goodput.compute(rows, {}, (50,)))
    assert set(res_figures) == {(recs[0]["run_id"], a, c) for a in targets for c in (1, 2)}


def test_compare_bad_dataset_fails_before_any_arm_starts(fake_arm_servers, tmp_path, capsys):
    _, waited = fake_arm_servers
    bad = tmp_path / "bad.json"
    bad.write_text('[{"conversations": [{"from": "human", "value": "ok"}]}, {"x": 1}]')
    code = run_main(
        "compare",
        "--arm",
        "baseline",
        "--arm",
        "eagle3",
        "--dataset",
        f"sharegpt:{bad}",
        "--no-records",
        "--log-dir",
        str(tmp_path / "logs"),
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:1: needs a 'conversations' list" in err, err
    assert waited == []


@pytest.mark.parametrize(
    "where, words",
    [
        ("results", "the same file as --results"),
        ("dir", "is a directory"),
        ("unwritable", "is a file, not a folder"),
    ],
)
def test_save_requests_path_checked_before_any_request(
    recording_fake, tmp_path, capsys, where, words
):
    res = tmp_path / "r.jsonl"
    target = {
        "results": res,
        "dir": tmp_path,
        "unwritable": tmp_path / "a-file" / "requests.jsonl",  # under a file: never a dir
    }[where]
    (tmp_path / "a-file").write_text("")
    code = run_main(
        "sweep",
        "--url",
        recording_fake.url,
        "--results",
        str(res),
        "--save-requests",
        str(target),
        "--quiet",
    )
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err
    assert recording_fake.fake.bodies == [] and not res.exists()
