"""TP 2 on the CPU harness (gloo): pins written at random moments under load, every
rank's profile shows the same step count for every decode cycle (issue 24 item 3).

One real SGLang 0.5.23 server, two scheduler ranks (SGLANG_CPU_OMP_THREADS_BIND
gives each one core), adaptive speculation with candidates 0..3, the schedule
controller on (EAGLE_EXT_SCHEDULE_FILE), profiling on both ranks with one record per
decode cycle (EAGLE3_PROFILE_RANKS=all, EAGLE3_PROFILE_CYCLES=1). The tiny draft has
one attention head: a copy with two (same weight shapes) shards over two ranks.
No wall-clock assertion.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import urllib.request
from pathlib import Path

import pytest

from sgl_eagle_ext.common import schedule_file
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS

pytestmark = pytest.mark.server
CANDIDATES = [0, 1, 2, 3]


def two_head_draft(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg |= {"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": cfg["head_dim"] // 2}
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def per_cycle_steps(path: Path) -> list[tuple[int, int]]:
    """(batch size, steps) of every decode cycle, in the order the rank logged them."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if not rec.get("cycles"):
            continue
        (bs,), (steps,) = rec["bs"], rec["steps"]  # one key each (profiler.py)
        out += [(int(bs), int(steps))] * rec["cycles"]
    return out


def generate(url: str, prompt: str, tokens: int) -> None:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
    req = urllib.request.Request(
        url + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        assert r.status == 200


def test_tp2_ranks_run_the_same_steps_under_random_pins(tiny_models, tmp_path, start_launcher):
    draft = two_head_draft(tiny_models["draft-mostly"], tmp_path / "draft2")
    table = tmp_path / "table.json"
    table.write_text(json.dumps({str(b): {"candidate_steps": CANDIDATES} for b in (1, 2, 4)}))
    request = tmp_path / "schedule.json"
    schedule_file.write_request(request, 1)
    preset = tmp_path / "tp2.toml"
    preset.write_text(
        f"""extends = "eagle3-adaptive"
[env]
EAGLE3_PROFILE = "1"
EAGLE3_PROFILE_RANKS = "all"
EAGLE3_PROFILE_CYCLES = "1"
EAGLE3_PROFILE_FILE = {json.dumps(str(tmp_path / "profile-{rank}.jsonl"))}
EAGLE_EXT_SCHEDULE_FILE = {json.dumps(str(request))}
SGLANG_CPU_OMP_THREADS_BIND = "0|1"
# SGLang 0.5.23 builds a PyNcclCommunicator for every TP group > 1 unless the NCCL
# library fails to load; this venv's CUDA-build torch brings one, and the communicator
# then asks torch.cuda for device "cpu" (ValueError). No NCCL library: gloo only.
SGLANG_NCCL_SO_PATH = "/nonexistent/libnccl.so.2"
"""
    )
    server = start_launcher(
        "--preset-file",
        str(preset),
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(draft),
        "--adaptive-config",
        str(table),
        "--",
        "--tp-size",
        "2",
    )
    server.wait_for("READY in")
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    done = threading.Event()
    written = []

    def writer():  # the tuner's writes, but at random moments: under load as well
        seq = 1
        while not done.wait(rng.uniform(0.05, 1.5)):
            seq += 1
            pin = rng.choice([*CANDIDATES, None])
            schedule_file.write_request(request, seq, **({"pin": pin} if pin is not None else {}))
            written.append(pin)

    w = threading.Thread(target=writer)
    w.start()
    try:
        for _ in range(3):  # rounds of 4 concurrent requests
            clients = [
                threading.Thread(target=generate, args=(server.base_url, p, 24))
                for p in DEMO_PROMPTS[:4]
            ]
            for c in clients:
                c.start()
            for c in clients:
                c.join()
    finally:
        done.set()
        w.join()
    server.wait_until(lambda: (tmp_path / "profile-1.jsonl").exists(), timeout=60)
    server.signal()  # the exit flush writes each rank's last window
    ranks = [per_cycle_steps(tmp_path / f"profile-{r}.jsonl") for r in (0, 1)]
    grants = json.loads(next(tmp_path.glob("schedule.json.grants-*")).read_text())["grants"]
    print(f"{len(written)} requests written, {len(grants)} last grants, {len(ranks[0])} cycles")
    print("rank 0 steps:", "".join(str(s) for _, s in ranks[0]))
    assert ranks[0] and ranks[0] == ranks[1]
    assert len({s for _, s in ranks[0]}) >= 2  # the pins did switch the steps
    log = server.log_text()
    assert "switches late" not in log and "Traceback" not in log
