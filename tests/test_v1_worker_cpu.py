"""SGLang 0.5.10.post1, the last release with the v1 `EAGLEWorker`, on the CPU harness.

The launcher runs from `.venv-0.5.10.post1` (built by
`python3 -m sgl_eagle_ext.cpu.install --release 0.5.10.post1`), so the real
HTTP server, scheduler and v1 EAGLE worker of that release serve the tiny model
pair. Checked: greedy output with EAGLE-3 (chain and tree) equals transformers'
fp32 greedy decoding (as the baseline server's does, tests/test_server_cpu.py);
per-request accept lengths are exactly those the tiny pair was built for (the same
as on 0.5.23's v2 worker); EAGLE3_PROFILE records agree with SGLang's own "Decode
batch" lines cycle by cycle.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import Launcher

from sgl_eagle_ext.common import http
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS
from sgl_eagle_ext.profiling.report import DECODE_BATCH, record_from_line

pytestmark = pytest.mark.server
RELEASE = "0.5.10.post1"
VENV = Path(__file__).resolve().parents[1] / f".venv-{RELEASE}"
MAX_NEW_TOKENS = 16
PROFILE_ENV = {
    "EAGLE3_PROFILE": "1",
    "EAGLE3_PROFILE_CYCLES": "1",
    "EAGLE3_PROFILE_SYNC_CHECK": "1",
}


@pytest.fixture(scope="module")
def v1_python() -> Path:
    """The 0.5.10.post1 venv's interpreter; missing or wrong is a failure, not a skip."""
    python = VENV / "bin" / "python"
    fix = f"build it with: python3 -m sgl_eagle_ext.cpu.install --release {RELEASE}"
    if not python.exists():
        pytest.fail(f"{VENV} does not exist; {fix}", pytrace=False)
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, sgl_eagle_ext; print(m.version('sglang'))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0 or probe.stdout.strip() != RELEASE:
        pytest.fail(
            f"{VENV} does not hold SGLang {RELEASE} and sgl_eagle_ext "
            f"({probe.stdout.strip() or probe.stderr.strip()[-300:]}); {fix}",
            pytrace=False,
        )
    return python


def manifest(tiny_models) -> dict:
    return json.loads((tiny_models["target"].parent / "manifest.json").read_text())


def ready(launcher: Launcher) -> None:
    """Wait for READY (after SGLang's warm-up, unless skipped)."""
    launcher.wait_for("READY in")
    # the server's line reaches the log file through the launcher's copy: wait for it
    launcher.wait_until(lambda: "fired up and ready to roll" in launcher.log_text())
    assert f"SGLang {RELEASE}" in launcher.output, launcher.output


def greedy(launcher: Launcher) -> list[dict]:
    # four prompts: a batch, and each request's designed acceptance; the CPU harness's
    # cycle grows with the batch (Triton interpreter), so eight cost twice as much
    return http.generate(launcher.base_url, list(DEMO_PROMPTS[:4]), MAX_NEW_TOKENS)


def stop_cleanly(launcher: Launcher) -> None:
    assert launcher.signal(signal.SIGTERM) == 128 + signal.SIGTERM
    assert launcher.orphans() == [], "processes left behind"


@pytest.fixture(scope="module")
def greedy_reference(tiny_models) -> list[list[int]]:
    """transformers' fp32 greedy decoding of the four prompts (the manifest's), which the
    0.5.23 baseline server reproduces token for token (tests/test_server_cpu.py): the v1
    servers' output is compared with it directly, with no v1 baseline server to start
    (that server, equal to this reference, was one start of about 100 s)."""
    return [g["new_ids"][:MAX_NEW_TOKENS] for g in manifest(tiny_models)["greedy"][:4]]


def check_profile(lines: list[str], outs: list[dict]) -> float:
    """EAGLE3_PROFILE records (one per cycle) against SGLang's Decode batch lines."""
    profile_lines = [ln for ln in lines if "EAGLE3_PROFILE v=" in ln]
    assert profile_lines and all(" syncs=0 " in ln for ln in profile_lines), profile_lines
    records = [r for r in map(record_from_line, profile_lines) if r.cycles]
    decode = [DECODE_BATCH.search(ln) for ln in lines if "Decode batch" in ln]
    assert records and len(records) == len(decode), (len(records), len(decode))
    verify_ct = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    assert verify_ct == sum(bs * n for r in records for bs, n in r.bs.items())
    ours = [
        sum(k * v for k, v in r.accept_hist.items()) / sum(r.accept_hist.values()) for r in records
    ]
    assert [round(a, 2) for a in ours] == pytest.approx(
        [float(m["acc"]) for m in decode], abs=0.006
    )
    for r in records:
        assert r.phases["draft"].mean > 0 and r.phases["verify_fwd"].mean > 0, r
    # The v1 worker skips draft-extend once every request of the batch has finished:
    # only in the last cycle, where the last requests end.
    assert all(r.phases["draft_extend"].mean > 0 for r in records[:-1]), records
    # over all verified requests (the per-cycle mean overweights the last, small batches)
    hist = [(k, v) for r in records for k, v in r.accept_hist.items()]
    return sum(k * v for k, v in hist) / sum(v for _, v in hist)


# (preset, manifest setting, draft, mean accept length range): the chain with every draft
# rejected and the tree with most accepted, both profiled (the launcher's spec check and
# an unprofiled server's clean log are the 0.5.23 servers'; one start per case here)
@pytest.mark.parametrize(
    "preset, setting, draft, low, high",
    [
        ("eagle3-3step", "3,1,4", "never", 1.0, 1.1),
        ("eagle3-2step", "2,4,16", "mostly", 2.0, 3.4),
    ],
)
def test_v1_worker_lossless_accepts_as_designed(
    tiny_models, v1_python, greedy_reference, start_launcher, preset, setting, draft, low, high
):
    args = [
        "--preset",
        preset,
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models[f"draft-{draft}"]),
        # our requests are the only ones with decode cycles
        "--no-spec-check",
        "--",
        "--skip-server-warmup",
    ]
    launcher = start_launcher(*args, python=v1_python, env=PROFILE_ENV)
    ready(launcher)
    outs = greedy(launcher)
    stop_cleanly(launcher)
    # Read once the launcher has exited: v1 logs a cycle's Decode batch line after the
    # reply is sent, and the launcher copies the log from a pipe, so at the reply the
    # last cycle's lines may not be in the file yet.
    lines = launcher.log_text().splitlines()

    assert [o["output_ids"] for o in outs] == greedy_reference  # lossless
    per_request = [round(http.accept_length(o["meta_info"]), 3) for o in outs]
    expected = manifest(tiny_models)["expected_accept_length"][f"draft-{draft}"][setting]
    assert per_request == expected[: len(outs)]  # the acceptance the pair was built for
    assert low <= sum(per_request) / len(per_request) <= high, per_request
    log = launcher.log_text()
    assert "v1 worker builds FULL_MASK itself" in log  # the harness saw the v1 release
    assert "Triton's interpreter: overflow checks off" in log  # Triton 3.9's anchors held
    assert f"EAGLE3_PROFILE: on (SGLang {RELEASE}, workers v1" in log
    # no split-KV verify kernel in this release: one line per scheduler, the extend kernel
    refused = f"EAGLE_EXT_CHAIN_VERIFY: disabled: SGLang {RELEASE} ships no split-KV verify"
    assert log.count(refused) == 1, log.count(refused)
    assert "target verify on" not in log
    ours = check_profile(lines, outs)  # per cycle, over the batch
    assert low <= ours <= high, ours
