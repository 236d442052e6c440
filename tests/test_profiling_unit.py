"""Profiling parts without a server: clocks never wait, cycles resolve only when
complete, window figures, config, and the instrumentor against the installed
SGLang's real classes (patch, idempotence, revert, fail closed)."""

from __future__ import annotations

import logging

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.profiling import names, phases
from sgl_eagle_ext.profiling.recorder import config, instrument, window
from sgl_eagle_ext.profiling.recorder.clock import CudaEventClock
from sgl_eagle_ext.profiling.recorder.cycles import CycleTracker
from sgl_eagle_ext.profiling.recorder.profiler import Profiler


class FakeEvent:
    """A device event whose completion the test controls. It has no
    synchronize(): any attempt to wait on it fails the test."""

    def __init__(self, clock):
        self.clock, self.t, self.done = clock, None, False

    def record(self):
        self.t, self.done = self.clock.now, False
        self.clock.recorded.append(self)

    def query(self):
        return self.done

    def elapsed_time(self, end):
        assert self.done and end.done, "elapsed_time on an event that has not completed"
        return end.t - self.t


class FakeTorch:
    """Just enough of `torch` for CudaEventClock."""

    def __init__(self):
        outer = self
        self.now, self.capturing, self.recorded = 0.0, False, []

        class cuda:
            @staticmethod
            def is_current_stream_capturing():
                return outer.capturing

            @staticmethod
            def Event(enable_timing):
                assert enable_timing
                return FakeEvent(outer)

        self.cuda = cuda

    def complete_all(self):
        for e in self.recorded:
            e.done = True


def run_cycle(tracker, fake, bs=2, draft_tokens=4, spans=(1.0, 20.0, 1.5, 2.0)):
    """One decode cycle with draft/verify_fwd/accept/draft_extend lasting `spans` ms."""
    tracker.begin("decode", bs, draft_tokens)
    for marks, dt in zip(
        (
            (phases.DRAFT_START, phases.DRAFT_END),
            (phases.FWD_START, phases.FWD_END),
            (None, phases.VERIFY_END),  # accept runs from the forward's end to verify's
            (phases.EXTEND_START, phases.EXTEND_END),
        ),
        spans,
    ):
        if marks[0]:
            tracker.mark(marks[0].name)
        fake.now += dt
        tracker.mark(marks[1].name)
    return tracker.end()


def test_cycle_resolves_only_when_device_done_and_accept_joined():
    fake = FakeTorch()
    tracker = CycleTracker(CudaEventClock(fake))
    cycle = run_cycle(tracker, fake)
    assert tracker.poll() == []  # events not complete: nothing read, nothing waited for
    fake.complete_all()
    assert tracker.poll() == []  # accept counts not joined yet (v2 overlap)
    cycle.accepted = [3, 1]
    assert tracker.poll() == []  # its gap is open: the next cycle has not started
    fake.now += 3.0  # host work between cycles
    nxt = run_cycle(tracker, fake)  # its start ends the gap, with an event of its own
    assert tracker.poll() == []  # that event has not completed
    fake.complete_all()
    (res,) = tracker.poll()
    assert res.ms["draft"] == 1.0 and res.ms["verify_fwd"] == 20.0
    assert res.ms["accept"] == 1.5 and res.ms["draft_extend"] == 2.0
    assert res.ms["step"] == pytest.approx(24.5) and res.ms["host"] == pytest.approx(3.0)
    assert res.ms["cycle"] == pytest.approx(27.5)  # wall: start to next start
    assert res.accepted == [3, 1] and res.bs == 2
    nxt.accepted = [1, 1]
    fake.now += 100.0  # the scheduler goes idle: the gap ends at its first idle call
    tracker.close_gap()
    fake.now += 5000.0  # waiting for requests is not host work
    tracker.begin("decode", 2, 4)
    fake.complete_all()
    (res,) = tracker.poll()
    assert res.ms["host"] == pytest.approx(100.0) and res.ms["cycle"] == pytest.approx(124.5)


def test_a_gap_closed_without_counting_has_no_host_time():
    fake = FakeTorch()
    tracker = CycleTracker(CudaEventClock(fake))
    run_cycle(tracker, fake).accepted = [2]
    fake.now += 7.0
    tracker.close_gap(counted=False)  # the window is forced out (the server stops)
    fake.complete_all()
    (res,) = tracker.poll()
    assert res.ms["host"] == 0.0 and res.ms["cycle"] == pytest.approx(24.5)


def test_events_are_reused_only_after_resolution():
    fake = FakeTorch()
    clock = CudaEventClock(fake)
    tracker = CycleTracker(clock)
    c = run_cycle(tracker, fake)
    tracker.close_gap()
    n = len(fake.recorded)
    c.accepted = [1, 1]
    assert clock._pool == []
    fake.complete_all()
    tracker.poll()
    assert len(clock._pool) == n


def test_nothing_recorded_during_cuda_graph_capture():
    fake = FakeTorch()
    tracker = CycleTracker(CudaEventClock(fake))
    fake.capturing = True
    assert run_cycle(tracker, fake) is None  # the cycle is dropped, not timed
    assert fake.recorded == [] and not tracker.pending


def test_window_summary_and_log_line():
    fake = FakeTorch()
    tracker = CycleTracker(CudaEventClock(fake))
    for accepted in ([3, 3], [2, 1], [3, 1]):
        run_cycle(tracker, fake).accepted = accepted
        fake.now += 1.0  # host work until the next cycle (or the idle call)
    tracker.close_gap()
    fake.complete_all()
    rec = window.summarize(tracker.poll(), rank=0, clock="cuda")
    assert rec.cycles == 3 and rec.bs == {2: 3}
    assert rec.accept_len == pytest.approx(13 / 6)
    assert rec.accept_hist == {3: 3, 2: 1, 1: 2}
    assert rec.tok_s == pytest.approx(1000 * 13 / (3 * 25.5))  # wall time, host included
    assert rec.phases["cycle"].mean == pytest.approx(25.5)
    assert rec.phases["host"].mean == pytest.approx(1.0)
    shares = sum(
        rec.phases[p].share for p in ("draft", "verify_fwd", "accept", "draft_extend", "other")
    )
    assert shares + rec.phases["host"].share == pytest.approx(100)
    line = window.log_line(rec)
    fields = dict(tok.split("=", 1) for tok in line.split()[1:])
    assert line.startswith(names.TAG + " v=2 ")
    assert fields["verify_fwd_ms"] == "20.00/20.00/20.00"
    assert fields["host_ms"] == "1.00/1.00/1.00"
    assert fields["accept_len"] == "2.17" and fields["bs"] == "2:3"
    assert fields["share"].startswith("draft:3.9,verify_fwd:78.4,")
    assert fields["share"].endswith(",host:3.9")


def test_profiler_windows_by_cycle_count_and_rank_filter(caplog):
    fake = FakeTorch()
    cfg = config.from_env({names.ENV: "1", names.ENV_CYCLES: "2"})
    prof = Profiler(cfg, CudaEventClock(fake), rank_fn=lambda: 0)
    caplog.set_level(logging.INFO, logger=names.LOGGER)
    for _ in range(4):
        c = prof.begin("decode", 1, 4)
        prof.end()
        prof.join(c, [2])
        fake.complete_all()
    prof.poll()  # 3 cycles resolved (the 4th waits for its gap to end)
    lines = [r.message for r in caplog.records if r.message.startswith(names.TAG + " ")]
    # the process's first decode cycle alone (JIT compilation), then windows of 2
    assert len(lines) == 2 and "cycles=1" in lines[0] and "cycles=2" in lines[1]
    other = Profiler(config.from_env({names.ENV: "1"}), CudaEventClock(fake), rank_fn=lambda: 3)
    assert other.begin("decode", 1, 4) is None and not other.active


def test_config_parsing():
    c = config.from_env(
        {
            names.ENV: "1",
            names.ENV_RANKS: "all",
            names.ENV_INTERVAL_S: "2.5",
            names.ENV_FILE: "/x/{rank}",
        }
    )
    assert c.enabled and c.ranks is None and c.interval_s == 2.5 and c.profiles_rank(7)
    c = config.from_env({names.ENV_RANKS: "0,3"})
    assert not c.enabled and c.ranks == {0, 3} and not c.profiles_rank(1)


# -- the instrumentor on the installed SGLang's real classes ------------------------------
def anchored_methods():
    release, _ = releases.resolve(None)
    out = {}
    for worker in release.workers:
        for anchor in worker.anchors().values():
            owner, name, original = instrument.resolve_anchor(anchor)
            out[(owner, name)] = original
    return out


@pytest.fixture
def clean_instrumentation():
    instrument.uninstrument()
    yield
    instrument.uninstrument()


@pytest.mark.harness
def test_instrument_patches_every_anchor_and_reverts(clean_instrumentation):
    import wrapt

    originals = anchored_methods()
    cfg = config.from_env({names.ENV: "1"})
    assert instrument.instrument(cfg, device_is_cuda=False)
    for (owner, name), original in originals.items():
        assert isinstance(vars(owner)[name], wrapt.FunctionWrapper), (owner, name)
        assert vars(owner)[name].__wrapped__ is original
    assert instrument.instrument(cfg, device_is_cuda=False)  # idempotent: no double wrap
    for (owner, name), original in originals.items():
        assert vars(owner)[name].__wrapped__ is original
    instrument.uninstrument()
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original


@pytest.mark.harness
def test_variable_unset_patches_nothing(clean_instrumentation, monkeypatch):
    from sgl_eagle_ext.profiling import recorder as profiling

    monkeypatch.delenv(names.ENV, raising=False)
    originals = anchored_methods()
    assert profiling.install_from_env() is False
    assert not instrument.is_instrumented()
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original


@pytest.mark.harness
def test_unknown_release_fails_closed(clean_instrumentation, caplog):
    originals = anchored_methods()
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    assert not instrument.instrument(
        config.from_env({names.ENV: "1"}), version="0.5.22", device_is_cuda=False
    )
    assert [r.message for r in caplog.records if "0.5.22" in r.message]
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original


@pytest.mark.harness
def test_missing_anchor_fails_closed(clean_instrumentation, caplog, monkeypatch):
    import dataclasses

    originals = anchored_methods()
    release, _ = releases.resolve(None)
    broken = dataclasses.replace(
        release.workers[0], draft_extend=release.workers[0].draft_extend + "_renamed"
    )
    monkeypatch.setattr(
        releases,
        "BY_VERSION",
        {**releases.BY_VERSION, release.version: dataclasses.replace(release, workers=(broken,))},
    )
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    assert not instrument.instrument(config.from_env({names.ENV: "1"}), device_is_cuda=False)
    (line,) = [r.message for r in caplog.records]
    assert "_draft_extend_for_decode_renamed" in line and release.version in line
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original
