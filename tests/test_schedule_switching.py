"""TP ranks switch the step count at the same verify by construction
(in_sglang/schedule_control.Controller, common/schedule_file.py).

Two controllers in one process stand for TP ranks 0 and 1: fed the same verify
sequence in lockstep (ranks within schedule_file.SKEW verifies of each other, as
SGLang's scheduler keeps them), with requests written at random moments between
any two calls, under load and while idle. Every verify must see the same control
on both ranks. The same schedule with each rank reading the request itself (the
design before grants) is shown to disagree, so the scenario does reach the race.
No SGLang needed: the controller's bookkeeping is plain Python.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from sgl_eagle_ext.common import schedule_file
from sgl_eagle_ext.in_sglang import schedule_control as sc


class Direct:
    """The design before grants: each rank reads the request at each of its verifies."""

    def __init__(self, path):
        self.file = schedule_file.Cached(path, schedule_file.parse)
        self.n = 0

    def on_verify(self):
        self.n += 1
        return self.file.current()

    def on_idle(self):
        pass


def run(ranks, request, seed: int, verifies: int = 3000) -> list[dict[int, int | None]]:
    """Lockstep verifies with random skew, idle spells, and requests written at random
    moments; per rank: verify number -> the seq of the control in force (None: launch)."""
    rng = random.Random(seed)
    seen: list[dict[int, int | None]] = [{} for _ in ranks]
    seq = 0
    while min(r.n for r in ranks) < verifies:
        if rng.random() < 0.05:  # the tuner writes: under load or idle, any moment
            seq += 1
            pin = rng.choice([None, 1, 2, 3])
            schedule_file.write_request(request, seq, **({"pin": pin} if pin else {}))
        lead = max(r.n for r in ranks)
        if rng.random() < 0.02 and ranks[0].n == lead:
            # rank 0 idles: every batch has finished on every rank (a batch needs all
            # ranks), so no rank is past it; a lagging rank may still be processing
            for _ in range(rng.randint(1, 5)):
                for r in ranks:
                    r.on_idle()
            continue
        i = rng.randrange(len(ranks))
        r = ranks[i]
        if r.n + 1 - min(x.n for x in ranks) > schedule_file.SKEW:
            continue  # SGLang's per-iteration broadcast holds a rank this far ahead
        ctl = r.on_verify()
        seen[i][r.n] = ctl.seq if ctl else None
    return seen


def disagreements(seen) -> list[int]:
    common = set(seen[0]) & set(seen[1])
    return sorted(n for n in common if seen[0][n] != seen[1][n])


def two_ranks(tmp_path):
    request = tmp_path / "schedule.json"
    ranks = [sc.Controller(str(request), rank_fn=lambda r=r: r) for r in (0, 1)]
    return request, ranks


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ranks_switch_at_the_same_verify(tmp_path, seed):
    request, ranks = two_ranks(tmp_path)
    seen = run(ranks, request, seed)
    assert not disagreements(seen)
    switches = sum(1 for n in range(2, 3000) if seen[0][n] != seen[0][n - 1])
    assert switches > 20  # the requests did take effect, many times
    grants = json.loads(Path(ranks[0].grants.path).read_text())["grants"]
    assert 0 < len(grants) <= schedule_file.HISTORY


def test_reading_the_request_on_every_rank_races(tmp_path):
    """The scenario above without grants: ranks disagree (the hang of issue 24)."""
    request = tmp_path / "schedule.json"
    seen = run([Direct(request), Direct(request)], request, seed=1)
    assert disagreements(seen)


def test_a_request_written_while_idle_applies_at_the_next_verify(tmp_path):
    request, (r0, r1) = two_ranks(tmp_path)
    r0.on_verify()  # rank 1 lags: still processing its verify 1 when rank 0 idles
    schedule_file.write_request(request, 5, pin=2)
    r1.on_idle()  # not rank 0: grants nothing
    assert r1.pending == []
    r0.on_idle()
    assert r1.on_verify() is None  # verify 1: the launch table on both
    assert r0.on_verify().pin == 2 and r1.on_verify().pin == 2  # verify 2: the pin


def test_under_load_a_request_applies_margin_verifies_later(tmp_path):
    request, (r0, r1) = two_ranks(tmp_path)
    schedule_file.write_request(request, 1, pin=3)
    got0 = [r0.on_verify() for _ in range(schedule_file.MARGIN + 1)]
    got1 = [r1.on_verify() for _ in range(schedule_file.MARGIN + 1)]
    assert [c and c.pin for c in got0] == [None] * schedule_file.MARGIN + [3]
    assert got1 == got0
    schedule_file.write_request(request, 2, pin=1)  # one grant pending at a time
    schedule_file.write_request(request, 3, pin=2)  # the newest request wins
    for _ in range(3 * schedule_file.MARGIN):
        r0.on_verify(), r1.on_verify()
    assert r0.in_force.seq == r1.in_force.seq == 3


def test_a_late_grant_is_said(tmp_path, caplog):
    request, (r0, r1) = two_ranks(tmp_path)
    caplog.set_level(logging.ERROR)
    lines = []
    sc.PATCHES.sink = lines.append
    try:
        schedule_file.write_request(request, 1, pin=2)
        r0.on_verify()  # granted for verify 1 + MARGIN
        for _ in range(schedule_file.MARGIN + 2):
            r0.on_verify()
        r1.n = schedule_file.MARGIN + 3  # a rank that somehow ran ahead unseen
        assert r1.on_verify().pin == 2
    finally:
        sc.PATCHES.sink = sc._line
    assert any("rank 1 read the grant for seq 1" in ln and "switches late" in ln for ln in lines)


def test_rank0_removes_a_stale_grants_file(tmp_path):
    request, (r0, r1) = two_ranks(tmp_path)
    stale = schedule_file.grant_path(request, sc._group())
    schedule_file.write_grants(stale, [schedule_file.Grant(2, schedule_file.Control(9, pin=1))])
    r0.on_verify()
    assert not stale.exists()


def test_request_format_round_trip_and_refusals(tmp_path):
    path = tmp_path / "s.json"
    ctl = schedule_file.write_request(path, 4, table="/t.json", initial_steps=2)
    assert schedule_file.parse(json.loads(path.read_text())) == ctl
    for bad in ({"pin": -1}, {"pin": True}, {"pin": 1, "table": "x"}, {"initial_steps": "2"}):
        with pytest.raises(ValueError):
            schedule_file.write_request(path, 5, **bad)
    assert schedule_file.parse(json.loads(path.read_text())) == ctl  # nothing written
    with pytest.raises(ValueError):
        schedule_file.parse_grants({"grants": [{"apply_at": 0, "control": {"seq": 1}}]})
