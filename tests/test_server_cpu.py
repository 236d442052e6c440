"""Real SGLang servers on the CPU harness, started through our launcher.

Each test starts the real HTTP server, scheduler, EAGLE worker and tokenizer
with the project's tiny model pair (see sgl_eagle_ext/cpu/).
"""

from __future__ import annotations

import os
import random
import re
import signal

import psutil
import pytest
from conftest import SPEC_SERVER_ARGS, TARGET_DRAFT, Launcher, readable

from sgl_eagle_ext.common import http, server_process
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS
from sgl_eagle_ext.profiling.report import record_from_line

pytestmark = pytest.mark.server
MAX_NEW_TOKENS = 16
# The speculative servers these tests start run the main path, EAGLE3_PROFILE=1 through
# the launcher, with a window longer than the tests' traffic: only the idle flush (the
# partial window written when traffic stops) can write the windows the log must hold.
PROFILE_ENV = {"EAGLE3_PROFILE": "1", "EAGLE3_PROFILE_CYCLES": "1000"}


def greedy(launcher: Launcher) -> list[dict]:
    # four prompts: a batch, and each request's designed acceptance; the CPU harness's
    # cycle grows with the batch (Triton interpreter), so eight cost twice as much
    return http.generate(launcher.base_url, list(DEMO_PROMPTS[:4]), MAX_NEW_TOKENS)


def mean_accept(outs: list[dict]) -> float:
    values = [http.accept_length(o["meta_info"]) for o in outs]
    assert None not in values, outs
    return sum(values) / len(values)


def tokens(outs: list[dict]) -> list[list[int]]:
    return [o["output_ids"] for o in outs]


def assert_clean_profiled_log(log: str) -> None:
    """Profiling installed once per scheduler although the scheduler entry and SGLang's
    plugin entry point (0.5.13+) both ask; no traceback; windows with decode cycles."""
    assert log.count("EAGLE3_PROFILE: on (SGLang") == 1, "installed more than once"
    assert "Traceback" not in log
    assert "Failed to execute general plugin" not in log
    assert "DuplicateTimeseries" not in log
    windows = [record_from_line(ln) for ln in log.splitlines() if "EAGLE3_PROFILE v=" in ln]
    assert any(w.cycles for w in windows), "no profile window with decode cycles"


def stop_cleanly(launcher: Launcher) -> None:
    assert launcher.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    assert launcher.orphans() == [], "processes left behind"
    assert launcher.descendants, "the launcher never had a server process"


def assert_ready_after_warmup(launcher: Launcher) -> None:
    """READY only after SGLang's own warm-up generation succeeded."""
    launcher.wait_for("READY in")
    # SGLang logs it after the warm-up; the launcher copies the log from a pipe: wait
    launcher.wait_until(lambda: "fired up and ready to roll" in launcher.log_text())
    assert http.request(f"{launcher.base_url}/health_generate").status == 200


def manifest(tiny_models) -> dict:
    import json

    return json.loads((tiny_models["target"].parent / "manifest.json").read_text())


@pytest.fixture(scope="module")
def baseline_run(tiny_models, tmp_path_factory) -> tuple[list[list[int]], str]:
    """The baseline's greedy tokens, and the launcher's output. Its preset asks for
    CUDA_DEVICE_MAX_CONNECTIONS=1, which SGLang forces to 8 in every rank
    (test_a_rank_whose_setting_differs_is_reported reads what the launcher said of it);
    an NCCL setting, so the tokens are the baseline's."""
    where = tmp_path_factory.mktemp("baseline")
    preset = where / "connections.toml"
    preset.write_text('extends = "baseline"\n[env]\nCUDA_DEVICE_MAX_CONNECTIONS = "1"\n')
    launcher = Launcher(
        ["--preset-file", str(preset), "--cpu", "--model-path", str(tiny_models["target"])],
        where,
    )
    try:
        assert_ready_after_warmup(launcher)
        # the scheduler process reported the preset's NCCL block, as the launcher shows
        assert re.search(r"^NCCL_PROTO\s+LL\s+LL$", launcher.output, re.M)
        outs = greedy(launcher)
        assert all(http.accept_length(o["meta_info"]) is None for o in outs)
        assert all(len(o["output_ids"]) == MAX_NEW_TOKENS for o in outs)
        # SGLang on the harness reproduces transformers' fp32 greedy decoding
        expected = [g["new_ids"][:MAX_NEW_TOKENS] for g in manifest(tiny_models)["greedy"]]
        assert tokens(outs) == expected[: len(outs)]
        stop_cleanly(launcher)
        return tokens(outs), launcher.output
    finally:
        launcher.cleanup()


@pytest.fixture(scope="module")
def baseline_tokens(baseline_run) -> list[list[int]]:
    return baseline_run[0]


# SGLang's per-request accept length = completion tokens / verify cycles, so the
# prefill token counts too: a draft never accepted gives 16/15 = 1.067.
@pytest.mark.parametrize(
    "preset, setting, draft, low, high",
    [
        # the first users' context-length mismatch (tests/conftest.py short_draft) run
        # with --fix: the overlay gives the draft the target's length, which is the
        # designed draft-mostly again, so it serves losslessly as designed
        ("eagle3-2step", "2,4,16", "mostly-short", 2.0, 3.4),
        ("eagle3-3step", "3,1,4", "mostly", 2.0, 4.3),
        # (the never-accepted draft: tests/test_profile_server.py's server checks the
        # same, profiled, one server start fewer)
        ("eagle3-5step", "5,1,6", "partial", 1.2, 2.5),
    ],
)
def test_eagle3_is_lossless_and_accepts_as_designed(
    tiny_models, baseline_tokens, start_launcher, request, preset, setting, draft, low, high
):
    # the session's shared server is one of these: read it rather than start another
    shared = ("--preset", preset, "--cpu") == SPEC_SERVER_ARGS and f"draft-{draft}" == TARGET_DRAFT
    draft, short = draft.removesuffix("-short"), draft.endswith("-short")
    if shared:
        launcher = request.getfixturevalue("spec_server")
    else:
        path = request.getfixturevalue("short_draft") if short else tiny_models[f"draft-{draft}"]
        config = (path / "config.json").read_bytes() if short else None
        launcher = start_launcher(
            "--preset",
            preset,
            "--cpu",
            "--model-path",
            str(tiny_models["target"]),
            "--draft-model-path",
            str(path),
            *(["--fix"] if short else []),
            env=PROFILE_ENV,  # the shipped presets' main path, profiled
        )
    assert_ready_after_warmup(launcher)
    if short:  # the overlay is the launch's, the user's draft config is untouched
        assert "overlay" in launcher.output
        assert (path / "config.json").read_bytes() == config
    # the scheduler process reported the preset's NCCL block: every variable as asked
    assert "NCCL: all 1 rank(s) match the preset" in launcher.output
    spec_line = launcher.wait_for("spec check:")
    outs = greedy(launcher)
    assert tokens(outs) == baseline_tokens  # speculation never changes greedy output
    per_request = [round(http.accept_length(o["meta_info"]), 3) for o in outs]
    expected = manifest(tiny_models)["expected_accept_length"][f"draft-{draft}"][setting]
    assert per_request == expected[: len(outs)]  # the acceptance the pair was built for
    acc = mean_accept(outs)
    assert low <= acc <= high, (preset, draft, acc)
    reported = float(re.search(r"accept length ([\d.]+)", spec_line).group(1))
    assert low <= reported <= high, spec_line
    steps, topk, draft_tokens = setting.split(",")
    verified = "EAGLE_EXT_CHAIN_VERIFY: target verify on verify_shared_kv_fwd"
    if topk == "1":  # a chain verifies on SGLang's split-KV kernel (in_sglang/chain_verify.py)
        assert f"{verified} ({draft_tokens} token(s) per request)" in launcher.log_text()
    else:  # a tree stays on the extend kernel: its mask is not causal
        assert verified not in launcher.log_text()
    if not shared:  # the shared one (unprofiled) stops at the end of the session
        launcher.wait_until(lambda: "EAGLE3_PROFILE v=" in launcher.log_text())
        stop_cleanly(launcher)
        assert_clean_profiled_log(launcher.log_text())


def test_demo_shows_answers_benchmark_and_profile(start_launcher):
    """The README's first command: readable answers with the accept length they were
    built for, a single-stream figure and the report table of the demo's own run."""
    launcher = start_launcher("--demo")
    assert launcher.wait() == 0, launcher.output
    out = launcher.output
    answers = re.findall(r"^  =>(.*(?:\n     .*)*)$", out, re.M)
    assert len(answers) == len(DEMO_PROMPTS), out
    for prompt, text in zip(DEMO_PROMPTS, answers):
        assert f"> {prompt}" in out
        assert readable(text), (prompt, text)
    pairs = re.findall(r"accept length ([\d.]+) \(built for ([\d.]+)\)", out)
    assert len(pairs) == len(DEMO_PROMPTS), out
    assert all(seen == built for seen, built in pairs), pairs  # exactly as designed
    assert min(float(seen) for seen, _ in pairs) > 1.5, pairs
    assert "SGLang's average accept length" in out
    speed = re.search(r"single stream: ([\d.]+) tok/s", out)
    assert speed and float(speed.group(1)) > 0, out
    assert len(re.findall(r"^  run \d: 32 tokens in", out, re.M)) == 2, out
    # the report's own table, from the demo server's profile windows
    profile = out[out.index("=== 3/3 profile") :]
    assert re.search(r"^  verify_fwd\s+[\d.]+", profile, re.M), profile
    assert re.search(r"accept length [\d.]+ tokens/cycle -> [\d.]+ tok/s", profile), profile
    assert int(re.search(r"(\d+) profile windows", profile).group(1)) >= 3, profile
    # cycles in wall time: the scheduler's work between them is its own row, and the
    # profile's speed is set beside SGLang's own Decode-batch throughput
    host = re.search(r"^  host\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)%", profile, re.M)
    assert host and float(host.group(1)) > 0, profile
    agree = re.search(r"^  (agrees with SGLang's own .*|note: the profile's .*)$", profile, re.M)
    assert agree, profile
    print(f"demo: host {host.group(1)} ms ({host.group(2)}%); {agree.group(1)}")
    assert "Traceback" not in launcher.log_text()
    assert "Traceback" not in out
    assert launcher.orphans() == []


def test_watchdog_stops_a_hung_startup(tiny_models, start_launcher):
    launcher = start_launcher(
        "--preset",
        "baseline",
        "--cpu",
        "--stall-timeout",
        "20",
        "--model-path",
        str(tiny_models["target"]),
        env={"EAGLE_EXT_FAULT": "hang-scheduler"},
    )
    assert launcher.wait(timeout=300) == server_process.EXIT_WATCHDOG, launcher.output
    assert "watchdog: no server log progress" in launcher.output
    assert "stopping the server process tree" in launcher.output
    assert len(launcher.descendants) >= 2  # the server and its (hung) scheduler
    assert launcher.orphans() == []


def test_watchdog_names_a_stall_after_http_is_up(tiny_models, start_launcher):
    """Issue 24: the server's log lines for the launcher's own /health_generate polls are
    not progress, so a server whose warm-up hangs once HTTP is up (a hung rank) is
    stopped by the watchdog with that phase named, while the polls go on. The stall
    limit is above the quiet import before HTTP (31 s on a busy slow 2-core machine:
    that fired first at 30 s)."""
    launcher = start_launcher(
        "--preset",
        "baseline",
        "--cpu",
        "--stall-timeout",
        "60",
        "--model-path",
        str(tiny_models["target"]),
        env={"EAGLE_EXT_FAULT": "hang-warmup"},
    )
    assert launcher.wait(timeout=600) == server_process.EXIT_WATCHDOG, launcher.output
    out, log = launcher.output, launcher.log_text()
    assert "while HTTP up; warm-up generation" in out, out
    polls = re.search(r"/health_generate polled (\d+) times, (\d+) logged by the server", out)
    assert polls, out
    hung = log[log.index("EAGLE_EXT_FAULT: hang-warmup") :]
    # the polls went on after the hang (each logged by uvicorn), yet the watchdog fired
    assert hung.count("GET /health_generate") >= 5, hung[-2000:]
    assert int(polls[2]) >= hung.count("GET /health_generate")
    assert "stopping the server process tree" in out
    assert launcher.orphans() == []


# Every terminating signal, at a random moment once SGLang has forked: the server alone,
# then its scheduler and detokenizer (the counts of the launcher's descendants seen).
# Only INT and TERM were handled once: SIGHUP (a closed terminal) and SIGQUIT left
# the scheduler, detokenizer and resource tracker re-parented to init.
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_during_startup_stops_everything(tiny_models, start_launcher, sig):
    moment = random.randint(1, 3)  # descendants: the server, its scheduler, ...
    was = signal.getsignal(sig)
    signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    try:  # a suite run under `nohup` hands its children SIGHUP ignored: not this launcher
        launcher = start_launcher(
            "--preset",
            "eagle3-3step",
            "--cpu",
            "--no-preflight",  # the signal goes to a forked SGLang, not to a probe
            "--model-path",
            str(tiny_models["target"]),
            "--draft-model-path",
            str(tiny_models["draft-mostly"]),
        )
    finally:
        signal.signal(sig, was)
    launcher.wait_until(lambda: len(launcher.descendants) >= moment)
    name = signal.Signals(sig).name
    assert launcher.signal(sig) == 128 + sig, f"{name} after {moment}: {launcher.output}"
    assert f"{name}: stopping the server process tree" in launcher.output
    assert "READY" not in launcher.output
    assert launcher.orphans() == [], f"{name} after {moment} descendant(s)"
    # and nothing of the server's session, sampled or not (a fork between two samples)
    assert [p.pid for p in psutil.process_iter() if _sid(p.pid) in launcher.descendants] == []


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_server_that_fails_during_startup(tiny_models, start_launcher):
    # A context length beyond the model's makes SGLang itself refuse to start
    # (the preflight would catch it first: skipped here to reach the server).
    launcher = start_launcher(
        "--preset",
        "baseline",
        "--cpu",
        "--no-preflight",
        "--model-path",
        str(tiny_models["target"]),
        "--",
        "--context-length",
        "1000000",
    )
    assert launcher.wait(timeout=300) == server_process.EXIT_SERVER_FAILED, launcher.output
    assert "exited with code" in launcher.output
    assert launcher.orphans() == []


def test_preflight_stops_a_short_draft(tiny_models, short_draft, start_launcher):
    """The context-length mismatch of the first users' Kimi-K2.5 draft (shorter than the
    target) on the tiny pair, through the launcher: refused before any server starts
    (with --fix it serves: test_eagle3_is_lossless_and_accepts_as_designed)."""
    refused = start_launcher(
        "--preset",
        "eagle3-3step",
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(short_draft),
    )
    assert refused.wait(timeout=120) == 2, refused.output
    assert "context.draft-shorter" in refused.output and "--fix" in refused.output
    # no server was started (the preflight's only child is its SGLang probe), none is left
    assert not refused.log_file.exists() and refused.orphans() == []
    assert not any("in_sglang.serve" in c for c in refused.commands.values()), refused.commands


def test_a_rank_whose_setting_differs_is_reported(baseline_run):
    """SGLang forces CUDA_DEVICE_MAX_CONNECTIONS=8 in every rank: a preset asking for 1
    gets a warning before launch and a per-rank mismatch from the real scheduler (the
    baseline server of this module's fixture runs such a preset)."""
    out = baseline_run[1]
    assert "overwrites CUDA_DEVICE_MAX_CONNECTIONS=1: always set to 8" in out
    assert "warning: NCCL: rank 0 has CUDA_DEVICE_MAX_CONNECTIONS=8, the preset says 1" in out
    # issue 24: the rows the preset left empty but SGLang filled are explained, per the
    # release table, from what the real rank had (SGLang writes both whenever unset)
    assert re.search(r"^NCCL_CUMEM_ENABLE\s+-\s+0$", out, re.M), out
    for var in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"):
        assert f"NCCL: {var}: not in the preset; SGLang 0.5.23 sets it (0 when unset" in out
    assert "only 0 of" not in out and "TP rank(s) reported" not in out  # 1 of 1: no warning
