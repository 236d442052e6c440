"""Real SGLang servers on the CPU harness, started through our launcher.

Each test starts the real HTTP server, scheduler, EAGLE worker and tokenizer
with the project's tiny model pair (see sgl_eagle_ext/cpu/).
"""

from __future__ import annotations

import re
import signal

import pytest
from conftest import SPEC_SERVER_ARGS, TARGET_DRAFT, Launcher, readable

from sgl_eagle_ext.common import http, server_process
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS

pytestmark = pytest.mark.server
MAX_NEW_TOKENS = 16


def greedy(launcher: Launcher) -> list[dict]:
    return http.generate(launcher.base_url, list(DEMO_PROMPTS), MAX_NEW_TOKENS)


def mean_accept(outs: list[dict]) -> float:
    values = [http.accept_length(o["meta_info"]) for o in outs]
    assert None not in values, outs
    return sum(values) / len(values)


def tokens(outs: list[dict]) -> list[list[int]]:
    return [o["output_ids"] for o in outs]


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
def baseline_tokens(tiny_models, tmp_path_factory):
    launcher = Launcher(
        ["--preset", "baseline", "--cpu", "--model-path", str(tiny_models["target"])],
        tmp_path_factory.mktemp("baseline"),
    )
    try:
        assert_ready_after_warmup(launcher)
        # the scheduler process reported the preset's NCCL block, as the launcher shows
        assert "NCCL: all 1 rank(s) match the preset" in launcher.output
        assert re.search(r"^NCCL_PROTO\s+LL\s+LL$", launcher.output, re.M)
        outs = greedy(launcher)
        assert all(http.accept_length(o["meta_info"]) is None for o in outs)
        assert all(len(o["output_ids"]) == MAX_NEW_TOKENS for o in outs)
        # SGLang on the harness reproduces transformers' fp32 greedy decoding
        expected = [g["new_ids"][:MAX_NEW_TOKENS] for g in manifest(tiny_models)["greedy"]]
        assert tokens(outs) == expected[: len(outs)]
        stop_cleanly(launcher)
        return tokens(outs)
    finally:
        launcher.cleanup()


# SGLang's per-request accept length = completion tokens / verify cycles, so the
# prefill token counts too: a draft never accepted gives 16/15 = 1.067.
@pytest.mark.parametrize(
    "preset, setting, draft, low, high",
    [
        ("eagle3-2step", "2,4,16", "mostly", 2.0, 3.4),
        ("eagle3-3step", "3,1,4", "mostly", 2.0, 4.3),
        ("eagle3-3step", "3,1,4", "never", 1.0, 1.1),
        ("eagle3-5step", "5,1,6", "partial", 1.2, 2.5),
    ],
)
def test_eagle3_is_lossless_and_accepts_as_designed(
    tiny_models, baseline_tokens, start_launcher, request, preset, setting, draft, low, high
):
    # the session's shared server is one of these: read it rather than start another
    shared = ("--preset", preset, "--cpu") == SPEC_SERVER_ARGS and f"draft-{draft}" == TARGET_DRAFT
    if shared:
        launcher = request.getfixturevalue("spec_server")
    else:
        launcher = start_launcher(
            "--preset",
            preset,
            "--cpu",
            "--model-path",
            str(tiny_models["target"]),
            "--draft-model-path",
            str(tiny_models[f"draft-{draft}"]),
        )
    assert_ready_after_warmup(launcher)
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
    if not shared:  # the shared one stops at the end of the session
        stop_cleanly(launcher)


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
    stopped by the watchdog with that phase named, while the polls go on."""
    launcher = start_launcher(
        "--preset",
        "baseline",
        "--cpu",
        "--stall-timeout",
        "30",
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


def test_ctrl_c_during_startup_stops_everything(tiny_models, start_launcher):
    launcher = start_launcher(
        "--preset",
        "eagle3-3step",
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models["draft-mostly"]),
    )
    launcher.wait_until(lambda: len(launcher.descendants) >= 3)  # server + its children
    assert launcher.signal(signal.SIGINT) == 128 + signal.SIGINT
    assert "SIGINT: stopping the server process tree" in launcher.output
    assert "READY" not in launcher.output
    assert launcher.orphans() == []


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


def test_preflight_stops_a_short_draft_and_fix_launches_it(
    tiny_models, short_draft, start_launcher
):
    """The context-length mismatch of the first users' Kimi-K2.5 draft (shorter than the
    target) on the tiny pair, through the launcher."""
    import hashlib

    short = short_draft
    digest = hashlib.sha256((short / "config.json").read_bytes()).hexdigest()
    args = (
        "--preset",
        "eagle3-3step",
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(short),
    )

    refused = start_launcher(*args)
    assert refused.wait(timeout=120) == 2, refused.output
    assert "context.draft-shorter" in refused.output and "--fix" in refused.output
    # no server was started (the preflight's only child is its SGLang probe), none is left
    assert not refused.log_file.exists() and refused.orphans() == []
    assert not any("in_sglang.serve" in c for c in refused.commands.values()), refused.commands

    fixed = start_launcher(*args, "--fix")
    assert_ready_after_warmup(fixed)
    assert "overlay" in fixed.output
    stop_cleanly(fixed)
    assert hashlib.sha256((short / "config.json").read_bytes()).hexdigest() == digest


def test_a_rank_whose_setting_differs_is_reported(tiny_models, start_launcher, tmp_path):
    """SGLang forces CUDA_DEVICE_MAX_CONNECTIONS=8 in every rank: a preset asking for 1
    gets a warning before launch and a per-rank mismatch from the real scheduler."""
    preset = tmp_path / "connections.toml"
    preset.write_text('extends = "baseline"\n[env]\nCUDA_DEVICE_MAX_CONNECTIONS = "1"\n')
    launcher = start_launcher(
        "--preset-file", str(preset), "--cpu", "--model-path", str(tiny_models["target"])
    )
    launcher.wait_for("READY in")
    out = launcher.output
    assert "overwrites CUDA_DEVICE_MAX_CONNECTIONS=1: always set to 8" in out
    assert "warning: NCCL: rank 0 has CUDA_DEVICE_MAX_CONNECTIONS=8, the preset says 1" in out
    # issue 24: the rows the preset left empty but SGLang filled are explained, per the
    # release table, from what the real rank had (SGLang writes both whenever unset)
    assert re.search(r"^NCCL_CUMEM_ENABLE\s+-\s+0$", out, re.M), out
    for var in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"):
        assert f"NCCL: {var}: not in the preset; SGLang 0.5.23 sets it (0 when unset" in out
    assert "only 0 of" not in out and "TP rank(s) reported" not in out  # 1 of 1: no warning
    stop_cleanly(launcher)
