"""Adaptive speculation without a server: the config file by SGLang's own loader (the
oracle: 0.5.23 installed, 0.5.13.post1 from its pristine wheel), the release table
against every release's source, the settings that turn adaptive off, the preset and
its gate in the launcher, the profiler's (batch size, steps) windows, the report's
switch lines, and `tune` writing a table SGLang accepts."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases, wheels
from sgl_eagle_ext.launcher.preflight import adaptive
from sgl_eagle_ext.profiling import adaptive_log, record
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.config import Config
from sgl_eagle_ext.profiling.recorder.cycles import Resolved
from sgl_eagle_ext.profiling.recorder.profiler import Profiler

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "launch" / "adaptive" / "kimi-k2.5-sm120.json"
R0523, R0513 = releases.BY_VERSION["0.5.23"], releases.BY_VERSION["0.5.13.post1"]

# Files SGLang accepts or refuses; "update_interval": 0 and a string knob load but fail
# while serving, which the oracle below counts as refused.
CORPUS = {
    "good": {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}},
    "zero-step": {"1": {"candidate_steps": [0, 1, 3]}},
    "leading-zero-key": {"01": {"candidate_steps": [2]}},
    "duplicates-unsorted": {"1": {"candidate_steps": [3, 1, 3]}},
    "bool-step": {"1": {"candidate_steps": [True, 3]}},
    "knobs": {"ema_alpha": 0.5, "update_interval": 3, "1": {"candidate_steps": [1, 2]}},
    "comment-key": {"_about": "x", "1": {"candidate_steps": [1]}},
    "negative-key-ignored": {"-1": {"candidate_steps": [1]}, "2": {"candidate_steps": [1]}},
    "alpha-out-of-range": {"ema_alpha": 2.0, "1": {"candidate_steps": [1]}},
    "empty": {},
    "no-int-key": {"one": {"candidate_steps": [1]}},
    "float-key-only": {"1.5": {"candidate_steps": [1]}},
    "negative-step": {"1": {"candidate_steps": [1, -1]}},
    "float-step": {"1": {"candidate_steps": [1.0, 3]}},
    "empty-steps": {"1": {"candidate_steps": []}},
    "steps-string": {"1": {"candidate_steps": "1,3"}},
    "no-steps": {"1": {"up_hysteresis": 0.1}},
    "bucket-not-object": {"1": 5},
    "top-list": [{"1": {"candidate_steps": [1]}}],
    "interval-zero": {"update_interval": 0, "1": {"candidate_steps": [1, 3]}},
    "knob-string": {"1": {"candidate_steps": [1, 3], "down_hysteresis": "low"}},
}


def write(tmp_path, name, data) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def sglang_refuses(path: Path, module) -> bool:
    """SGLang's own verdict: its loader, then a policy fed 40 verify results."""
    try:
        _, buckets = module._load_adaptive_config(str(path))
        if not hasattr(module, "AdaptiveSpeculativeParams"):
            return False
        steps = sorted({s for e in buckets.values() for s in e["candidate_steps"]})
        params = module.AdaptiveSpeculativeParams(steps[len(steps) // 2], str(path))
        for _ in range(40):
            params.on_verify_complete([0], 1)
    except Exception:
        return True
    return False


@pytest.mark.harness  # the harness SGLang
def test_config_rules_match_sglang_0523(tmp_path):
    from sglang.srt.speculative import adaptive_spec_params as sglang

    cases = {**CORPUS, "not-json": "{1: [1]}"}
    for name, data in cases.items():
        path = write(tmp_path, name, data)
        buckets, found = adaptive.load(path, R0523)
        assert (buckets is None) == sglang_refuses(path, sglang), (name, found)
        if buckets is not None:
            _, theirs = sglang._load_adaptive_config(str(path))
            assert buckets == {k: sorted(set(v["candidate_steps"])) for k, v in theirs.items()}, (
                name
            )
        else:  # every refusal names the file and says how to fix it
            err = next(f for f in found if f.severity == "error")
            assert err.file == str(path) and err.fix, name


@pytest.mark.harness  # release wheels (network or cache)
def test_config_rules_match_sglang_0513_pristine(tmp_path):
    src = wheels.source("0.5.13.post1") / "srt" / "speculative" / "adaptive_spec_params.py"
    spec = importlib.util.spec_from_file_location("sglang_0513_adaptive", src)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    for name, data in CORPUS.items():
        if name in ("interval-zero", "knob-string", "alpha-out-of-range"):
            continue  # run-time behaviour: checked on 0.5.23 above
        path = write(tmp_path, name, data)
        buckets, _ = adaptive.load(path, R0513)
        try:
            old._load_adaptive_config(str(path))
            refused = False
        except Exception:
            refused = True
        assert (buckets is None) == refused, name
    _, found = adaptive.load(write(tmp_path, "z", CORPUS["zero-step"]), R0513)
    assert "0 steps need SGLang 0.5.16" in found[0].fix


@pytest.mark.harness  # the harness SGLang
def test_shipped_table_loads_in_sglang():
    from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config

    _, theirs = _load_adaptive_config(str(SHIPPED))
    ours, found = adaptive.load(SHIPPED, R0523)
    assert ours == {k: v["candidate_steps"] for k, v in theirs.items()}
    assert not [f for f in found if f.severity == "error"]
    assert 0 in ours[1] and max(ours[1]) > 1  # drafts alone, can stop drafting
    assert ours[max(ours)] == [0]  # no drafting under load


# SGLang's names (read in adaptive_unsupported_reason) for the flags in the table.
SOURCE_NAMES = {
    "speculative-eagle-topk": "speculative_eagle_topk",
    "enable-multi-layer-eagle": "enable_multi_layer_eagle",
    "enable-two-batch-overlap": "enable_two_batch_overlap",
    "enable-pdmux": "enable_pdmux",
    "enable-dp-attention": "enable_dp_attention",
    "attn-dp-size": "attn_dp_enabled_of",
}


@pytest.mark.harness  # release wheels (network or cache)
@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_release_table_matches_source(release):
    src = wheels.source(release.version) / "srt" / "speculative" / "adaptive_spec_params.py"
    if release.adaptive is None:
        assert not src.exists()
        return
    text = src.read_text()
    tree = ast.parse(text)
    fn = next(n for n in tree.body if getattr(n, "name", "") == "adaptive_unsupported_reason")
    body = ast.get_source_segment(text, fn)
    read = {name for flag, name in SOURCE_NAMES.items() if name in body}
    table = {SOURCE_NAMES[flag] for _, flag, _ in release.adaptive.turned_off_by}
    if "attn_dp_enabled_of" in read:  # 0.5.23: the deprecated flag maps onto attn-dp-size
        read.add("enable_dp_attention")
    assert read == table
    loader = "s >= 0" if release.adaptive.min_step == 0 else "s > 0"
    assert loader in text


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--speculative-eagle-topk", "4"], "--speculative-eagle-topk"),
        (["--enable-dp-attention"], "--enable-dp-attention"),
        (["--attn-dp-size", "2"], "--attn-dp-size"),
        (["--enable-two-batch-overlap"], "--enable-two-batch-overlap"),
        (["--enable-pdmux"], "--enable-pdmux"),
        (["--enable-multi-layer-eagle"], "--enable-multi-layer-eagle"),
        (["--speculative-algorithm", "NGRAM"], "--speculative-algorithm"),
    ],
)
def test_settings_that_turn_adaptive_off(extra, flag):
    args = ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1"]
    args += ["--speculative-adaptive", "--speculative-adaptive-config", str(SHIPPED)]
    args += ["--speculative-num-steps", "3"]
    assert not [f for f in adaptive.check(args, R0523) if f.severity == "error"]
    found = [f for f in adaptive.check(args + extra, R0523) if f.id == "adaptive.off"]
    assert len(found) == 1 and found[0].field == flag and "static speculation" in found[0].message


def test_starting_steps_must_be_a_candidate():
    args = ["--speculative-adaptive", "--speculative-adaptive-config", str(SHIPPED)]
    found = adaptive.check([*args, "--speculative-num-steps", "4"], R0523)
    assert [f.id for f in found] == ["adaptive.initial-steps"]
    assert adaptive.check(["--speculative-num-steps", "4"], R0523) == []  # not adaptive


def run_launch(*args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sgl_eagle_ext.launch", "--dry-run", "--model-path", "/m"]
    cmd += ["--draft-model-path", "/d", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_dry_run_shows_adaptive_flags_and_file():
    p = run_launch("--preset", "eagle3-adaptive", "--sglang-version", "0.5.23")
    assert p.returncode == 0, p.stderr
    cmd = p.stdout.splitlines()[-1].split()
    assert "--speculative-adaptive" in cmd
    config = Path(cmd[cmd.index("--speculative-adaptive-config") + 1])
    assert config.is_absolute() and config.samefile(SHIPPED)
    assert cmd[cmd.index("--speculative-eagle-topk") + 1] == "1"


def test_release_without_adaptive_is_refused_in_one_line():
    p = run_launch("--preset", "eagle3-adaptive", "--sglang-version", "0.5.10.post1")
    assert p.returncode == 2 and p.stdout == ""
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "0.5.10.post1 has no --speculative-adaptive" in errors[0]
    assert "Traceback" not in p.stderr


def test_release_without_zero_steps_refuses_the_table():
    p = run_launch("--preset", "eagle3-adaptive", "--sglang-version", "0.5.13.post1")
    assert p.returncode == 2 and "1.candidate_steps" in p.stderr and "0.5.16" in p.stderr


def test_adaptive_config_flag(tmp_path):
    own = write(tmp_path, "own", {"1": {"candidate_steps": [1, 2]}, "4": {"candidate_steps": [0]}})
    p = run_launch("--preset", "eagle3-adaptive", "--adaptive-config", str(own))
    assert p.returncode == 0, p.stderr
    cmd = p.stdout.splitlines()[-1].split()
    assert cmd[cmd.index("--speculative-adaptive-config") + 1] == str(own.resolve())
    # 3 is no candidate here: SGLang would refuse; the launcher takes SGLang's own pick
    assert cmd[cmd.index("--speculative-num-steps") + 1] == "1"
    bad = write(tmp_path, "bad", {"1": {"candidate_steps": [1, -2]}})
    p = run_launch("--preset", "eagle3-adaptive", "--adaptive-config", str(bad))
    assert p.returncode == 2 and f"{bad}" in p.stderr and "1.candidate_steps" in p.stderr
    p = run_launch("--preset", "eagle3-3step", "--adaptive-config", str(own))
    assert p.returncode == 2 and "not adaptive" in p.stderr


def test_windows_are_keyed_by_batch_size_and_steps(caplog):
    prof = Profiler(Config(True, None, 5.0, 0, None, False), clock=type("C", (), {"kind": "host"}))
    prof.rank = 0

    def cyc(bs, steps, ms, acc):
        return Resolved("decode", bs, steps + 1, {"cycle": ms, "draft": steps * 1.0}, acc, 0, steps)

    prof.window = [cyc(1, 3, 30.0, [3]), cyc(1, 0, 20.0, [1]), cyc(1, 3, 32.0, [4])]
    prof.window += [cyc(2, 0, 25.0, [1, 1]), Resolved("prefill", 1, 4, {"cycle": 50.0}, [], 0, 3)]
    with caplog.at_level(logging.INFO, logger="sgl_eagle_ext.profile"):
        prof.emit()
    counts = record.Counts()
    recs = list(record.iter_records((r.getMessage() for r in caplog.records), counts))
    assert counts.skipped == 0
    keys = sorted((tuple(r.bs), tuple(r.steps), r.cycles) for r in recs)
    assert keys == [((1,), (0,), 1), ((1,), (3,), 2), ((2,), (0,), 1)]
    zero = next(r for r in recs if r.steps == {0: 1} and r.bs == {1: 1})
    assert zero.phases["draft"].mean == 0.0 and zero.accept_hist == {1: 1}
    assert sum(r.prefill_n for r in recs) == 1


# Lines as SGLang 0.5.23 printed them on the CPU harness (never-accepted draft).
SWITCH_LOG = """\
[2026-12-01 10:19:27] AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[0, 1, 2, 3, 5]
[2026-12-01 10:20:06] Adaptive spec params updated: steps 3 -> 0 (ema_accept_len=0.07)
[2026-12-01 10:20:06] Switch adaptive runtime state: steps 3 -> 0, draft_tokens 4 -> 1
[2026-12-01 10:20:10] Adaptive spec params updated: steps 0 -> 1 (ema_accept_len=0.07)
[2026-12-01 10:20:10] Switch adaptive runtime state: steps 0 -> 1, draft_tokens 1 -> 2
[2026-12-01 10:20:43] Switch adaptive runtime state: steps 1 -> 3, draft_tokens 2 -> 4
[2026-12-01 10:20:44] EAGLE3_PROFILE v=1 rank=0 cycles=2 bs=2:2 draft_tokens=1:2 steps=0:2 cycle_ms=850.47/850.47/867.65 draft_ms=0.00/0.00/0.00 verify_fwd_ms=739.01/739.01/760.96 accept_ms=6.71/6.71/7.85 draft_extend_ms=91.50/91.50/102.80 other_ms=13.26/13.26/18.64 share=draft:0.0,verify_fwd:86.9,accept:0.8,draft_extend:10.8,other:1.6 accept_len=1.00 accept_hist=1:4 tok_s=2.35 prefill=0/0.00 syncs=0 dropped=0 clock=host
[2026-12-01 10:20:44] EAGLE3_PROFILE v=1 rank=0 cycles=1 bs=2:1 draft_tokens=2:1 steps=1:1 cycle_ms=868.48/868.48/868.48 draft_ms=9.72/9.72/9.72 verify_fwd_ms=777.53/777.53/777.53 accept_ms=4.95/4.95/4.95 draft_extend_ms=64.31/64.31/64.31 other_ms=11.97/11.97/11.97 share=draft:1.1,verify_fwd:89.5,accept:0.6,draft_extend:7.4,other:1.4 accept_len=1.00 accept_hist=1:2 tok_s=2.30 prefill=0/0.00 syncs=0 dropped=0 clock=host
[2026-12-01 10:21:00] speculative_adaptive disabled: speculative_eagle_topk=4 (only topk=1 is supported). Falling back to static speculative params.
"""


def test_report_shows_switches_and_steps(tmp_path):
    log = tmp_path / "adaptive.log"
    log.write_text(SWITCH_LOG)
    read = adaptive_log.read(SWITCH_LOG.splitlines())
    assert [(s.old, s.new, s.reason) for s in read.switches] == [
        (3, 0, "accept length"),
        (0, 1, "probe"),
        (1, 3, "batch size"),
    ]
    assert read.switches[0].ema_accept_len == 0.07 and read.switches[0].time.endswith("10:20:06")
    assert read.disabled == ["speculative_eagle_topk=4 (only topk=1 is supported)"]
    cmd = [sys.executable, "-m", "sgl_eagle_ext.report", str(log), "--baseline-ms-per-token"]
    p = subprocess.run([*cmd, "800", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    (row,) = out["rows"]
    assert [(s["steps"], s["no_draft"], s["cycles"]) for s in row["by_steps"]] == [
        (0, True, 2),
        (1, False, 1),
    ]
    assert len(out["adaptive"]["switches"]) == 3
    p = subprocess.run([*cmd, "800"], capture_output=True, text=True, timeout=60)
    assert "steps 3 -> 0 (accept-length EMA 0.07" in p.stdout
    assert "turned adaptive speculation OFF" in p.stdout and "0 (no draft)" in p.stdout


def profile_line(bs, steps, cycle_ms, hist) -> str:
    cycles = [
        Resolved("decode", bs, steps + 1, {"cycle": cycle_ms, "draft": steps * 0.5}, h, 0, steps)
        for h in hist
    ]
    return "[2026-12-01 10:00:00] " + window.log_line(window.summarize(cycles, 0, "cuda"))


@pytest.mark.harness  # the harness SGLang
def test_tune_writes_a_table_sglang_accepts(tmp_path):
    # A good draft (80% per position): 3 steps pay alone (cycle 30 vs 12 ms/token);
    # at 16 streams the cycle is 3x a token's time: drafting does not pay.
    chain = [4, 4, 3, 2, 4, 1, 4, 3, 4, 4]  # tokens per request per cycle at 3 steps
    lines = [profile_line(1, 3, 30.0, [[t] for t in chain] * 4)]
    lines += [profile_line(1, 1, 18.0, [[2], [2], [1], [2], [2]] * 4)]
    lines += [profile_line(16, 1, 40.0, [[2] * 16, [1] * 16] * 5)]
    lines += [profile_line(16, 0, 26.0, [[1] * 16] * 5)]
    spec = tmp_path / "spec.log"
    spec.write_text("\n".join(lines) + "\n")
    base = tmp_path / "baseline.log"
    base.write_text(
        "[t] Decode batch, #running-req: 1, #token: 9, gen throughput (token/s): 83.33, #q\n"
        "[t] Decode batch, #running-req: 16, #token: 9, gen throughput (token/s): 640.00, #q\n"
    )
    out = tmp_path / "tuned.json"
    cmd = [sys.executable, "-m", "sgl_eagle_ext.tune", str(spec), "--baseline-log", str(base)]
    p = subprocess.run(
        [*cmd, "--out", str(out), "--grid"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config

    _, buckets = _load_adaptive_config(str(out))
    assert buckets[16]["candidate_steps"] == [0]
    assert max(buckets[1]["candidate_steps"]) >= 3
    assert "break" not in p.stderr and "tau*" in p.stdout and "fixed settings" in p.stdout
    j = json.loads(
        subprocess.run([*cmd, "--json", "--grid"], capture_output=True, text=True).stdout
    )
    # pooled over batch sizes: draft 1 accepted for 36/40 + 16/20 + 80/160 requests
    assert j["position_acceptance"][0] == pytest.approx(132 / 220)
    # draft 2 only measured by the 3-step chain: 8 of the 9 that reached it
    assert j["position_acceptance"][1] == pytest.approx(32 / 36)
    assert all(g["draft_tokens"] == g["steps"] + 1 for g in j["grid"])  # chains only here
    from sgl_eagle_ext.tools.tune import grid

    assert grid.valid(2, 4, 16) and not grid.valid(2, 4, 22)  # eagle3-2step: 21 at most
    assert grid.valid(3, 1, 4) and not grid.valid(3, 1, 5)
