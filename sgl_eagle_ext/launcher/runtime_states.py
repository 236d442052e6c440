"""How many speculative runtime states and CUDA graphs a launch builds.

A fixed EAGLE preset builds one state: target-verify, draft-decode (steps > 1 only)
and draft-extend graphs at each captured decode batch size. `--speculative-adaptive`
builds one more state per other candidate step count of its table, each with its own
graphs at the batch sizes whose bucket lists that step (SGLang 0.5.23:
AdaptiveController.init_states, AdaptiveSpeculativeParams.cuda_graph_bs_for_step,
EagleDraftWorker._capture_cuda_graphs). SGLang's memory estimate for
`--mem-fraction-static` has no term for those extra states, so the preflight prints
the count before any weight loads.

Predicted from SGLang's rules (tests/test_runtime_states.py checks them against the
installed SGLang's own functions); the batch sizes are an upper bound, since SGLang
also drops those above the request pool it sizes at startup.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from sgl_eagle_ext.common.server_argv import ServerArgv


def capture_batch_sizes(max_bs: int, speculative: bool, no_padding: bool = False) -> list[int]:
    """SGLang's decode capture batch sizes for `--cuda-graph-max-bs` (predicted from
    0.5.23's generate_decode_cuda_graph_batch_sizes; the same lists since 0.5.10)."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
    else:  # less padding for small batches
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
        sizes += list(range(272, max_bs + 1, 16))
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def bucket_of(buckets: dict[int, list[int]], batch_size: int) -> int:
    """The table's bucket a (padded) batch size routes to: the largest key at or
    below it, else the smallest (SGLang's _find_closest_bs)."""
    keys = sorted(buckets)
    return keys[max(0, bisect.bisect_right(keys, batch_size) - 1)]


@dataclass(frozen=True)
class StateGraphs:
    steps: int
    batch_sizes: tuple[int, ...]  # graphs captured for this state (empty: none)

    @property
    def verify(self) -> int:
        return len(self.batch_sizes)

    @property
    def draft_extend(self) -> int:
        return len(self.batch_sizes)

    @property
    def draft_decode(self) -> int:
        return len(self.batch_sizes) if self.steps > 1 else 0  # steps 0/1: no draft graph


@dataclass(frozen=True)
class GraphPlan:
    states: tuple[StateGraphs, ...]  # the startup state first
    batch_sizes: tuple[int, ...]  # every captured decode batch size (empty: graphs off)

    @property
    def extra_states(self) -> int:
        return len(self.states) - 1

    def total(self, kind: str) -> int:
        return sum(getattr(s, kind) for s in self.states)

    def line(self) -> str:
        steps = ",".join(str(s.steps) for s in self.states)
        head = f"{len(self.states)} speculative runtime state(s) (steps {steps})"
        if not self.batch_sizes:
            return f"{head}; CUDA graphs off"
        one = self.states[0]
        return (
            f"{head}: {self.total('verify')} target-verify + {self.total('draft_extend')} "
            f"draft-extend + {self.total('draft_decode')} draft-decode CUDA graphs at up to "
            f"{len(self.batch_sizes)} batch sizes (the startup state alone: {one.verify} + "
            f"{one.draft_extend} + {one.draft_decode})"
        )


def count(
    initial_steps: int, buckets: dict[int, list[int]] | None, batch_sizes: list[int]
) -> GraphPlan:
    """The states and graphs for a launch starting at `initial_steps`; `buckets` the
    adaptive table (bucket -> candidate steps; None for a fixed preset); `batch_sizes`
    the decode capture sizes ([] when CUDA graphs are off)."""
    sizes = tuple(sorted(batch_sizes))
    states = [StateGraphs(initial_steps, sizes)]  # built with every size at startup
    if buckets:
        for steps in sorted({s for c in buckets.values() for s in c} - {initial_steps}):
            pruned = tuple(b for b in sizes if steps in buckets[bucket_of(buckets, b)])
            states.append(StateGraphs(steps, pruned))
    return GraphPlan(tuple(states), sizes)


def graphs_on(argv: ServerArgv) -> bool:
    return not argv.has("disable-cuda-graph") and argv.value("cuda-graph-backend-decode") not in (
        "disabled",
    )


def for_launch(argv, buckets: dict[int, list[int]] | None) -> GraphPlan | None:
    """The plan for a speculative launch's final SGLang arguments (None: not
    speculative, no step count, or batch sizes SGLang picks from the GPU's memory)."""
    argv = ServerArgv.of(argv)
    steps = argv.num_steps
    if not argv.speculative_algorithm or steps is None:
        return None
    if not argv.has("speculative-adaptive"):
        buckets = None
    if not graphs_on(argv):
        return count(steps, buckets, [])
    sizes = decode_capture_sizes(argv)
    return None if sizes is None else count(steps, buckets, sizes)


def decode_capture_sizes(argv) -> list[int] | None:
    """The decode batch sizes a launch captures: an explicit list (`--cuda-graph-bs`, as
    every shipped preset pins) as given, else SGLang's list up to `--cuda-graph-max-bs`;
    clamped to `--max-running-requests` (SGLang drops the sizes above its request pool).
    None: SGLang picks them from the GPU's memory."""
    argv = ServerArgv.of(argv)
    sizes = argv.ints("cuda-graph-bs-decode", "cuda-graph-bs")
    if not sizes:
        max_bs = argv.number("cuda-graph-max-bs-decode", "cuda-graph-max-bs")
        if max_bs is None or max_bs < 1:
            return None
        speculative = bool(argv.speculative_algorithm)
        sizes = capture_batch_sizes(max_bs, speculative, argv.has("disable-cuda-graph-padding"))
    cap = argv.number("max-running-requests")
    if cap:
        sizes = [b for b in sizes if b <= cap] or [cap]
    return sorted(set(sizes))


def for_release(argv, release) -> GraphPlan | None:
    """for_launch, with the adaptive table read by `release`'s loader rules (a table
    SGLang would refuse: the states are not counted; the preflight says why)."""
    from sgl_eagle_ext.common import adaptive_config

    argv = ServerArgv.of(argv)
    buckets = None
    path = argv.value(adaptive_config.FLAG)
    if argv.has("speculative-adaptive"):
        if path is None:
            return None  # SGLang's built-in table
        buckets, _ = adaptive_config.load(path, release)
        if buckets is None:
            return None
    return for_launch(argv, buckets)
