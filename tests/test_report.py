"""python -m sgl_eagle_ext.report on hand-made logs (real server logs are read
in tests/test_profile_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sgl_eagle_ext.profiling import record
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.cycles import Resolved


def profile_line(
    bs: int,
    cycle_ms: float,
    verify_ms: float,
    accepted: list[int],
    n: int = 20,
    clock: str = "cuda",
):
    per = [
        Resolved(
            "decode",
            bs,
            16,
            {
                "cycle": cycle_ms,
                "draft": 1.0,
                "verify_fwd": verify_ms,
                "accept": 0.5,
                "draft_extend": 0.8,
            },
            accepted,
            0,
        )
        for _ in range(n)
    ]
    return "[2026-11-29 10:00:00 TP0] " + window.log_line(window.summarize(per, 0, clock))


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.report", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# SGLang's own periodic line, as printed by 0.5.10.post1 and by 0.5.23.
DECODE_0510 = (
    "[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, #token: 380, "
    "token usage: 0.00, accept len: 2.04, accept rate: 0.13, cuda graph: True, "
    "gen throughput (token/s): 95.80, #queue-req: 0"
)
DECODE_0523 = (
    "[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, #full token: 380, "
    "full token usage: 0.00, accept len: 2.06, accept rate: 0.35, cuda graph: True, "
    "gen throughput (token/s): 96.40, #queue-req: 0, fwd occupancy: 91.00%"
)
BASELINE = (
    "[2026-11-29 09:00:01 TP0] Decode batch, #running-req: 1, #token: 380, token usage: "
    "0.00, cuda graph: True, gen throughput (token/s): 82.00, #queue-req: 0"
)


def test_break_even_example_of_the_first_kimi_measurements(tmp_path):
    # As measured on 8 x RTX PRO 6000 with Kimi-K2.5 INT4: verify ~28.5 of a 30 ms cycle,
    # accept length 2.05, baseline 82 tok/s -> break-even 2.46
    log = tmp_path / "server.log"
    log.write_text(profile_line(1, 30.0, 28.5, [2] * 19 + [3]) + "\n")
    p = report(str(log), "--baseline-tps", "82", "--json")
    assert p.returncode == 0, p.stderr
    (row,) = json.loads(p.stdout)["rows"]
    assert row["break_even_accept_len"] == pytest.approx(2.46, abs=0.005)
    assert row["accept_len"] == pytest.approx(2.05)
    assert row["phases"]["verify_fwd"]["share_pct"] == pytest.approx(95.0)
    assert row["speedup"] == pytest.approx(2.05 / 2.46, abs=0.01)
    text = report(str(log), "--baseline-tps", "82", "--target-tps", "120").stdout
    assert "break-even accept length 2.46" in text and "does not pay" in text
    assert "accept length for 120.0 tok/s per stream: 3.60" in text


def test_a_one_stream_baseline_gives_break_even_at_batch_size_one_only(tmp_path):
    """--baseline-tps is one stream's figure: a stream of a batch of 4 is slower than one
    alone, so it would overstate tau* there. Break-even at bs 1, a note naming why (and
    what gives it) at bs 4, as tune's model does."""
    log = tmp_path / "server.log"
    log.write_text(
        profile_line(1, 30.0, 28.5, [2] * 20) + "\n" + profile_line(4, 40.0, 38.0, [2] * 20) + "\n"
    )
    p = report(str(log), "--baseline-tps", "82", "--json")
    assert p.returncode == 0, p.stderr
    one, four = json.loads(p.stdout)["rows"]
    assert (one["bs"], four["bs"]) == (1, 4)
    assert one["break_even_accept_len"] == pytest.approx(2.46, abs=0.005)
    assert "baseline_note" not in one
    assert "break_even_accept_len" not in four and "speedup" not in four
    assert "--baseline-log" in four["baseline_note"]
    text = report(str(log), "--baseline-ms-per-token", "12.2").stdout
    block = text.split("== batch size 4")[1]
    assert "break-even" not in block.replace("no break-even", "")
    assert "no break-even at this batch size: the baseline given is one stream's" in block


def test_baseline_log_and_sglang_lines_of_every_format(tmp_path):
    spec = tmp_path / "spec.log"
    spec.write_text(
        "\n".join(
            [
                profile_line(1, 30.0, 28.5, [2, 2]),
                DECODE_0510,
                DECODE_0523,
                profile_line(4, 40.0, 37.0, [2, 1, 3, 2]),
            ]
        )
        + "\n"
    )
    base = tmp_path / "base.log"
    base.write_text(BASELINE + "\n" + BASELINE.replace("82.00", "84.00") + "\n")
    p = report(str(spec), "--baseline-log", str(base), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    rows = {r["bs"]: r for r in out["rows"]}
    assert out["decode_lines"] == 2 and out["profile_windows"] == 2
    assert rows[1]["sglang_accept_len"] == pytest.approx(2.05)
    base_ms = 1000 * (1 / 82 + 1 / 84) / 2  # the two lines' time over their tokens
    assert rows[1]["baseline_ms_per_token"] == pytest.approx(base_ms)
    assert rows[1]["break_even_accept_len"] == pytest.approx(30 / base_ms)
    assert "break_even_accept_len" not in rows[4]  # no baseline at batch size 4


def test_garbled_and_truncated_lines_are_counted_not_fatal(tmp_path):
    good = profile_line(1, 30.0, 28.5, [2, 3])
    log = tmp_path / "server.log"
    log.write_text(
        "\n".join(
            [
                good,
                good[: len(good) // 2],
                "EAGLE3_PROFILE v=1 rank=x",
                DECODE_0523[:60],
                '{"cycles": 3',
                "plain text",
            ]
        )
        + "\n"
    )
    p = report(str(log), "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["profile_windows"] == 1 and out["skipped_lines"] == 4


def test_json_lines_file_equals_log_line(tmp_path):
    per = [
        Resolved(
            "decode",
            2,
            6,
            {"cycle": 20.0, "draft": 2.0, "verify_fwd": 15.0, "accept": 1.0, "draft_extend": 1.5},
            [3, 2],
            0,
        )
    ] * 5
    rec = window.summarize(per, 0, "cuda")
    (tmp_path / "a.log").write_text(window.log_line(rec) + "\n")
    (tmp_path / "a.jsonl").write_text(record.json_line(rec))
    a = json.loads(report(str(tmp_path / "a.log"), "--json").stdout)["rows"]
    b = json.loads(report(str(tmp_path / "a.jsonl"), "--json").stdout)["rows"]
    assert a[0]["accept_len"] == b[0]["accept_len"] == 2.5
    assert a[0]["phases"]["verify_fwd"]["mean_ms"] == pytest.approx(
        b[0]["phases"]["verify_fwd"]["mean_ms"]
    )


def test_bad_input(tmp_path):
    p = report(str(tmp_path / "missing.log"))
    assert p.returncode == 2 and "missing.log" in p.stderr and "Traceback" not in p.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    p = report(str(empty))
    assert p.returncode == 1 and "EAGLE3_PROFILE=1" in p.stderr and "Traceback" not in p.stderr
    p = report(str(empty), "--baseline-tps", "-3")
    assert p.returncode == 2 and "positive" in p.stderr


def test_baseline_from_a_log_times_decode_alone():
    """The baseline's lines kept as the profile's cycles are: not the warm-up, not the
    line whose time holds a prefill (and the idle before it); a slow line later counts."""
    from sgl_eagle_ext.profiling import report
    from sgl_eagle_ext.profiling.aggregate import Profile

    prefill = "[2026-11-29 09:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 12, #q"
    rates = [0.5, 3.0, 3.1, 2.9, 1.2, 3.0, "prefill", 0.1, 3.0]
    log = Profile.read(
        [prefill if r == "prefill" else BASELINE.replace("82.00", f"{r:.2f}") for r in rates]
    )
    kept = [3.0, 3.1, 2.9, 1.2, 3.0, 3.0]  # 0.5: warm-up; 0.1: after the prefill
    assert report.baseline_ms_per_token(log, 1) == pytest.approx(
        1000 * sum(1 / r for r in kept) / len(kept)
    )


def test_by_steps_rows_keep_their_columns_without_a_baseline(capsys):
    """No baseline: tau* and the ratio print as '-' in their own columns, not run together."""
    from sgl_eagle_ext.profiling import report

    row = {"steps": 2, "no_draft": False, "cycles": 24, "accept_len": 2.58, "tok_s": 1.9}
    row["phases"] = {"cycle": {"mean_ms": 1357.58}, "draft": {"mean_ms": 458.73}}
    report.print_by_steps([row])
    header, line = capsys.readouterr().out.splitlines()
    assert line.split() == ["2", "24", "1357.58", "458.73", "2.58", "1.9", "-", "-"]
    assert len(line) == len(header)


def test_warmup_windows_are_excluded_by_the_stated_rule_and_counted(tmp_path):
    """Defect 6: a compile cycle in the first window halved the printed speed."""
    log = tmp_path / "spec.log"
    log.write_text(
        "\n".join(
            [
                profile_line(1, 2000.0, 1990.0, [3], n=3),  # JIT compilation: 3 slow cycles
                *(profile_line(1, 300.0, 290.0, [3], n=4) for _ in range(4)),
                DECODE_0523.replace("96.40", "10.30"),
            ]
        )
        + "\n"
    )
    p = report(str(log), "--json")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["rows"][0]
    assert row["warmup_cycles_excluded"] == 3 and row["warmup_windows_excluded"] == 1
    assert row["cycles"] == 16 and row["tok_s"] == pytest.approx(10.0)
    assert row["profile_vs_sglang_pct"] == pytest.approx(100 * (10.0 / 10.3 - 1))
    text = report(str(log)).stdout
    assert "3 warm-up cycles excluded" in text
    assert "agrees with SGLang's own gen throughput within 5%" in text


def test_a_steady_slow_window_is_not_warmup(tmp_path):
    log = tmp_path / "spec.log"
    log.write_text(
        "\n".join([profile_line(1, 300.0, 290.0, [3], n=4), profile_line(1, 900.0, 890.0, [3])])
        + "\n"
    )
    row = json.loads(report(str(log), "--json").stdout)["rows"][0]
    assert row["warmup_cycles_excluded"] == 0 and row["cycles"] == 24  # only leading ones


def test_disagreement_with_sglang_is_said_and_no_empty_sections(tmp_path):
    log = tmp_path / "spec.log"
    log.write_text(
        "\n".join(
            [
                profile_line(1, 300.0, 290.0, [3], n=4),
                DECODE_0523.replace("96.40", "5.00"),  # bs 1: the profile says 10
                DECODE_0523.replace("#running-req: 1", "#running-req: 3"),  # no profile
            ]
        )
        + "\n"
    )
    text = report(str(log)).stdout
    assert "differ by +100% (over 5%)" in text
    assert "0 cycles in 0 windows" not in text and "== batch size 3" not in text
    assert "batch size 3: accept len 2.06, gen throughput 96.4 tok/s" in text


def test_other_and_host_are_named_for_the_clock_that_timed_them(tmp_path):
    """Issue 34: on a GPU `other` is GPU-timeline time (plan-stream waits, gaps between
    kernels), on the CPU harness host work; the report says which, per batch size."""
    gpu, cpu = tmp_path / "gpu.log", tmp_path / "cpu.log"
    gpu.write_text(profile_line(1, 30.0, 28.5, [2] * 20) + "\n")
    cpu.write_text(profile_line(2, 300.0, 250.0, [2] * 20, clock="host") + "\n")
    on_gpu, on_cpu = report(str(gpu)).stdout, report(str(cpu)).stdout
    assert (
        "  other: GPU-timeline time in the step that no phase covers: waits on the plan" in on_gpu
    )
    assert "  host: the forward stream's wait for the host between steps" in on_gpu
    assert "  other: host work in the step between its phases" in on_cpu
    assert "GPU-timeline" not in on_cpu
    both = json.loads(report(str(gpu), str(cpu), "--json").stdout)["rows"]
    assert [r["clock"] for r in both] == [["cuda"], ["host"]]
    assert both[1]["row_meaning"]["other"].startswith("host work in the step")


def test_a_disagreement_on_a_contended_host_is_named_sampling(tmp_path):
    """Issue 34, host contention (CPU harness at load ~10: windows' mean cycles 1.5-2.8 s,
    -9..-12% against SGLang's lines): when the kept windows' cycle times spread at least
    twice as wide as the disagreement, the note says the two figures sampled different
    cycles; steady windows with the same disagreement keep the uncounted-time note."""
    decode = DECODE_0523.replace("96.40", "{tps}").replace("accept len: 2.06", "accept len: 3.00")
    busy = [profile_line(1, ms, ms * 0.9, [3], n=4) for ms in (2000.0, 1400.0, 2800.0, 1700.0)]
    lines = busy + [decode.format(tps=1.30)] * 3  # profile: 3 tokens / 1.975 s = 1.52 tok/s
    log = tmp_path / "busy.log"
    log.write_text("\n".join(lines) + "\n")
    text = report(str(log)).stdout
    assert "differ by +17% (over 5%): the windows' mean cycle ranged 1400-2800 ms" in text, text
    assert "(76% of the median: a contended host), and SGLang's 3 kept lines and the " in text
    assert "profile's 4 windows cover different cycles" in text
    row = json.loads(report(str(log), "--json").stdout)["rows"][0]
    assert row["cycle_spread_pct"] == pytest.approx(100 * 1400 / 1850)
    steady = [profile_line(1, ms, ms * 0.9, [3], n=4) for ms in (2000.0, 1980.0, 2020.0, 1990.0)]
    log.write_text("\n".join(steady + [decode.format(tps=1.30)] * 3) + "\n")
    text = report(str(log)).stdout
    assert "(over 5%): time outside the profiled cycles" in text, text
