"""A stand-in `torch.cuda` for benchmarks/gpu_check*.py's CUDA paths on CPU: host-clock
events that complete one query late, streams, a capture flag, a sync-debug mode that
raises ("error") or warns ("warn") on the synchronizing calls it models, and real CPU
tensors. What only a GPU can show (real events, graphs, torch's own detector) is not here.
"""

from __future__ import annotations

import contextlib
import time
import warnings


class FakeEvent:
    """Host-clock event. The device completes work in record order: an event is done once
    a query() found it in flight before, or a later one is done, or after a synchronize;
    elapsed_time() before both are done raises, as CUDA does."""

    def __init__(self, cuda, enable_timing=False):
        self.cuda, self.t, self.seq, self.queries = cuda, None, None, 0

    def record(self, stream=None):
        assert not self.cuda.capturing, "an event recorded inside a capture"
        self.cuda.recorded += 1
        self.t, self.seq, self.queries = time.perf_counter(), self.cuda.recorded, 0

    def done(self):
        return self.seq is not None and self.seq <= self.cuda.done_upto

    def query(self):
        if not self.done():
            self.queries += 1
            if self.queries < 2:
                return False  # still in flight at the first look
            self.cuda.done_upto = max(self.cuda.done_upto, self.seq)
        return True

    def synchronize(self):
        self.cuda.sync("Event.synchronize")
        self.cuda.done_upto = max(self.cuda.done_upto, self.seq)

    def elapsed_time(self, other):
        if not (self.done() and other.done()):
            raise RuntimeError("cudaErrorNotReady: an event read before it completed")
        return (other.t - self.t) * 1000


class FakeStream:
    def __init__(self, cuda=None):
        self.cuda = cuda

    def wait_stream(self, other):
        pass

    def synchronize(self):
        if self.cuda is not None:
            self.cuda.sync("Stream.synchronize")


class FakeGraph:
    def replay(self):
        pass


class FakeCuda:
    def __init__(self):
        self.capturing = False
        self.mode = 0
        self.syncs_in_error_mode = 0
        self.streams = [FakeStream(self)]
        self.recorded = self.done_upto = 0

    def sync(self, what):
        if self.mode in ("error", 2):
            self.syncs_in_error_mode += 1
            raise RuntimeError(f"called a synchronizing CUDA operation ({what})")
        if self.mode in ("warn", 1):
            warnings.warn(f"called a synchronizing CUDA operation ({what})", stacklevel=2)

    def is_available(self):
        return True

    def is_bf16_supported(self):
        return True

    def current_device(self):
        return 0

    def get_device_properties(self, i):
        return type(
            "P", (), {"name": "stand-in", "major": 0, "minor": 0, "multi_processor_count": 0}
        )

    def Event(self, enable_timing=False):
        return FakeEvent(self, enable_timing)

    def Stream(self):
        return FakeStream(self)

    def CUDAGraph(self):
        return FakeGraph()

    def graph_pool_handle(self):
        return object()

    def current_stream(self):
        return self.streams[-1]

    @contextlib.contextmanager
    def stream(self, s):
        self.streams.append(s)
        try:
            yield
        finally:
            self.streams.pop()

    @contextlib.contextmanager
    def graph(self, g, pool=None, stream=None):
        self.synchronize()  # as torch.cuda.graph does on entry
        self.capturing = True
        try:
            yield
        finally:
            self.capturing = False

    def is_current_stream_capturing(self):
        return self.capturing

    def synchronize(self):
        self.sync("torch.cuda.synchronize")
        self.done_upto = self.recorded

    def set_sync_debug_mode(self, mode):
        self.mode = mode


class FakeTorch:
    """Real CPU tensors, a stand-in `cuda`; `device="cuda"` is dropped; the rest is the
    real torch's."""

    def __init__(self, torch):
        self._t = torch
        self.cuda = FakeCuda()
        self.bfloat16 = self.float16 = torch.float32
        self.int32 = torch.int32
        self.__version__ = torch.__version__
        self.version = type("V", (), {"cuda": "stand-in"})

    def Generator(self, device=None):
        return self._t.Generator()

    def randn(self, *shape, device=None, dtype=None, generator=None):
        return self._t.randn(*shape, dtype=dtype, generator=generator)

    def randint(self, low, high, size, device=None, generator=None):
        return self._t.randint(low, high, size, generator=generator)

    def tanh(self, x):
        return self._t.tanh(x)

    def __getattr__(self, name):
        return getattr(self._t, name)

    def ones(self, *shape, device=None):
        cuda = self.cuda

        class Scalar:
            def item(self):
                cuda.sync(".item()")
                return 1.0

        return Scalar()


class TimelineEvent:
    """An event on a simulated device timeline: it completes at the time the work queued
    before it on its stream ends (or at its recording, on an idle stream)."""

    def __init__(self, cuda, enable_timing=False):
        self.cuda, self.t = cuda, None

    def record(self, stream=None):
        assert not self.cuda.capturing, "an event recorded inside a capture"
        s = stream or self.cuda.current_stream()
        self.t = max(time.perf_counter(), s.busy_until)

    def query(self):
        return self.t is not None and time.perf_counter() >= self.t

    def synchronize(self):
        self.cuda.sync("Event.synchronize")
        while not self.query():
            pass

    def elapsed_time(self, other):
        if not (self.query() and other.query()):
            raise RuntimeError("cudaErrorNotReady: an event read before it completed")
        return (other.t - self.t) * 1000


class TimelineStream(FakeStream):
    def __init__(self, cuda=None):
        super().__init__(cuda)
        self.busy_until = 0.0

    def wait_stream(self, other):
        self.busy_until = max(self.busy_until, other.busy_until)

    def synchronize(self):
        self.cuda.sync("Stream.synchronize")
        while time.perf_counter() < self.busy_until:
            pass


class TimelineCuda(FakeCuda):
    """FakeCuda with a device that takes time: `kernel(ms)` queues that much work on
    the current stream; events complete when the work before them has run. The host
    runs ahead of the device as it does on a GPU, so a loop can be GPU- or host-bound."""

    def __init__(self):
        super().__init__()
        self.streams = [TimelineStream(self)]
        self.idle_ms: list[float] = []  # each time a kernel found its stream run dry

    def kernel(self, ms: float) -> None:
        s = self.current_stream()
        now = time.perf_counter()
        if now > s.busy_until:
            self.idle_ms.append((now - s.busy_until) * 1e3)
        s.busy_until = max(now, s.busy_until) + ms / 1000

    def Event(self, enable_timing=False):
        return TimelineEvent(self, enable_timing)

    def Stream(self):
        return TimelineStream(self)

    def synchronize(self):
        self.sync("torch.cuda.synchronize")
        end = max(s.busy_until for s in self.streams)
        while time.perf_counter() < end:
            pass


class TimelineTorch(FakeTorch):
    def __init__(self, torch):
        super().__init__(torch)
        self.cuda = TimelineCuda()
