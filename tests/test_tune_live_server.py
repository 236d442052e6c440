"""tune --live on the CPU harness: one server start per run, every (concurrency, steps) cell,
the written table validated under SGLang's own controller, Ctrl-C and resume.

Real SGLang 0.5.23 with the tiny pair (cpu/tiny_models.py): the 'mostly' draft is
accepted nearly always, the 'never' draft never. Short requests (a few cycles per
cell): the figures are coarse, the rankings the drafts were designed for are not.
No wall-clock assertion anywhere.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
import sys
import time

import pytest

from sgl_eagle_ext.common import adaptive_config, releases
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS
from sgl_eagle_ext.tools.tune import live_report

pytestmark = pytest.mark.server
FAST = [
    "--cpu",
    "--max-tokens",
    "8",
    "--warmup-tokens",
    "2",
    "--request-cycles",
    "1",  # one round per cell: the tiny pair's acceptance is designed, not sampled
    "--max-rounds",
    "1",
    "--validation-rounds",
    "1",  # one adaptive/pinned pair per level: the speed ratio is printed, never asserted
    "--startup-timeout",
    "600",
]


def tune(tiny_models, draft: str, tmp_path, *extra: str) -> subprocess.Popen:
    prompts = tmp_path / "prompts.jsonl"  # the target's corpus: its designed acceptance
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in DEMO_PROMPTS))
    cmd = [
        sys.executable,
        "-m",
        "sgl_eagle_ext.tune",
        "--live",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models[f"draft-{draft}"]),
        "--prompts",
        str(prompts),
        "--results",
        str(tmp_path / "out" / "results.jsonl"),
        *FAST,
        *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def written_table(tmp_path) -> dict[int, list[int]]:
    """The adaptive config tune wrote, read by the config's own reader (SGLang's rules)."""
    buckets, problems = adaptive_config.load(
        tmp_path / "out" / "adaptive.json", releases.resolve(None)[0]
    )
    assert buckets is not None, problems
    return buckets


def top_step(row: dict[int, dict]) -> int:
    """The step count the table must reach at a level, from the cells measured: the
    fastest cell, unless it drafts and beats 0 steps by no more than the noise margin
    (live_report.MIN_GAIN; CI measured 1.97 vs 1.94 tok/s at c=2), then 0."""
    b = live_report.best(row)
    gain = live_report.tok_s(row[b]) / live_report.tok_s(row[0])
    return b if b == 0 or gain > live_report.MIN_GAIN else 0


def records(tmp_path) -> list[dict]:
    path = tmp_path / "out" / "results.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_every_cell_one_load_per_run_interrupt_and_resume(tiny_models, tmp_path):
    # one stream and a batch, no drafting and the 3-step chain: every kind of cell (the
    # pin, the batch size, the runtime state of the largest count) at the fewest cells; tests/test_tune_live.py decides on recorded cells of every count
    # (a never-accepted draft among them). Ctrl-C once level 1 is measured, then the same
    # command resumes: each run is one server start, and the kept cells are not measured
    # again.
    # the server started with a key (`-- --api-key`): the run sends it (it got 401 once
    # the model had loaded), prints it nowhere, and resumes under the same setup
    key = f"TUNEKEY{secrets.token_hex(6)}"
    args = ("--levels", "1,2", "--steps", "0,3", "--", "--api-key", key)
    p = tune(tiny_models, "mostly", tmp_path, *args)
    deadline = time.monotonic() + 1800
    while len(records(tmp_path)) < 2:  # level 1's cells are written: Ctrl-C in level 2
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(1)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 130, out[-3000:]
    assert "interrupted; the server is stopped" in out and "Traceback" not in out
    kept = {(r["level"], r["steps"]): r["ts"] for r in records(tmp_path)}
    assert set(kept) >= {(1, 0), (1, 3)}
    first_log = list((tmp_path / "out").glob("live-*.log"))
    assert len(first_log) == 1  # one server start

    # the rest, and a plain baseline server beside it (--baseline-arm: not part of the
    # resume key): the in-server 0-step cell against a real baseline at every level
    p = tune(tiny_models, "mostly", tmp_path, "--baseline-arm", *args)
    out, _ = p.communicate(timeout=3600)
    assert p.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    assert key not in out
    for f in (tmp_path / "out").rglob("*"):
        assert not f.is_file() or key.encode() not in f.read_bytes(), f
    print(out)  # the figures, for the log of the run
    assert f"resuming {tmp_path / 'out' / 'results.jsonl'}: {len(kept)} measurement(s) kept" in out
    logs = [x for x in (tmp_path / "out").glob("live-*.log") if x not in first_log]
    assert len(logs) == 1  # one server start for the rest
    log = logs[0].read_text()
    assert "Traceback" not in log and "EAGLE_EXT_SCHEDULE_FILE: on" in log
    assert "steps pinned at 3 in every bucket" in log

    recs = records(tmp_path)
    cells = [r for r in recs if r["kind"] == "cell"]
    assert sorted((r["level"], r["steps"]) for r in cells) == [
        (lv, s) for lv in (1, 2) for s in (0, 3)
    ]
    for r in cells:
        if (r["level"], r["steps"]) in kept:
            assert r["ts"] == kept[(r["level"], r["steps"])]  # not measured again
    for r in cells:  # each cell's windows ran at its pinned steps and batch size
        assert r["profile"]["cycles"] > 0, r
        mix = dict(r["profile"]["steps_mix"])  # at batch size c, by steps
        assert mix.pop(str(r["steps"])) == r["profile"]["cycles"]
        # the pin takes effect at the first verify of the round: one cycle before it
        assert sum(mix.values()) <= 1, r
        if r["steps"] == 0:
            assert r["profile"]["accept_len"] == 1.0
    one = live_report.grid(cells)[1]
    # Which cell is fastest is the host's timing (CI measured 2.48 tok/s at 0 steps and
    # 2.32 at 1 step at one stream, 2.43 vs 1.67 at two): the decision rule is tested on
    # recorded cells (tests/test_tune_live.py); here the written table must follow the
    # cells this run measured, whichever won.
    # drafts accepted (1.0 = none): 2.0 on this machine's build of the pair at 8-token
    # requests (2.33 on an earlier one), so the bound is "clearly accepting", not a design
    assert one[3]["profile"]["accept_len"] > 1.5

    cfg = written_table(tmp_path)
    assert "SGLang's loader builds buckets" in out
    assert max(cfg[1]) == top_step(one)
    vals = [r for r in recs if r["kind"] == "validation"]
    assert sorted(v["level"] for v in vals) == [1, 2]
    top = {lv: top_step(row) for lv, row in live_report.grid(cells).items()}
    for v in vals:  # SGLang's own controller on the written table, beside the best cell
        # What the table decides is which step counts SGLang's controller may choose: it
        # chose only among the level's candidates, and top_step's count is one. The
        # speed ratio to the best cell is measured and printed, never asserted: with both
        # sides at the same step count it is the host's noise (0.95x per CPU second and
        # 0.94x wall clock at c=2 on a busy 2-core machine, where the controller ran the
        # best cell's 2 steps in 100% of its cycles).
        # SGLang routes a batch size to the bucket with the largest key at or below it
        # (AdaptiveSpeculativeParams._find_closest_bs; the first bucket below that)
        key = max((k for k in cfg if k <= v["level"]), default=min(cfg))
        ran = {int(k) for k, n in v["profile"]["steps_mix"].items() if n}
        assert ran and ran <= set(cfg[key]), (v["level"], v["profile"]["steps_mix"], cfg)
        assert top[v["level"]] in cfg[key], (v["level"], top, cfg)
        assert live_report.validation_ratio(v) is not None
        assert live_report.validation_cpu_ratio(v) is not None
    assert "SGLang's controller on" in log and "AdaptiveSpeculativeParams initialized" in log
    assert "c=1: " in out and "crossover:" in out and "recommended fixed preset" in out
    ratios = re.findall(r"baseline c=(\d+): .*in-server steps 0 / baseline server = [\d.]+x", out)
    assert sorted(ratios) == ["1", "2"], out[-3000:]  # measured, printed, never asserted
    assert (tmp_path / "out" / "report.html").read_text().count("<h2>") >= 5
