"""Load shapes and labels of `bench sweep` against the fake endpoint: a burst capped by
--max-concurrency, closed-loop --duration, constant arrivals, every load option in
the records (JSONL and CSV), ITL per token next to the chunk gaps, input/output/total
token throughput, --disable-stream, --header NAME=VALUE, --slo and its aliases, and the
ports chosen outside the ephemeral range."""

from __future__ import annotations

import csv
import json
import math
import socket
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fakes.fake_sglang import Background, FakeSGLang

from sgl_eagle_ext.common import ports
from sgl_eagle_ext.tools.bench import arrivals, cli, records

LOAD = records.LOAD_COLUMNS


@pytest.fixture
def fake():
    servers = []

    def start(**kw) -> Background:
        bg = Background(FakeSGLang(**kw)).__enter__()
        servers.append(bg)
        return bg

    yield start
    for bg in servers:
        bg.stop()


def read(path: Path) -> tuple[list[dict], list[dict]]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    with open(path.with_suffix(".csv"), newline="") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == records.CSV_COLUMNS
    return recs, [dict(zip(rows[0], r)) for r in rows[1:]]


def run(url: str, res: Path, *extra: str) -> int:
    base = ["sweep", "--url", url, "--max-tokens", "6", "--warmup", "0", "--results", str(res)]
    base += ["--prompts-per-concurrency", "0"]  # --num-prompts is the level's count
    return cli.main([*base, *extra])


def test_burst_capped_by_max_concurrency(fake, tmp_path, capsys):
    """--request-rate inf --max-concurrency 8: every request at once, never more than 8
    in flight (sglang.bench_serving's meaning); the record says so."""
    bg = fake(delay_ms=50)  # ~0.3 s a request: the first 8 are all still in flight
    res = tmp_path / "r.jsonl"
    rc = run(bg.url, res, "--request-rate", "inf", "--max-concurrency", "8", "--num-prompts", "24")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "inf = a burst, every request at once" in out and "at most 8 in flight" in out
    assert bg.fake.peak_active == 8  # 24 sent at 0, a semaphore of 8
    (r,), (row,) = read(res)
    assert r["arrival"] == "burst" and r["request_rate"] is None
    assert r["concurrency"] == 8 and r["max_concurrency"] == 8
    assert r["requests"] == r["completed"] == r["arrivals"] == 24
    assert row["request_rate"] == "inf" and row["max_concurrency"] == "8"
    assert row["arrival"] == "burst" and row["stream"] == "True"
    assert row["dataset"] == "shipped" and row["output_len"] == "6"
    assert all(k in r for k in LOAD)


def test_levels_above_the_servers_batch_cap_are_named(fake, tmp_path, capsys):
    """A concurrency above what the server runs at once (its resolved max_running_requests,
    /server_info) measures a queue, not a batch of that size: the sweep says which."""
    res = tmp_path / "r.jsonl"
    bg = fake(max_running=2)
    assert run(bg.url, res, "--concurrency", "1,2,3,5", "--num-prompts", "2") == 0
    err = capsys.readouterr().err
    assert (
        "concurrency 3, 5: the server runs at most 2 requests at once (its "
        "max_running_requests); the rest wait in its queue, in TTFT" in err
    )
    assert run(fake().url, res, "--concurrency", "1,5", "--num-prompts", "2") == 0
    assert "max_running_requests" not in capsys.readouterr().err  # not said: nothing said


def test_burst_without_a_cap_sends_everything_at_once(fake, tmp_path, capsys):
    bg = fake(delay_ms=50)
    res = tmp_path / "r.jsonl"
    assert run(bg.url, res, "--request-rate", "inf", "--num-prompts", "12") == 0
    (r,), _ = read(res)
    assert bg.fake.peak_active == 12 and r["concurrency"] == 12 and r["max_concurrency"] is None


def test_max_concurrency_caps_a_poisson_rate(fake, tmp_path):
    bg = fake(delay_ms=30)  # 6 tokens: ~0.2 s a request; 200 req/s would pile up
    res = tmp_path / "r.jsonl"
    rc = run(bg.url, res, "--request-rate", "200", "--max-concurrency", "3", "--num-prompts", "12")
    assert rc == 0
    (r,), (row,) = read(res)
    assert bg.fake.peak_active == 3
    assert r["request_rate"] == 200 and r["arrival"] == "poisson" and r["max_concurrency"] == 3
    assert row["request_rate"] == "200.0" and row["burstiness"] == "1.0"


def test_closed_loop_duration(fake, tmp_path, capsys):
    """--concurrency 2 --duration 1: the workers keep sending past the level's prompt
    count until the time is up; what was in flight finishes and counts. One prompt: both
    workers send it at once, so the level goes past its prompt count however slow the
    host (with 4 prompts, 4 requests of over 0.5 s each filled the second on a host
    running two suites at once)."""
    bg = fake(delay_ms=10)  # ~60 ms a request: ~30 of them in 1 s with two workers
    res = tmp_path / "r.jsonl"
    rc = run(bg.url, res, "--concurrency", "2", "--duration", "1", "--num-prompts", "1")
    out = capsys.readouterr().out
    assert rc == 0
    assert "concurrency 2 (closed loop, 1 s each)" in out
    (r,), (row,) = read(res)
    # past the level's one prompt, for the whole second (and the last answers after it)
    assert r["requests"] >= 2 and r["completed"] == r["requests"]
    print(f"{r['requests']} requests in {r['duration_s']:.2f} s")
    assert r["duration_s"] >= 1.0 and r["duration_target_s"] == 1.0
    assert r["arrival"] == "closed loop" and r["concurrency"] == 2
    assert row["duration_target_s"] == "1.0" and row["request_rate"] == ""
    assert bg.fake.peak_active <= 2
    assert "steady_state_note" not in r


def test_constant_arrivals(fake, tmp_path, capsys):
    bg = fake()
    res = tmp_path / "r.jsonl"
    rc = run(bg.url, res, "--request-rate", "20", "--arrival", "constant", "--num-prompts", "5")
    assert rc == 0
    assert "constant arrivals" in capsys.readouterr().out
    (r,), (row,) = read(res)
    assert r["arrival"] == "constant" and row["arrival"] == "constant"
    assert r["burstiness"] is None and row["burstiness"] == ""  # no gamma shape at play
    assert r["offered_rate"] == pytest.approx(20.0)  # gaps of exactly 1/20 s
    t = arrivals.schedule(4.0, 1.0, kind="constant", duration=1.0)
    assert np.allclose(t, [0, 0.25, 0.5, 0.75])
    t = arrivals.schedule(math.inf, count=3)
    assert list(t) == [0, 0, 0]


def test_request_rate_takes_a_list_and_the_fix_it_prints_works(fake, tmp_path, capsys):
    bg = fake()
    res = tmp_path / "r.jsonl"
    assert run(bg.url, res, "--request-rate", "-1") == 2
    err = capsys.readouterr().err
    fix = err.split("fix: e.g. ")[1].split(",")[0]  # "--request-rate 4"
    assert fix == "--request-rate 4"
    rc = run(bg.url, res, "--request-rate", "40,80", "--num-prompts", "2")
    assert rc == 0
    recs, _ = read(res)
    assert [r["request_rate"] for r in recs] == [40, 80]


def test_itl_per_token_and_chunk_gaps(fake, tmp_path):
    """Chunks of 4 tokens every ~20 ms: ITL per token ~5 ms (sglang.bench_serving's),
    the chunk gap ~20 ms, both recorded under their own names."""
    bg = fake(delay_ms=20, tokens_per_chunk=4)
    res = tmp_path / "r.jsonl"
    rc = run(
        bg.url, res, "--concurrency", "1", "--num-prompts", "2", "--max-tokens", "13"
    )  # 1 + 3 x 4 tokens
    assert rc == 0
    (r,), (row,) = read(res)
    gap, itl = r["chunk_gap_ms"]["p50"], r["itl_ms"]["p50"]
    assert itl == pytest.approx(gap / 4, rel=0.05)
    # in ms, and between chunks: some gap spans the server's 20 ms pause (a client that
    # read one chunk late on a busy host shortens the next gap, so not every gap does)
    assert r["chunk_gap_ms"]["p99"] >= 18
    assert r["itl_ms"]["mean"] == pytest.approx(r["chunk_gap_ms"]["mean"] / 4)
    assert r["tokens_per_chunk"] == pytest.approx(13 / 4)
    assert r["itl_source"] == "per-chunk token counts"  # usage on every chunk
    assert float(row["chunk_gap_p50_ms"]) == pytest.approx(gap)
    assert float(row["itl_p50_ms"]) == pytest.approx(itl)
    # throughput: input (the prompts as sent, no chat template: sglang.bench_serving's
    # input lengths), output and total tokens per second of the level; the server's
    # templated prompt count beside it under its own name
    assert r["input_tok_s"] == pytest.approx(r["input_tokens"] / r["duration_s"])
    assert r["prompt_tok_s"] == pytest.approx(r["prompt_tokens"] / r["duration_s"])
    assert r["total_tok_s"] == pytest.approx(r["input_tok_s"] + r["output_tok_s"])
    assert float(row["total_tok_s"]) == pytest.approx(r["total_tok_s"])


def test_generate_endpoint_counts_tokens_per_chunk_exactly(fake, tmp_path):
    bg = fake(delay_ms=5)
    res = tmp_path / "r.jsonl"
    assert (
        run(bg.url, res, "--concurrency", "1", "--num-prompts", "1", "--endpoint", "generate") == 0
    )
    (r,), _ = read(res)
    assert r["itl_source"] == "per-chunk token counts"


def test_disable_stream(fake, tmp_path):
    """sglang.bench_serving's --disable-stream (vLLM's --no-stream means something else:
    refused, tests/test_bench_field_flags.py)."""
    bg = fake(delay_ms=1)
    res = tmp_path / "r.jsonl"
    assert run(bg.url, res, "--concurrency", "1", "--num-prompts", "2", "--disable-stream") == 0
    assert bg.fake.last_body["stream"] is False and "stream_options" not in bg.fake.last_body
    (r,), (row,) = read(res)
    assert r["stream"] is False and row["stream"] == "False"
    assert r["completed"] == 2 and r["output_tokens"] == 12
    assert r["ttft_ms"]["p50"] == pytest.approx(r["e2e_ms"]["p50"])  # one answer
    assert r["itl_ms"]["p50"] is None


@pytest.mark.parametrize("header", ["X-Team=bench=1", "X-Team: bench=1", "X-Team:bench=1"])
def test_header_both_forms(fake, tmp_path, header):
    bg = fake()
    res = tmp_path / "r.jsonl"
    assert run(bg.url, res, "--concurrency", "1", "--num-prompts", "1", "--header", header) == 0
    assert bg.fake.last_headers["X-Team"] == "bench=1"


def test_slo_syntax_and_alias(fake, tmp_path, capsys):
    bg = fake()
    forms = (["--slo", "ttft=5000,tpot=900"], ["--slo", "ttft:5000"], ["--slo-ttft-ms", "5000"])
    for i, slo in enumerate(forms):
        res = tmp_path / f"r{i}.jsonl"
        assert run(bg.url, res, "--concurrency", "1", "--num-prompts", "2", *slo) == 0
        (r,), _ = read(res)
        assert r["slo"]["ttft_ms"] == 5000 and r["goodput_tok_s"] == pytest.approx(
            r["output_tok_s"]
        )


def test_warm_up_line_says_what_is_sent(fake, tmp_path, capsys):
    bg = fake()
    res = tmp_path / "r.jsonl"
    rc = run(bg.url, res, "--warmup", "1", "--output-len", "4", "--concurrency", "1")
    assert rc == 0
    out = capsys.readouterr().out
    assert "warm-up: 1 request(s) of 4 tokens" in out
    assert "256 tokens" not in out and "output length 4" in out
    (r,), _ = read(res)
    assert r["output_len"] == "4"


def test_ports_outside_the_ephemeral_range(tmp_path):
    f = tmp_path / "range"
    f.write_text("32768\t60999\n")
    assert ports.ephemeral_range(f) == (32768, 60999)
    f.write_text("garbage")
    assert ports.ephemeral_range(f) == ports.DEFAULT_EPHEMERAL
    low, high = ports.ephemeral_range()
    for _ in range(20):
        p = ports.pick(span=2)
        assert not low <= p <= high and p >= ports.LOWEST
        assert ports.bindable(p) and ports.bindable(p + 1)
    with socket.socket() as s:  # a port someone listens on is not bindable
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not ports.bindable(s.getsockname()[1])


# ------------------------------------------------------------------ compare: failed arms
@pytest.fixture
def fake_arms(fake, monkeypatch):
    """bench compare with each preset served by a fake endpoint (or failing) instead of
    a launcher: `serve(preset)`, `broken(preset, message)`, `garbage(preset)`."""
    from sgl_eagle_ext.tools.bench import arms

    urls: dict[str, str] = {}
    fails: dict[str, tuple] = {}

    def plan_arm(label, preset, **kw):
        return arms.ArmPlan(label, preset, ["--preset", preset], {"preset": preset})

    class Launched:
        def __init__(self, plan):
            self.plan = plan
            self.stopped_cleanly = True
            self.tls = None  # plain http

        def wait_ready(self, timeout):
            if self.plan.preset in fails:
                raise arms.ArmFailed(*fails[self.plan.preset])
            return urls[self.plan.preset]

        def stop(self):
            return 0

    monkeypatch.setattr(arms, "plan_arm", plan_arm)
    monkeypatch.setattr(arms, "LauncherProcess", Launched)

    class Arms:
        @staticmethod
        def serve(preset: str, **kw) -> None:
            urls[preset] = fake(**kw).url

        @staticmethod
        def broken(preset: str, message: str, launcher_code: int | None = None) -> None:
            fails[preset] = (message, launcher_code)

        @staticmethod
        def garbage(preset: str) -> None:
            """A server whose every answer is not HTTP (http.client.BadStatusLine)."""
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen()

            def answer():
                while True:
                    try:
                        c, _ = srv.accept()
                    except OSError:
                        return
                    with c:
                        c.recv(65536)
                        c.sendall(b"NOT HTTP AT ALL\r\n\r\n")

            import threading

            threading.Thread(target=answer, daemon=True).start()
            urls[preset] = f"http://127.0.0.1:{srv.getsockname()[1]}"

    return Arms


def test_compare_survives_failed_arms(fake_arms, tmp_path, capsys):
    """One arm's launcher exits before READY, another's server answers garbage: one
    error line each, and the comparison of the arms that ran."""
    fake_arms.serve("baseline", delay_ms=5)
    fake_arms.broken(
        "broken",
        "preset broken: the launcher exited with code 2 before READY:\n"
        "  loading...\n  error: unrecognized arguments: --no-such-flag",
    )
    fake_arms.garbage("garbage")
    fake_arms.serve("spec", delay_ms=1, accept_length=2.0)
    res = tmp_path / "c.jsonl"
    argv = ["compare"]
    for arm in ("baseline", "broken", "garbage", "spec"):
        argv += ["--arm", arm]
    argv += ["--concurrency", "1", "--num-prompts", "3", "--prompts-per-concurrency", "0"]
    argv += ["--max-tokens", "4", "--warmup", "0", "--lossless-prompts", "0"]
    argv += ["--results", str(res), "--log-dir", str(tmp_path / "logs")]
    rc = cli.main(argv)
    cap = capsys.readouterr()
    assert rc == 1
    errors = [x for x in cap.err.splitlines() if x.startswith("error:")]
    assert errors == [
        "error: [B] broken failed: preset broken: the launcher exited with code 2 before "
        "READY: error: unrecognized arguments: --no-such-flag",
        errors[1],
    ]
    assert errors[1].startswith("error: [C] garbage failed: ") and "BadStatusLine" in errors[1]
    assert "Traceback" not in cap.err + cap.out
    assert "=== compare " in cap.out and "(reference baseline)" in cap.out
    assert "not compared: broken failed" in cap.out and "not compared: garbage" in cap.out
    # 3 requests per arm at c=1: the verdict comes with the sample-size rule
    assert "too few requests (c=1: 3 completed per arm)" in cap.err
    assert ">= 30 completed requests per arm" in cap.err
    recs = [json.loads(x) for x in res.read_text().splitlines()]
    (c,) = [r for r in recs if r["kind"] == "compare"]
    assert c["arms"] == ["baseline", "spec"] and set(c["failed_arms"]) == {"broken", "garbage"}
    assert c["failed_arm_kinds"] == {"broken": "exited", "garbage": "server"}
    assert c["sample_size_warning"]
    assert [r["arm"] for r in recs if r["kind"] == "sweep"] == ["baseline", "spec"]


def test_compare_arm_refused_as_bad_input_exits_2_after_the_others(fake_arms, tmp_path, capsys):
    """An arm whose launcher refused its input (exit 2): the other arms still run and
    are compared, and the command's exit is 2 (bad input), not 1 (a server failure)."""
    fake_arms.serve("baseline", delay_ms=1)
    fake_arms.broken("typo", "preset typo: the launcher refused its input", launcher_code=2)
    fake_arms.serve("spec", delay_ms=1, accept_length=2.0)
    argv = ["compare", "--arm", "baseline", "--arm", "typo", "--arm", "spec"]
    argv += ["--concurrency", "1", "--num-prompts", "2", "--prompts-per-concurrency", "0"]
    argv += ["--max-tokens", "3", "--warmup", "0", "--lossless-prompts", "0"]
    argv += ["--results", str(tmp_path / "c.jsonl")]
    assert cli.main(argv) == 2
    cap = capsys.readouterr()
    assert "error: [B] typo failed: preset typo: the launcher refused its input" in cap.err
    assert "=== compare " in cap.out and "not compared: typo failed" in cap.out
    recs = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text().splitlines()]
    (c,) = [r for r in recs if r["kind"] == "compare"]
    assert c["failed_arm_kinds"] == {"typo": "refused"}


def test_compare_with_one_arm_left_says_so(fake_arms, tmp_path, capsys):
    fake_arms.serve("baseline")
    fake_arms.broken("broken", "preset broken: not READY after 5 s:\n  capturing graphs")
    argv = ["compare", "--arm", "baseline", "--arm", "broken", "--concurrency", "1"]
    argv += ["--num-prompts", "2", "--prompts-per-concurrency", "0", "--max-tokens", "3"]
    argv += ["--warmup", "0", "--lossless-prompts", "0", "--results", str(tmp_path / "c.jsonl")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "error: [B] broken failed: preset broken: not READY after 5 s: capturing graphs" in err
    assert "1 of 2 arm(s) failed and only baseline ran: nothing to compare" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------ plots and report
def sweep_rec(c: int, run: str = "r1", **load) -> dict:
    return {
        "schema": 1,
        "kind": "sweep",
        "run_id": run,
        "arm": "eagle3",
        "status": "ok",
        "concurrency": c,
        "completed": 40,
        "output_tok_s": 100.0 * c,
        "tpot_ms": {"p50": 10.0 + c, "p90": 12.0 + c, "p99": 15.0 + c},
        "ttft_ms": {"p50": 50.0, "p90": 60.0, "p99": 70.0},
        "itl_ms": {"p50": 5.0, "p90": 6.0, "p99": 7.0},
        "e2e_ms": {"p50": 500.0, "p90": 600.0, "p99": 700.0},
        "max_tokens": 256,
        **load,
        "provenance": {"prompts": {"set": "mixed"}, "server": {"model_path": "m"}},
    }


def test_load_text_says_what_was_sent():
    from sgl_eagle_ext.tools.bench import plot, records

    r = sweep_rec(1, output_len="24", dataset="shipped", input_len="dataset", stream=True)
    r.update(arrival="gamma", burstiness=0.5, max_concurrency=8)

    def text_of(rec):
        return plot.load_text(records.decode(rec, records.Level))

    text = text_of(r)
    assert "output 24 tokens/request" in text and "256" not in text
    assert "gamma arrivals (burstiness 0.5)" in text and "at most 8 in flight" in text
    assert text_of({**r, "stream": False}).endswith("not streamed")
    assert "output 256 tokens/request" in text_of(sweep_rec(1))  # older records


@pytest.mark.harness  # bench report draws (matplotlib: the [plot] extra)
def test_one_level_draws_no_curve(tmp_path, capsys):
    res = tmp_path / "r.jsonl"
    res.write_text(json.dumps(sweep_rec(4)) + "\n")
    assert cli.main(["plot", str(res)]) == 0
    assert "measured at one level only" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.png"))
    out = tmp_path / "report.html"
    assert cli.main(["report", str(res), "-o", str(out)]) == 0
    html = out.read_text()
    assert "one level only: no curve over load to draw" in html
    assert "<h3>Pareto</h3>" not in html and "output 256 tokens/request" in html


@pytest.mark.harness  # matplotlib (the test extra)
def test_draft_position_axis_has_integer_ticks(monkeypatch):
    import matplotlib.pyplot as plt

    from sgl_eagle_ext.tools.bench import spec_view

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    rates = spec_view.position_rates(Counter({0: 4, 1: 3, 2: 2, 3: 1}))
    spec_view.render_spec([], {"SGLang per request": rates})
    ax = figs[0].axes[1]
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    # the conventions: cumulative = share of all cycles; conditional = given j-1 accepted
    assert [round(r.rate, 2) for r in rates] == [0.6, 0.3, 0.1]
    assert [round(r.conditional, 3) for r in rates] == [0.6, 0.5, 0.333]
    lines = spec_view.tables([], {"src": rates})
    assert lines[1].strip().startswith("cumulative: share of all verify cycles")
    assert lines[2].strip().startswith("conditional: share of the cycles that reached")
    assert lines[3].split() == [
        "position",
        "cycles",
        "accepting",
        "it",
        "cumulative",
        "conditional",
    ]
    assert lines[5].split()[2:] == ["30.0%", "50.0%"]  # position 2


# ------------------------------------------------------------------ workloads
class RecordingFake(FakeSGLang):
    """The fake endpoint that keeps every chat body and when it came."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.bodies: list[dict] = []
        self.times: list[float] = []

    async def chat(self, req):
        import time

        self.times.append(time.monotonic())
        self.bodies.append(await req.json())
        return await super().chat(req)


@pytest.fixture
def recording():
    with Background(RecordingFake()) as bg:
        yield bg


def test_shared_prefix(recording, tmp_path):
    res = tmp_path / "r.jsonl"
    argv = ["--dataset", "shared-prefix:300", "--concurrency", "2", "--num-prompts", "4"]
    assert run(recording.url, res, *argv) == 0
    bodies = recording.fake.bodies
    assert len(bodies) == 4
    systems = {b["messages"][0]["content"] for b in bodies}
    users = {b["messages"][1]["content"] for b in bodies}
    assert [m["role"] for m in bodies[0]["messages"]] == ["system", "user"]
    assert len(systems) == 1 and len(users) == 4  # one prefix, each its own question
    (prefix,) = systems
    assert 300 * 3 <= len(prefix) <= 300 * 5  # ~300 tokens at ~4 characters each
    (r,), (row,) = read(res)
    assert r["dataset"] == "shared-prefix:300" and row["dataset"] == "shared-prefix:300"
    # with --input-len: the question is that many tokens of source text
    recording.fake.bodies.clear()
    argv = [*argv[:-1], "2", "--input-len", "50"]
    assert run(recording.url, tmp_path / "q.jsonl", *argv) == 0
    qs = [b["messages"][1]["content"] for b in recording.fake.bodies]
    assert all(150 <= len(q) <= 300 for q in qs) and len(set(qs)) == 2


MOONCAKE = [  # ms; two requests share the block of hash id 7
    {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [7, 1]},
    {"timestamp": 1200, "input_length": 700, "output_length": 5, "hash_ids": [7, 2]},
    {"timestamp": 600, "input_length": 40, "output_length": 4, "hash_ids": [9]},
]


def assert_on_schedule(times, offsets) -> None:
    """Requests arrived at the trace's offsets from the first: none early (beyond the
    first one's own lateness) and none later than a busy box's scheduling delay (a send
    is never early, but on 2 loaded cores one came 0.29 s late). Wide enough for CI's
    load, narrow enough to tell the trace's times from a burst or another speed."""
    arrived = np.asarray(times) - times[0]
    for got, want in zip(arrived[1:], offsets):
        assert want - 0.2 <= got <= want + 1.0, (list(arrived), offsets)


def test_trace_replay_mooncake(recording, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(x) for x in MOONCAKE) + "\n")
    res = tmp_path / "r.jsonl"
    assert run(recording.url, res, "--dataset", f"trace:{trace}") == 0
    out = capsys.readouterr().out
    assert "trace replay: 3 request(s) at the trace's own times over 1.2 s" in out
    bodies, times = recording.fake.bodies, recording.fake.times
    # sent in time order, at the trace's gaps (0, 0.6, 1.2 s), each at its own lengths
    assert [b["max_tokens"] for b in bodies] == [3, 4, 5]
    assert_on_schedule(times, [0.6, 1.2])
    first, third = bodies[0]["messages"][0]["content"], bodies[2]["messages"][0]["content"]
    block = first.split("\n\n")[0]
    assert third.startswith(block) and not bodies[1]["messages"][0]["content"].startswith(block)
    assert len(first) > len(bodies[1]["messages"][0]["content"])  # 600 vs 40 tokens
    (r,), (row,) = read(res)
    assert r["arrival"] == "trace" and r["arrivals"] == 3 and row["arrival"] == "trace"
    assert r["trace_speed"] == 1.0
    assert r["request_rate"] == pytest.approx(2 / 1.2)  # 2 gaps over 1.2 s
    assert r["offered_rate"] == pytest.approx(2 / 1.2)


def test_trace_speed_replays_faster_and_is_recorded(recording, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(x) for x in MOONCAKE) + "\n")
    res = tmp_path / "r.jsonl"
    argv = ["--dataset", f"trace:{trace}", "--trace-speed", "0.5"]
    assert run(recording.url, res, *argv) == 0
    out = capsys.readouterr().out
    assert "trace replay: 3 request(s) at the trace's times x0.5 speed over 2.4 s" in out
    assert_on_schedule(recording.fake.times, [1.2, 2.4])  # half the speed: 0.6 s gaps take 1.2
    (r,), (row,) = read(res)
    assert r["trace_speed"] == 0.5 and row["trace_speed"] == "0.5"
    assert r["request_rate"] == pytest.approx(2 / 2.4)
    assert run(recording.url, res, "--trace-speed", "0") == 2  # checked before anything runs


def test_trace_burstgpt_csv_with_a_given_load(recording, tmp_path):
    trace = tmp_path / "b.csv"
    trace.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5.0,ChatGPT,120,6,126,Conversation log\n"
        "1.0,GPT-4,80,2,82,Conversation log\n"
        "9.0,ChatGPT,100,0,100,Conversation log\n"  # a failed request: dropped
    )
    res = tmp_path / "r.jsonl"
    argv = ["--dataset", f"trace:{trace}", "--concurrency", "1", "--num-prompts", "2"]
    assert run(recording.url, res, *argv) == 0  # closed loop over the trace's lengths
    assert [b["max_tokens"] for b in recording.fake.bodies] == [2, 6]
    (r,), _ = read(res)
    assert r["arrival"] == "closed loop" and r["dataset"] == f"trace:{trace}"


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"timestamp": 0, "input_length": 5}\n', "t.jsonl:1: no 'output_length'"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": -1, '
            '"input_length": 5, "output_length": 1}\n',
            "t.jsonl:2: timestamp is -1, not a time",
        ),
        (
            '{"timestamp": 0, "input_length": "x", "output_length": 1}\n',
            "input_length is 'x', not a token count",
        ),
        ("{nope\n", "t.jsonl:1: not valid JSON"),
    ],
)
def test_bad_traces_name_file_line_and_field(tmp_path, content, words):
    from sgl_eagle_ext.tools.bench import datasets

    trace = tmp_path / "t.jsonl"
    trace.write_text(content)
    with pytest.raises(records.UserError) as e:
        datasets.trace_times(str(trace))
    assert words in str(e.value), str(e.value)


def test_bad_dataset_specs(capsys, tmp_path):
    for spec, words in (
        ("shared-prefix:x", "N must be a token count >= 1"),
        ("shared-prefix", "unknown"),
        ("trace", "unknown"),
        (f"trace:{tmp_path}/none.jsonl", "no such file"),
    ):
        from sgl_eagle_ext.tools.bench import datasets

        with pytest.raises(records.UserError) as e:
            kind, path = datasets.parse_spec(spec)
            datasets.trace_times(path)
        assert words in str(e.value), spec


def test_hf_dataset_without_the_package_names_the_install(tmp_path, capsys, monkeypatch):
    import sys

    from sgl_eagle_ext.tools.bench import datasets, hf_data

    monkeypatch.setitem(sys.modules, "datasets", None)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    folder = tmp_path / "saved"
    folder.mkdir()
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    for path, module in ((folder, "datasets"), (tmp_path / "d.parquet", "pyarrow.parquet")):
        with pytest.raises(records.UserError) as e:
            datasets.load_hf(str(path))
        assert f"needs the `{module}` package" in str(e.value)
        assert "pip install datasets" in str(e.value)
    with pytest.raises(records.UserError, match="not a folder written by save_to_disk"):
        datasets.load_hf(str(tmp_path / "missing"))
    # rows of the usual layouts -> conversations
    assert hf_data.as_sharegpt({"prompt": "hi", "response": "yo"}, "r")["conversations"] == [
        {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "yo"},
    ]
    msgs = [{"role": "user", "content": "q"}]
    assert hf_data.as_sharegpt({"messages": msgs}, "r")["conversations"] == msgs
    with pytest.raises(records.UserError, match="no column to take a prompt from"):
        hf_data.as_sharegpt({"foo": 1}, "d row 0")


def test_hf_dataset_rows_become_requests(recording, tmp_path, monkeypatch):
    """hf:PATH read through `datasets` (a stand-in module here: the harness venvs do not
    install it): its rows' prompts are sent, replies set the output length."""
    import sys
    import types

    rows = [{"question": f"q{i}?", "answer": " x" * (i + 1)} for i in range(3)]
    fake_mod = types.ModuleType("datasets")

    class DatasetDict(dict):
        pass

    fake_mod.DatasetDict = DatasetDict
    fake_mod.load_from_disk = lambda p: DatasetDict(train=rows)
    monkeypatch.setitem(sys.modules, "datasets", fake_mod)
    folder = tmp_path / "saved"
    folder.mkdir()
    res = tmp_path / "r.jsonl"
    argv = ["--dataset", f"hf:{folder}", "--concurrency", "1", "--num-prompts", "3"]
    assert run(recording.url, res, *argv) == 0
    sent = sorted(b["messages"][-1]["content"] for b in recording.fake.bodies)
    assert sent == ["q0?", "q1?", "q2?"]
    (r,), _ = read(res)
    assert r["dataset"] == f"hf:{folder}" and r["output_len"] == "dataset"


# ------------------------------------------------------------------ real SGLang on CPU
@pytest.mark.server
def test_compare_with_an_arm_whose_server_fails_to_start(tiny_models, tmp_path):
    """A preset whose server dies while starting (a tokenizer that is not there: the
    plan is fine, SGLang fails at load) comes first; the real arm after it still runs,
    a burst capped by --max-concurrency, and is reported."""
    import subprocess
    import sys

    broken = tmp_path / "broken.toml"
    broken.write_text(
        'description = "a tokenizer that is not there"\nextends = "baseline"\n'
        '[server]\ntokenizer-path = "/nonexistent/tokenizer"\n'
    )
    res = tmp_path / "c.jsonl"
    # its tokenizer is a setting the arms differ in: run anyway (the check is tested in
    # tests/test_fairness.py and below)
    argv = ["compare", "--arm", str(broken), "--arm", "baseline", "--cpu", "--allow-unequal"]
    argv += ["--model-path", str(tiny_models["target"]), "--request-rate", "inf"]
    argv += ["--max-concurrency", "2", "--num-prompts", "4", "--max-tokens", "4"]
    argv += ["--warmup", "0", "--lossless-prompts", "0", "--results", str(res)]
    argv += ["--log-dir", str(tmp_path / "logs")]
    out = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.bench", *argv],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "Traceback" not in text
    errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 2, text
    assert errors[0].startswith("error: [A] broken failed: preset broken: the server exited")
    assert "/nonexistent/tokenizer" in errors[0]
    assert errors[1] == (
        "error: 1 of 2 arm(s) failed and only baseline ran: nothing to compare; "
        "its sweep is recorded"
    )
    # progress while the server started: phases with the elapsed time, then READY
    assert "[B] READY after " in out.stdout and "[B] starting (preflight" in out.stdout
    assert "[B: baseline]" in out.stdout and " rate  done" in out.stdout
    (r,) = [json.loads(x) for x in res.read_text().splitlines()]
    assert (r["arm"], r["status"], r["completed"]) == ("baseline", "ok", 4)
    assert r["arrival"] == "burst" and r["concurrency"] == 2 and r["max_concurrency"] == 2
    assert r["itl_ms"]["p50"] is not None and r["chunk_gap_ms"]["p50"] is not None
    port = int(r["url"].rsplit(":", 1)[1])
    low, high = ports.ephemeral_range()
    assert not low <= port <= high


def test_itls_per_token_from_chunks():
    from sgl_eagle_ext.tools.bench import client as cl

    # 1 token, then chunks of 3 and 2 tokens 0.3 s and 0.4 s later: per token 0.1 and 0.2
    r = cl.RequestResult(0, "p", ok=True, completion_tokens=6, chunk_times=[0.1, 0.4, 0.8])
    r.chunk_tokens = [1, 3, 2]
    assert r.itl_exact and r.chunk_gaps == pytest.approx([0.3, 0.4])
    assert r.itls == pytest.approx([0.1] * 3 + [0.2] * 2)
    # no per-chunk counts: the 5 tokens after the first spread as evenly as whole tokens
    # allow (2 and 3), so they still add up: the ITL mean stays the TPOT
    r.chunk_tokens = None
    assert not r.itl_exact and r.tokens_per_gap() == [2, 3]
    assert r.itls == pytest.approx([0.15, 0.15] + [0.4 / 3] * 3)
    # one token per chunk: ITL is the chunk gap
    r = cl.RequestResult(0, "p", ok=True, completion_tokens=3, chunk_times=[0.1, 0.2, 0.4])
    assert r.itls == pytest.approx([0.1, 0.2]) and r.itls == pytest.approx(r.chunk_gaps)
