"""tune --live's pieces without a server (results file, schedule, verdicts, the table
from measured cells, the schedule file), and offline tune on a tree log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.in_sglang import schedule_control
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.cycles import Resolved
from sgl_eagle_ext.tools.tune import live, live_report
from sgl_eagle_ext.tools.tune.live_results import Key, Results, fit, schedule, steps_priority


def cell(level, steps, tok_s, accept=None, cycle=100.0):
    return {
        "kind": "cell",
        "level": level,
        "steps": steps,
        "client": {"output_tok_s": tok_s},
        "profile": {"accept_len": accept or (1.0 if steps == 0 else 2.0), "cycle_ms": cycle},
    }


def test_schedule_order_and_budget():
    assert steps_priority([0, 1, 2, 3, 5]) == [0, 1, 5, 3, 2]
    assert steps_priority([0, 1, 2, 3, 4, 5, 6, 7]) == [0, 1, 7, 4, 2, 3, 5, 6]
    keys = schedule([4, 1], [0, 1, 3])
    assert keys[:2] == [Key("cell", 1, 0), Key("cell", 4, 0)]
    assert keys[-1] == Key("cell", 4, 3) or keys[-1] == Key("cell", 4, 1)
    assert fit(keys, 10.0, 45.0, reserve=2) == keys[:2]
    assert fit(keys, 10.0, 5.0, reserve=2) == []


def test_results_append_resume_and_refuse_another_setup(tmp_path):
    path = tmp_path / "r.jsonl"
    r = Results(path, {"model_path": "a"}).load()
    r.append(cell(1, 0, 5.0))
    r.append(cell(1, 3, 7.0))
    with open(path, "a") as f:
        f.write('{"kind": "cell", "lev')  # a crash mid-line: measured again
    again = Results(path, {"model_path": "a"}).load()
    assert again.resumed == 2 and again.has(Key("cell", 1, 3)) and not again.has(Key("cell", 2, 0))
    with pytest.raises(UserError, match="differs in model_path"):
        Results(path, {"model_path": "b"}).load()


def test_verdicts_crossover_and_table_from_measured_cells():
    cells = [
        cell(1, 0, 10.0),
        cell(1, 1, 12.0),
        cell(1, 3, 13.0),
        cell(4, 0, 30.0),
        cell(4, 1, 29.0),
        cell(4, 3, 20.0),
    ]
    v = live_report.verdicts(cells)
    assert v[1] == (True, "c=1: 3 steps pays 1.30x (13.00 vs 10.00 tok/s without drafting).")
    assert v[4][0] is False and v[4][1].startswith("c=4: do not draft")
    assert live_report.crossover(v) == (
        "crossover: drafting pays up to 1 stream(s); from 4 do not draft"
    )
    table, picks = live_report.adaptive_table(cells)
    assert table == {"1": [1, 3], "4": [0]}  # 1.30x >= 1.15: no floor at one stream
    sentence, text = live_report.recommended_fixed(cells, None)
    assert "3-step chain" in sentence and "speculative-num-steps = 3" in text
    lines = live_report.table_lines(cells, [0, 1, 3])
    assert "13.00 2.00 100*" in lines[3]


def test_a_draft_never_accepted_never_pays_whatever_the_noise():
    never = [cell(1, 0, 10.0), cell(1, 1, 11.2, accept=1.0), cell(1, 3, 9.0, accept=1.0)]
    for c in never:
        c["profile"]["cycles"] = 7
    assert live_report.best(live_report.grid(never)[1]) == 0  # 1.12x was the host's noise
    v = live_report.verdicts(never)
    assert v[1] == (False, "c=1: do not draft (no draft token was accepted).")
    assert live_report.adaptive_table(never)[0] == {"1": [0]}
    never[1]["profile"]["accept_len"] = 1.4  # one accepted: measured tok/s decides again
    assert live_report.best(live_report.grid(never)[1]) == 1


def test_schedule_file_is_what_the_controller_reads(tmp_path):
    s = live.Schedule(tmp_path / "schedule.json")
    s.write(pin=3)
    rank0 = schedule_control.Controller(str(s.path), rank_fn=lambda: 0)  # reads requests
    rank0.on_idle()  # written while idle: in force from the next verify
    first = rank0.on_verify()
    assert first.pin == 3
    s.write(table="/x/t.json", initial_steps=2)
    rank0.on_idle()
    second = rank0.on_verify()
    assert second.table == "/x/t.json" and second.seq == first.seq + 1


def tree_log(tmp_path):
    cycles = [Resolved("decode", 1, 16, {"cycle": 30.0, "draft": 3.0}, [3], 0, 2)] * 12
    line = window.log_line(window.summarize(cycles, 0, "cuda"))
    args = {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 16,
        "speculative_draft_model_path": "/d",
    }
    path = tmp_path / "eagle3-2step.log"
    path.write_text(f"[t] server_args={args}\n[t] {line}\n")
    return path


def test_offline_tune_on_a_tree_log_says_why_and_ranks_it_with_grid(tmp_path):
    log = tree_log(tmp_path)
    cmd = [sys.executable, "-m", "sgl_eagle_ext.tune", str(log), "--baseline-tps", "80"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "a tree (topk 4, 16 draft tokens; 12 decode cycles)" in p.stderr
    assert "no EAGLE3_PROFILE decode windows" not in p.stderr and "--grid" in p.stderr
    p = subprocess.run([*cmd, "--grid"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if "measured (eagle3-2step.log)" in ln)
    assert row.split()[:3] == ["2", "4", "16"]
