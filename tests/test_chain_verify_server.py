"""Chain verifies on split-KV in a real server (in_sglang/chain_verify.py), with the step
count forced 2 -> 0 -> 2 in the middle of requests (the schedule controller's pins).

One SGLang 0.5.23 server on the CPU harness: `eagle3-adaptive` (topk 1: every 2-step
verify on SGLang's grouped-head split-KV kernel and draft-extend on its per-head one,
every 0-step one on its decode path and kernel), the mostly-accepted draft, one profile
record per decode cycle. Three passes over the demo prompts:

- reference: the first prompts pinned at 2 steps throughout ("a server that never left
  2 steps");
- one stream: every prompt in turn while a driver flips the pin 2 -> 0 -> 2 every few
  decode cycles, so most requests switch mid-request, some more than once;
- four streams: the first four prompts at once (a batch switching mid-request; the
  prompts after them would add nothing the one-stream pass and this batch do not).

Every output must equal the greedy tokens the pair was built with (transformers' fp32
greedy decoding, which the baseline server reproduces: tests/test_server_cpu.py), and
after resuming at 2 steps the draft must be as good as one that never stopped: the
2-step cycles after a 0-step spell inside a request accept what the reference's cycles
accepted at the same positions: over up to 32 such cycles (at least 24, at positions the
reference also verified), the mean accept length within 5% of the reference's, and in
fact cycle by cycle. 0-step cycles skip the draft-extend and keep its inputs
(in_sglang/draft_catchup.py), here at most 3 positions per request, fewer than a 0-step
spell lasts: both of its catch-ups run, the one when three are kept (mid-spell) and the
one when drafting resumes; a catch-up that missed a position, or fed the draft anything
but what the per-cycle draft-extend would have, shows as a different accept count.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sgl_eagle_ext.common import http, schedule_file
from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS

pytestmark = pytest.mark.server
TOKENS = 32
CANDIDATES = [0, 1, 2, 3]
SPELL = {2: 5, 0: 4}  # decode cycles per pin before the driver flips it
REFERENCE = 6  # prompts run pinned at 2 steps first: ~30 resumed cycles to compare


def cycles(path: Path) -> list[dict]:
    """Per-cycle profile records so far (a torn last line skipped)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("cycles") == 1:
            (steps,) = rec["steps"]
            bs = {int(k): v for k, v in rec["bs"].items()}
            prefills = (rec.get("prefill") or {}).get("n", 0)  # since the previous cycle
            out.append(
                {"steps": int(steps), "bs": bs, "accept": rec.get("accept_len"), "new": prefills}
            )
    return out


class Flipper:
    """Flips the pin 2 -> 0 -> 2 ... every SPELL[pin] decode cycles (counted in the
    profile file), from a thread, while requests run."""

    def __init__(self, request: Path, profile: Path, seq: int):
        self.request, self.profile, self.seq = request, profile, seq
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        pin, since = 2, len(cycles(self.profile))
        while not self.done.wait(0.05):
            n = len(cycles(self.profile))
            if n - since >= SPELL[pin]:
                pin, since = 2 - pin, n
                self.seq += 1
                schedule_file.write_request(self.request, self.seq, pin=pin)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def decoded(recs: list[dict]) -> int:
    """Tokens the cycles produced (accept length x batch size)."""
    return sum(round(r["accept"] * sum(r["bs"].values())) for r in recs)


def per_request(recs: list[dict]) -> list[list[tuple[int, int, int]]]:
    """One stream's cycles split into its requests at each prefill (cycles before the
    first are another pass's): (tokens generated before the cycle, steps, drafts
    accepted) each; a request's first token comes from its prefill."""
    out = []
    for r in recs:
        if r["new"]:
            out.append([])
            done = 0
        if not out:
            continue
        accepted = round(r["accept"]) - 1  # one request in the cycle: its accept length
        out[-1].append((done, r["steps"], accepted))
        done += accepted + 1
    return out


def test_greedy_and_acceptance_survive_forced_switches(tiny_models, tmp_path, start_launcher):
    manifest = json.loads((tiny_models["target"].parent / "manifest.json").read_text())
    expected = [g["new_ids"][:TOKENS] for g in manifest["greedy"]]
    table = tmp_path / "table.json"
    table.write_text(json.dumps({str(b): {"candidate_steps": CANDIDATES} for b in (1, 2, 4)}))
    request = tmp_path / "schedule.json"
    schedule_file.write_request(request, 1, pin=2)
    profile = tmp_path / "profile-0.jsonl"
    preset = tmp_path / "switches.toml"
    preset.write_text(
        f"""extends = "eagle3-adaptive"
[env]
EAGLE3_PROFILE = "1"
EAGLE3_PROFILE_CYCLES = "1"
EAGLE3_PROFILE_FILE = {json.dumps(str(tmp_path / "profile-{rank}.jsonl"))}
EAGLE_EXT_SCHEDULE_FILE = {json.dumps(str(request))}
EAGLE_EXT_DRAFT_CATCHUP = "3"
"""
    )
    server = start_launcher(
        "--preset-file",
        str(preset),
        "--cpu",
        "--model-path",
        str(tiny_models["target"]),
        "--draft-model-path",
        str(tiny_models["draft-mostly"]),
        "--adaptive-config",
        str(table),
    )
    server.wait_for("spec check:")  # the launcher's own request: before ours

    def generate(prompts):
        outs = http.generate(server.base_url, list(prompts), TOKENS)
        return [o["output_ids"] for o in outs]

    def one_stream(prompts, start):
        """Each prompt alone, then its cycles once all are written (the last at idle)."""
        outs = [generate([p])[0] for p in prompts]
        whole = len(prompts) * (TOKENS - 1)
        server.wait_until(lambda: decoded(cycles(profile)[start:]) >= whole)
        return outs

    # reference: 2 steps throughout
    start = len(cycles(profile))
    assert one_stream(DEMO_PROMPTS[:REFERENCE], start) == expected[:REFERENCE]
    # the last REFERENCE requests: a cycle of the launcher's spec check may be written late
    reference = per_request(cycles(profile)[start:])[-REFERENCE:]
    assert {s for req in reference for _, s, _ in req} == {2}

    # one stream, then four: the pin flips mid-request
    start = len(cycles(profile))
    with Flipper(request, profile, seq=1) as flipper:
        one = one_stream(DEMO_PROMPTS, start)
        mid = len(cycles(profile))
        four = generate(DEMO_PROMPTS[:4])
    assert one == expected, "greedy output changed with switches at one stream"
    assert four == expected[:4], "greedy output changed with switches at four streams"
    ran = cycles(profile)[start:]
    assert flipper.seq >= 5, "the pins did not flip"
    assert {r["steps"] for r in ran} == {0, 2}, "both 0-step and 2-step cycles ran"

    # after a 0-step spell inside a request, its 2-step cycles accept what the reference
    # accepted at the same positions: the draft resumed as if it had never stopped
    switched = per_request(ran[: mid - start])[-len(DEMO_PROMPTS) :]
    assert len(switched) == len(DEMO_PROMPTS)
    mid_request = [req for req in switched if {0, 2} <= {s for _, s, _ in req}]
    assert len(mid_request) >= 4, [[s for _, s, _ in req] for req in switched]
    pairs = []
    for req, ref in zip(switched[:REFERENCE], reference, strict=True):
        ref_at = {pos: acc for pos, _, acc in ref}
        off = [i for i, (_, s, _) in enumerate(req) if s == 0]
        if off:
            pairs += [(acc, ref_at[p]) for p, s, acc in req[off[0] :] if s == 2 and p in ref_at]
    assert len(pairs) >= 24, pairs  # 31 of 6 reference prompts' positions in one run
    pairs = pairs[:32]
    resumed, never_left = (sum(x) / len(pairs) + 1 for x in zip(*pairs, strict=True))
    print(
        f"accept length over {len(pairs)} resumed cycles {resumed:.3f}, reference {never_left:.3f}"
    )
    assert abs(resumed - never_left) <= 0.05 * never_left
    assert [a for a, _ in pairs] == [r for _, r in pairs]  # cycle by cycle, in fact

    log = server.log_text()
    # 0 steps: one token per request, a decode (SGLang's decode path and kernel); 2 steps:
    # three, the target's (GQA 4/2) on SGLang's grouped-head split-KV kernel, the draft's
    # (one head: MHA) on its per-head one
    assert "target verify on the decode kernel (1 token(s) per request)" in log
    assert "EAGLE_EXT_DRAFT_CATCHUP: on" in log
    # the harness's interpreter changes ran in the scheduler (cpu/interpreter_patching.py)
    assert "Triton's interpreter: overflow checks off" in log
    assert "first catch-up at 3 kept:" in log and "first catch-up as drafting resumes:" in log
    assert "kept positions end at" not in log and "off from now on" not in log
    assert "target verify on verify_shared_kv_fwd (3 token(s) per request)" in log
    assert "draft-extend on verify_splitkv_fwd (3 token(s) per request)" in log
    assert "target verify on verify_splitkv_fwd" not in log
    assert "Traceback" not in log
