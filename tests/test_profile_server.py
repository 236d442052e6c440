"""EAGLE3_PROFILE=1 inside a real SGLang server on the CPU harness.

One profile record per cycle (EAGLE3_PROFILE_CYCLES=1) and one SGLang "Decode
batch" line per decode iteration (--decode-log-interval 1) let the test check
our figures against SGLang's own, cycle by cycle.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from sgl_eagle_ext.common import http
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS
from sgl_eagle_ext.profiling.report import (
    AGREE_PCT,
    DECODE_BATCH,
    SAMPLING_FACTOR,
    record_from_line,
)
from tests.conftest import wait_until

pytestmark = pytest.mark.server
# per request of the batch-size 1 and 4 runs: a never-accepted draft yields one token a
# cycle, so half as many give it as many cycles as the accepted one gets from 48
AGREE_TOKENS = {"mostly": 48, "never": 24}
PROFILE_ENV = {
    "EAGLE3_PROFILE": "1",
    "EAGLE3_PROFILE_CYCLES": "1",
    "EAGLE3_PROFILE_SYNC_CHECK": "1",
}


def after_ready(log: str) -> list[str]:
    lines = log.splitlines()
    start = max(i for i, ln in enumerate(lines) if "fired up and ready to roll" in ln)
    return lines[start + 1 :]


def profile_records(lines: list[str]) -> list[dict]:
    return [record_from_line(ln) for ln in lines if "EAGLE3_PROFILE v=" in ln]


def verify_calls(metrics_text: str) -> float:
    """SGLang's verify passes over all finished requests (its Prometheus counter; no
    sample before the first such request)."""
    samples = re.findall(
        r"^sglang:spec_verify_calls_total(?:\{[^}]*\})? ([\d.e+]+)$", metrics_text, re.M
    )
    return sum(float(v) for v in samples)


def request_cycles(metrics_text: str) -> float:
    """Our counter of requests verified, summed over the cycles it resolved."""
    samples = re.findall(
        r"^sglang_ext:eagle_request_cycles_total(?:\{[^}]*\})? ([\d.e+]+)$", metrics_text, re.M
    )
    return sum(float(v) for v in samples)


def caught_up(url: str) -> http.Reply:
    """/metrics once our request-cycle counter has reached SGLang's verify count (both
    the warm-up's and ours): every cycle resolved and counted."""
    got: list = []

    def done() -> bool:
        got[:] = [http.request(f"{url}/metrics")]
        text = got[0].text
        return got[0].status == 200 and request_cycles(text) >= verify_calls(text) > 0

    wait_until(done, timeout=120, what="our counters caught up with SGLang's verify count")
    return got[0]


@pytest.mark.parametrize("draft, low, high", [("mostly", 2.0, 4.0), ("never", 1.0, 1.2)])
def test_profile_matches_sglang_counts(tiny_models, start_launcher, tmp_path, draft, low, high):
    jsonl = tmp_path / "profile-{rank}.jsonl"
    launcher = start_launcher(
        "--preset",
        "eagle3-3step",
        "--cpu",
        "--no-spec-check",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models[f"draft-{draft}"]),
        "--",
        "--decode-log-interval",
        "1",
        env={**PROFILE_ENV, "EAGLE3_PROFILE_FILE": str(jsonl)},
    )
    launcher.wait_for("READY in")
    # SGLang's warm-up request has finished (READY comes after it): its verify passes,
    # by SGLang's own counter
    warmup_verify = verify_calls(http.request(f"{launcher.base_url}/metrics").text)
    outs = http.generate(launcher.base_url, list(DEMO_PROMPTS[:4]), 16)
    # profiled, the server is still lossless and accepts as the pair was built to: greedy
    # output is transformers' fp32 greedy decoding (the baseline server's too, in
    # tests/test_server_cpu.py), each request's accept length the manifest's
    built = json.loads((tiny_models["target"].parent / "manifest.json").read_text())
    assert [o["output_ids"] for o in outs] == [
        g["new_ids"][:16] for g in built["greedy"][: len(outs)]
    ]
    per_request = [round(http.accept_length(o["meta_info"]), 3) for o in outs]
    assert per_request == built["expected_accept_length"][f"draft-{draft}"]["3,1,4"][: len(outs)]
    # one stream, then four: the report's tok/s against SGLang's own at batch sizes 1, 4
    for n in (1, 4):
        outs += http.generate(launcher.base_url, list(DEMO_PROMPTS[:n]), AGREE_TOKENS[draft])
    # Our counters count a cycle when it resolves: the last one at the scheduler's next
    # idle call, which can come after the reply (a scrape at the reply missed it once:
    # 58 cycles counted of 59). Scrape once every cycle SGLang verified is counted.
    metrics = caught_up(launcher.base_url)
    stop = launcher.signal(signal.SIGTERM)
    assert stop == 128 + signal.SIGTERM
    # The whole log, read once the launcher has exited: the scheduler logs a cycle's
    # record and its Decode batch line around sending the reply, and the launcher copies
    # them from a pipe into the file, so a read at the reply can miss the last cycle's
    # lines (and a line count taken at READY, the warm-up's last ones).
    lines = launcher.log_text().splitlines()

    assert "EAGLE3_PROFILE: on (SGLang" in launcher.log_text()
    # the shipped eagle3-3step preset's main path: installed once, a clean log
    # (tests/test_server_cpu.py starts the other presets profiled)
    log = launcher.log_text()
    assert log.count("EAGLE3_PROFILE: on (SGLang") == 1
    assert "Traceback" not in log and "Failed to execute general plugin" not in log
    records = [r for r in profile_records(lines) if r.cycles]
    decode = [DECODE_BATCH.search(ln) for ln in lines if "Decode batch" in ln]
    assert records and decode
    # one record per cycle, one SGLang line per verify iteration: same count
    assert len(records) == len(decode)
    # SGLang's per-request verify counts (ours, plus the warm-up's) sum to our cycles
    # weighted by batch size
    verify_ct = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
    assert verify_calls(metrics.text) == warmup_verify + verify_ct
    assert warmup_verify + verify_ct == sum(bs * n for r in records for bs, n in r.bs.items())
    # cycle by cycle, our accept length is SGLang's own
    ours = [
        sum(k * v for k, v in r.accept_hist.items()) / sum(r.accept_hist.values()) for r in records
    ]
    theirs = [float(m["acc"]) for m in decode]
    assert [round(a, 2) for a in ours] == pytest.approx(theirs, abs=0.006)
    mean = sum(ours) / len(ours)
    assert low <= mean <= high
    # every phase was timed, no synchronize inside any cycle
    for r in records:
        assert r.phases["verify_fwd"].mean > 0 and r.phases["draft"].mean > 0
        assert r.phases["draft_extend"].mean > 0
    assert all("syncs=0" in ln for ln in lines if "EAGLE3_PROFILE v=" in ln)
    # SGLang's metrics are on (the presets pass --enable-metrics): our counters are there
    assert metrics.status == 200
    text = metrics.text
    cycles = re.search(
        r'^sglang_ext:eagle_cycles_total\{[^}]*kind="decode"[^}]*\} ([\d.e+]+)', text, re.M
    )
    assert cycles and float(cycles.group(1)) >= len(records), text[-2000:]
    assert re.search(r'^sglang_ext:eagle_phase_seconds_total\{[^}]*phase="verify_fwd"', text, re.M)
    # the same records as JSON lines
    file_text = (tmp_path / "profile-0.jsonl").read_text().splitlines()
    file_records = [record_from_line(x) for x in file_text]
    assert sum(r.cycles for r in file_records) >= len(records)
    # and the report reads the log
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgl_eagle_ext.report",
            str(launcher.log_file),
            "--baseline-tps",
            "50",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr
    rows = {row["bs"]: row for row in json.loads(report.stdout)["rows"]}
    assert any("break_even_accept_len" in row for row in rows.values())
    # cycles in wall time: the host row (the scheduler's work between cycles) is timed
    # and in the cycle, so the profile's tok/s is SGLang's own Decode-batch throughput
    for bs in (1, 4):
        row = rows[bs]
        host = row["phases"]["host"]
        print(
            f"[{draft}] bs {bs}: profile {row['tok_s']:.2f} tok/s (cycle "
            f"{row['phases']['cycle']['mean_ms']:.1f} ms, host {host['mean_ms']:.1f} ms = "
            f"{host['share_pct']:.1f}%) vs SGLang's {row['sglang_gen_tps']:.2f} tok/s: "
            f"{row['profile_vs_sglang_pct']:+.1f}% ({row['cycles']} cycles)"
        )
        assert host["mean_ms"] > 0
        pct = abs(row["profile_vs_sglang_pct"])
        # within AGREE_PCT, or the contended-host case the report names with its size: the
        # windows' own cycle spread is so wide that SGLang's lines and the profile's
        # windows sample different cycles (CI once: -7.6% over 29 cycles, windows
        # 376-1487 ms). Time left uncounted would disagree without such a spread.
        sampling = row.get("cycle_spread_pct", 0) >= SAMPLING_FACTOR * pct
        assert pct <= AGREE_PCT or sampling, row


def test_sync_check_and_a_server_stopped_under_load(tiny_models, start_launcher, tmp_path):
    """One server, two checks. The no-sync check is real: a synchronize injected into the
    draft phase is counted. Defect 4: SGLang SIGKILLs the schedulers, so their exit flush
    never ran and the window in progress was lost. No window is due (600 s) and the server
    is never idle: the only window after the request starts is the one written on the way
    out, and it holds the injected synchronize."""
    import threading

    plugin_dir = tmp_path / "inject"
    plugin_dir.mkdir()
    # A sitecustomize that, once SGLang's eagle_worker_v2 has been executed, makes
    # EagleDraftWorker.draft call torch.cuda.synchronize() (a no-op on CPU).
    (plugin_dir / "sitecustomize.py").write_text(
        "import importlib.abc, os, sys\n"
        "if os.environ.get('EAGLE_EXT_TEST_SYNC') == '1':\n"
        "    NAME = 'sglang.srt.speculative.eagle_worker_v2'\n"
        "    class Hook(importlib.abc.MetaPathFinder):\n"
        "        def find_spec(self, name, path, target=None):\n"
        "            if name != NAME:\n"
        "                return None\n"
        "            sys.meta_path.remove(self)\n"
        "            spec = importlib.util.find_spec(name)\n"
        "            run = spec.loader.exec_module\n"
        "            def exec_module(module):\n"
        "                run(module)\n"
        "                import torch\n"
        "                torch.cuda.synchronize = lambda *a, **k: None\n"
        "                orig = module.EagleDraftWorker.draft\n"
        "                def draft(self, *a, **k):\n"
        "                    torch.cuda.synchronize()\n"
        "                    return orig(self, *a, **k)\n"
        "                module.EagleDraftWorker.draft = draft\n"
        "            spec.loader.exec_module = exec_module\n"
        "            return spec\n"
        "    import importlib.util\n"
        "    sys.meta_path.insert(0, Hook())\n"
    )
    launcher = start_launcher(
        "--preset",
        "eagle3-3step",
        "--cpu",
        "--no-spec-check",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models["draft-mostly"]),
        "--",
        "--decode-log-interval",
        "1",
        env={
            "EAGLE3_PROFILE": "1",
            "EAGLE3_PROFILE_INTERVAL_S": "600",
            "EAGLE3_PROFILE_SYNC_CHECK": "1",
            "EAGLE_EXT_TEST_SYNC": "1",
            "PYTHONPATH": str(plugin_dir),
        },
    )
    launcher.wait_for("READY in")
    start = len(launcher.log_text().splitlines())

    def load():
        try:
            http.generate(launcher.base_url, [DEMO_PROMPTS[0]], 400)
        except Exception:  # the server goes away mid-request: expected
            pass

    threading.Thread(target=load, daemon=True).start()
    deadline = time.monotonic() + 300
    while sum("Decode batch" in ln for ln in launcher.log_text().splitlines()[start:]) < 3:
        assert time.monotonic() < deadline, launcher.log_text()[-3000:]
        time.sleep(0.2)
    launcher.signal(signal.SIGTERM)
    lines = launcher.log_text().splitlines()[start:]
    records = [r for r in profile_records(lines) if r.cycles]
    assert records and sum(r.cycles for r in records) >= 3, launcher.log_text()[-3000:]
    syncs = [
        int(re.search(r"syncs=(\d+)", ln).group(1)) for ln in lines if "EAGLE3_PROFILE v=" in ln
    ]
    assert syncs and max(syncs) >= 1


def test_unset_variable_leaves_sglang_unpatched(spec_server):
    """The session's shared server runs with EAGLE3_PROFILE=0 (conftest)."""
    http.generate(spec_server.base_url, list(DEMO_PROMPTS[:2]), 8)
    assert "Decode batch" in spec_server.log_text()  # it served, and its log is read
    assert "EAGLE3_PROFILE" not in spec_server.log_text()
