"""Cost of EAGLE3_PROFILE (prints figures; not a test).

1. Host-side cost of the wrappers per speculation cycle, in microseconds: a
   worker whose phases do nothing, called with and without the wrappers
   installed (host clock; with CUDA available, the CUDA-event clock too).
2. tokens/s profiled / unprofiled on the CPU harness: the same greedy batch on
   an eagle3-3step server started twice from its launch plan, in this process as the
   launcher starts one (launcher/running.py).

    .venv/bin/python benchmarks/profile_overhead.py [--skip-server] [--repeat 3]

Both servers are the same preset with the same arguments (only EAGLE3_PROFILE differs,
an environment variable SGLang never reads; the presets pin the random seed): their
resolved settings are equal by construction, so there is no arm check to run here
(benchmarks/adaptive_vs_fixed.py, whose arms are different presets, runs one).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from sgl_eagle_ext.common import http, ports
from sgl_eagle_ext.in_sglang_base import patching
from sgl_eagle_ext.launcher import plan, running
from sgl_eagle_ext.profiling import names
from sgl_eagle_ext.profiling.recorder import config, instrument
from sgl_eagle_ext.profiling.recorder.clock import make_clock
from sgl_eagle_ext.profiling.recorder.profiler import Profiler

CYCLES = 20000


class Mode:
    def __init__(self, kind):
        self.kind = kind

    def is_idle(self):
        return False

    def is_decode(self):
        return self.kind == "decode"

    def is_extend(self):
        return self.kind == "extend"


class Batch:
    forward_mode = Mode("decode")
    reqs = [object()] * 4


class Result:
    num_correct_drafts_per_req_cpu = [2, 1, 3, 0]  # on the CPU already, as in v1


class Worker:
    speculative_num_draft_tokens = 4

    def forward_batch_generation(self, batch):
        self.draft(batch)
        self.verify(batch)
        self.target_forward(batch, is_verify=True)
        self._draft_extend_for_decode(batch)
        return Result()

    def draft(self, batch):
        pass

    def verify(self, batch):
        pass

    def target_forward(self, batch, is_verify=False):
        pass

    def _draft_extend_for_decode(self, batch):
        pass


ROLES = {
    "forward_batch_generation": "step",
    "draft": "draft",
    "verify": "verify",
    "target_forward": "target_forward",
    "_draft_extend_for_decode": "draft_extend",
}


def per_cycle_us(cuda: bool) -> float:
    worker, batch = Worker(), Batch()
    t0 = time.perf_counter()
    for _ in range(CYCLES):
        worker.forward_batch_generation(batch)
    return (time.perf_counter() - t0) / CYCLES * 1e6


def host_cost(cuda: bool) -> tuple[float, float]:
    plain = min(per_cycle_us(cuda) for _ in range(3))
    cfg = config.from_env({names.ENV: "1", names.ENV_INTERVAL_S: "1e9"})
    instrument.PROFILER = Profiler(cfg, make_clock(cuda), rank_fn=lambda: 0)
    wraps = [
        patching.Wrap(f"{__name__}:Worker.{name}", instrument.WRAPPERS[role])
        for name, role in ROLES.items()
    ]
    if not instrument.PATCHES.install(wraps):  # the recorder's own patch set
        raise SystemExit("the profiling wrappers could not be installed on the stand-in worker")
    try:
        profiled = min(per_cycle_us(cuda) for _ in range(3))
    finally:
        instrument.uninstrument()
    return plain, profiled


def server_tok_s(models: dict, profile: bool, prompts: list[str], tokens: int) -> float:
    port = ports.pick()
    log = Path(f"/tmp/profile-overhead-{port}.log")
    launch = plan.build(
        plan.LaunchRequest(
            preset="eagle3-3step",
            cpu=True,
            model_path=str(models["target"]),
            draft_model_path=str(models["draft-mostly"]),
            extra=("--port", str(port)),
            env={names.ENV: "1" if profile else "0"},  # the only difference
        )
    )
    server = running.start_or_exit(launch, log, "the server")
    with server:
        http.generate(server.url, prompts[:1], 4)  # warm the interpreter's caches
        t0 = time.perf_counter()
        outs = http.generate(server.url, prompts, tokens)
        took = time.perf_counter() - t0
        return sum(o["meta_info"]["completion_tokens"] for o in outs) / took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--skip-server", action="store_true")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--tokens", type=int, default=16)
    args = p.parse_args()

    clocks = [False]
    try:
        import torch

        if torch.cuda.is_available():
            clocks.append(True)
    except ImportError:
        pass
    print("host-side cost per speculation cycle (5 wrapped calls, 9 marks, accept join)")
    for cuda in clocks:
        plain, profiled = host_cost(cuda)
        extra = profiled - plain
        print(
            f"  clock={'cuda' if cuda else 'host'}: {plain:.2f} us unprofiled, "
            f"{profiled:.2f} us profiled -> +{extra:.2f} us per cycle = "
            f"{100 * extra / 12000:.3f}% of a 12 ms decode step"
        )
    if args.skip_server:
        return
    from sgl_eagle_ext.cpu import tiny_models

    models = tiny_models.build(
        Path(os.environ.get("EAGLE_EXT_MODELS_DIR", tiny_models.DEFAULT_DIR)).expanduser()
    )
    prompts = list(tiny_models.DEMO_PROMPTS)
    rates = {False: [], True: []}
    for _ in range(args.repeat):
        for profile in (False, True):
            rates[profile].append(server_tok_s(models, profile, prompts, args.tokens))
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(
        f"CPU harness, eagle3-3step, {len(prompts)} prompts x {args.tokens} tokens, "
        f"{args.repeat} runs each: unprofiled {off:.2f} tok/s {rates[False]}, "
        f"profiled {on:.2f} tok/s {rates[True]} -> ratio {on / off:.3f}"
    )


if __name__ == "__main__":
    raise SystemExit(running.script_main(main))
