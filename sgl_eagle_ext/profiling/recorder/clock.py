"""Timestamps for phase boundaries that never stall the GPU.

`CudaEventClock` records a `torch.cuda.Event` on the current stream (the stream
the phase's work was queued on) and reads it back later, only once `query()`
says it has completed: no synchronize in the hot path. Nothing is recorded while
a CUDA graph is being captured (the event would become part of the graph).
`HostClock` is the same interface on the host clock, for the CPU harness where
every kernel has finished when the Python call returns.
"""

from __future__ import annotations

import time


class HostClock:
    kind = "host"

    def mark(self):
        return time.perf_counter_ns()

    def ready(self, mark) -> bool:
        return True

    def elapsed_ms(self, start, end) -> float:
        return (end - start) / 1e6

    def release(self, *marks) -> None:
        pass


class CudaEventClock:
    kind = "cuda"

    def __init__(self, torch_module=None):
        if torch_module is None:
            import torch as torch_module
        self._cuda = torch_module.cuda
        self._pool: list = []

    def mark(self):
        if self._cuda.is_current_stream_capturing():
            return None
        event = self._pool.pop() if self._pool else self._cuda.Event(enable_timing=True)
        event.record()
        return event

    def ready(self, mark) -> bool:
        return mark is None or mark.query()  # query() never blocks

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)  # both have completed: no wait

    def release(self, *marks) -> None:
        self._pool.extend(m for m in marks if m is not None)


def make_clock(device_is_cuda: bool):
    return CudaEventClock() if device_is_cuda else HostClock()
