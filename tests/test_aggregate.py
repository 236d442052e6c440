"""The one aggregator (profiling/aggregate.py): one log fed to the report, offline tune
and tune --live's tally gives the same figures; the rules it states once (warm-up,
histogram convention, Decode-batch median, v=1 lines) hold."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sgl_eagle_ext.profiling import record
from sgl_eagle_ext.profiling.aggregate import Profile
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.cycles import Resolved
from sgl_eagle_ext.tools.tune.live_driver import Tally


def cycles(bs: int, steps: int, step_ms: float, host_ms: float, accepted, n: int):
    ms = {"step": step_ms, "host": host_ms, "cycle": step_ms + host_ms, "draft": steps * 2.0}
    ms |= {"verify_fwd": step_ms / 2, "accept": 0.5, "draft_extend": 1.0}
    return [Resolved("decode", bs, steps + 1, dict(ms), list(accepted), 0, steps)] * n


def line(cs) -> str:
    return "[2026-12-02 08:00:00 TP0] " + record.log_line(window.summarize(cs, 0, "host"))


DECODE = (
    "[2026-12-02 08:00:01 TP0] Decode batch, #running-req: {bs}, #full token: 380, "
    "full token usage: 0.00, accept len: 2.50, accept rate: 0.35, cuda graph: False, "
    "gen throughput (token/s): {tps:.2f}, #queue-req: 0"
)
SERVER_ARGS = {
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "speculative_draft_model_path": "/d",
}


@pytest.fixture
def log(tmp_path):
    lines = [f"[2026-12-02 07:59:00] server_args={SERVER_ARGS}"]
    lines.append(line(cycles(1, 3, 900.0, 5.0, [4], 3)))  # JIT warm-up: left out
    for i in range(4):
        lines.append(line(cycles(1, 3, 100.0 + i, 10.0, [3, 2][i % 2 :] or [3], 5)))
        lines.append(line(cycles(1, 1, 60.0 + i, 8.0, [2, 1], 4)))
        lines.append(line(cycles(4, 3, 150.0 + i, 20.0, [3, 1, 4, 2], 6)))
        lines.append(DECODE.format(bs=4, tps=90.0 + i))
    path = tmp_path / "spec.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_one_log_gives_the_report_offline_tune_and_live_tune_the_same_figures(log, capsys):
    from sgl_eagle_ext.profiling import report
    from sgl_eagle_ext.tools.tune import cli as tune

    assert report.main([str(log), "--json", "--baseline-tps", "20"]) == 0
    rows = {r["bs"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    by_report = {
        (bs, s["steps"]): (s["accept_len"], s["phases"]["cycle"]["mean_ms"], s["tok_s"])
        for bs, r in rows.items()
        for s in r["by_steps"]
    }
    assert rows[1]["warmup_cycles_excluded"] == 3  # the warm-up rule, in all three

    assert tune.main([str(log), "--json", "--baseline-tps", "20"]) == 0
    preds = json.loads(capsys.readouterr().out)["predictions"]
    by_tune = {
        (int(bs), p["steps"]): (p["accept_len"], p["cycle_ms"], p["tok_s"])
        for bs, ps in preds.items()
        for p in ps
        if p["measured"]
    }

    by_live = {}
    for bs, steps in by_report:
        tally = Tally(bs, steps)
        fields = {"output_tokens": 0, "duration_s": 1.0, "requests": 1, "completed": 1}
        tally.add(fields, list(record.iter_records(log)), {"speculative_eagle_topk": 1})
        prof = tally.record(None, 16)["profile"]
        by_live[bs, steps] = (prof["accept_len"], prof["cycle_ms"], prof["decode_tok_s"])

    assert set(by_report) == {(1, 1), (1, 3), (4, 3)}
    for key, figures in by_report.items():
        assert by_tune[key] == pytest.approx(figures), key
        assert by_live[key] == pytest.approx(figures), key
        print(key, "accept {:.3f}, cycle {:.2f} ms, {:.2f} tok/s".format(*figures))
    # the wall cycle: step plus host, the host row its own share
    assert by_report[4, 3][1] == pytest.approx(151.5 + 20.0)
    host = rows[4]["phases"]["host"]
    assert host["mean_ms"] == pytest.approx(20.0)
    assert host["share_pct"] == pytest.approx(100 * 20.0 / 171.5)
    # SGLang's own: its lines' tokens (same accept length: the same per line) over
    # their summed time
    assert rows[4]["sglang_gen_tps"] == pytest.approx(4 / sum(1 / (90.0 + i) for i in range(4)))


def test_one_histogram_convention_correct_drafts(log):
    """The record counts accepted tokens (bonus included); the aggregator and every
    tool reading it count correct drafts, SGLang's convention."""
    from sgl_eagle_ext.tools.bench import spec_view

    cell = Profile.read(log).cells()[4, 3]
    assert cell.hist == {2: 24, 0: 24, 3: 24, 1: 24}  # [3, 1, 4, 2] tokens, 4 windows x 6
    assert cell.accept_len == pytest.approx(2.5)
    h = spec_view.hist_from_profile([log])
    assert h[3] == 24  # bs 4 only: the warm-up window's 4 tokens are left out
    assert h[2] == 24 + 10  # bs 4, and bs 1's [3, 2] windows


def test_v1_lines_read_with_no_host_row():
    v1 = (
        "EAGLE3_PROFILE v=1 rank=0 cycles=2 bs=2:2 draft_tokens=2:2 steps=1:2 "
        "cycle_ms=868.48/868.48/868.48 draft_ms=9.72/9.72/9.72 "
        "verify_fwd_ms=777.53/777.53/777.53 accept_ms=4.95/4.95/4.95 "
        "draft_extend_ms=64.31/64.31/64.31 other_ms=11.97/11.97/11.97 "
        "share=draft:1.1,verify_fwd:89.5,accept:0.6,draft_extend:7.4,other:1.4 "
        "accept_len=1.50 accept_hist=1:2,2:2 tok_s=3.45 prefill=0/0.00 syncs=off dropped=0 "
        "clock=host"
    )
    w = record.record_from_line(v1)
    assert w.v == 1 and w.phases["host"].mean == 0.0
    assert record.log_line(w) == v1  # written back as it was
    cell = Profile.read([v1]).cells()[2, 1]
    assert cell.mean("cycle") == pytest.approx(868.48) and cell.accept_len == 1.5
    j = record.record_from_line(
        json.dumps(
            w.to_json() | {"phases": {p: vars(s) for p, s in w.phases.items() if p != "host"}}
        )
    )
    assert j.phases["host"].mean == 0.0


def test_report_prints_the_host_share(log):
    p = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.report", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    host = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] == ["host"]]
    # bs 1: (20 x 10 + 16 x 8) ms of host in (20 x 111.5 + 16 x 69.5) ms; bs 4: 20 of 171.5
    assert [h[-1] for h in host] == ["9.8%", "11.7%"]


def test_sglang_lines_are_kept_as_the_cycles_are():
    """SGLang's decode clock runs from one Decode batch line to the next, prefills
    included. At one batch size every line times one verify pass whatever it accepted:
    the 1-token lines count (a per-token rule dropped them); the line after a Prefill
    batch line (it holds the 160 ms prefill) does not; the leading warm-up does not, by
    the windows' rule; a slow pass later on counts, as its cycle does in the profile
    (a rule dropping it, and not the cycle, read -7.7% in CI). The two rates differ by
    the after-prefill cycles alone."""
    decode = (
        "[2026-12-02 08:00:01 TP0] Decode batch, #running-req: 1, #token: 20, token usage:"
        " 0.00, accept len: {acc:.2f}, accept rate: 0.3, cpu graph: False, gen throughput"
        " (token/s): {tps:.2f}, #queue-req: 0"
    )
    prefill = "[2026-12-02 08:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 8, ..."
    lines = []

    def cycle(acc: int, seconds: float, after_prefill: bool = False) -> None:
        """One cycle's window and its Decode batch line (which also holds a prefill)."""
        lines.append(line(cycles(1, 3, 1000 * seconds - 10.0, 10.0, [acc], 1)))
        if after_prefill:
            lines.append(prefill)
        held = 0.16 if after_prefill else 0.0
        lines.append(decode.format(acc=acc, tps=acc / (seconds + held)))

    cycle(4, 0.9, after_prefill=True)  # compile: warm-up, and after a prefill
    cycle(1, 0.5)  # still compiling: warm-up
    for a in (4, 1, 4, 1, 3, 4, 2, 4):
        cycle(a, 0.1)
    cycle(1, 0.5)  # a slow pass (another process had the CPU): counted by both
    cycle(2, 0.1, after_prefill=True)  # the next request
    for a in (4, 1, 4):
        cycle(a, 0.1)
    prof = Profile.read(lines)
    kept = prof.sglang[1].kept()
    assert len(kept) == 12 and sum(s for _, s in kept) == pytest.approx(1.6, rel=1e-3)
    # 33 tokens over 12 verify passes (1.6 s); the profile's 13 cycles, 35 tokens in 1.7 s
    assert prof.sglang[1].gen_tps == pytest.approx(33 / 1.6, rel=1e-3)
    cell = prof.cell(1)
    assert (cell.cycles, prof.warmup((1, 3))) == (13, (2, 2))
    assert cell.tok_s == pytest.approx(35 / 1.7, rel=1e-3)
