"""The draft's catch-up after 0-step cycles (in_sglang/draft_catchup.py): its switch, where
it refuses (one line each, SGLang's per-cycle draft-extend kept, SGLang's skip variable
untouched), install and uninstall against SGLang 0.5.23's own worker classes, and the
run-time fail-closed path. That the catch-up is exact (the draft resumes as if it had
never stopped) is tested in a real server: tests/test_chain_verify_server.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.in_sglang import draft_catchup

SKIP = releases.DraftCatchup().skip_env


def args(**over):
    base = dict(
        disable_overlap_schedule=True,
        enable_mixed_chunk=False,
        speculative_use_rejection_sampling=False,
        speculative_eagle_topk=1,
    )
    return SimpleNamespace(**{**base, **over})


class Req:  # SGLang's Req is weakly referenced (the kept positions die with it)
    rid = "r1"


@pytest.fixture
def lines(monkeypatch):
    said = []
    monkeypatch.setattr(draft_catchup.PATCHES, "sink", said.append)
    monkeypatch.delenv(SKIP, raising=False)
    yield said
    draft_catchup.uninstall()


@pytest.mark.parametrize("text, keep", [("", None), ("0", None), ("1", 64), ("16", 16)])
def test_switch_values(text, keep):
    assert draft_catchup.parse(text) == keep


@pytest.mark.parametrize("text", ["yes", "-4", "5000", "1.5"])
def test_bad_switch_values_are_refused(text, lines):
    with pytest.raises(ValueError):
        draft_catchup.parse(text)
    assert draft_catchup.install_from_env({"EAGLE_EXT_DRAFT_CATCHUP": text}, args()) is False
    assert len(lines) == 1 and "EAGLE_EXT_DRAFT_CATCHUP" in lines[0]
    assert SKIP not in os.environ


@pytest.mark.parametrize(
    "over, words",
    [
        ({"disable_overlap_schedule": False}, "overlap scheduler"),
        ({"enable_mixed_chunk": True}, "--enable-mixed-chunk"),
        ({"speculative_use_rejection_sampling": True}, "rejection sampling"),
        ({"speculative_eagle_topk": 4}, "topk > 1"),
    ],
)
def test_where_it_cannot_keep_exactly_it_stays_off_with_one_line(lines, over, words):
    assert draft_catchup.install(64, args(**over), version="0.5.23") is False
    assert len(lines) == 1 and words in lines[0] and "per-cycle draft-extend stays" in lines[0]
    assert not draft_catchup.PATCHES.installed and SKIP not in os.environ


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.21", "0.4.0"])
def test_a_release_without_the_row_is_refused_with_one_line(lines, version):
    assert draft_catchup.install(64, args(), version=version) is False
    assert len(lines) == 1 and not draft_catchup.PATCHES.installed
    assert SKIP not in os.environ


@pytest.mark.harness
def test_install_sets_sglangs_skip_and_uninstall_restores_everything(lines, monkeypatch):
    """Against the installed SGLang 0.5.23's own classes (the harness venv)."""
    pytest.importorskip("sglang")
    from sglang.srt.speculative import eagle_worker_v2 as v2

    before = (
        vars(v2.EAGLEWorkerV2)["_stub_skipped_draft_extend"],
        vars(v2.EagleDraftWorker)["draft"],
        vars(v2.EagleDraftWorker)["_draft_extend_for_prefill"],
    )
    monkeypatch.setenv(SKIP, "0")  # a value of the user's: given back as it was
    assert draft_catchup.install(8, args(), version="0.5.23") is True
    assert draft_catchup.install(8, args(), version="0.5.23") is True  # idempotent
    assert os.environ[SKIP] == "1"
    assert vars(v2.EagleDraftWorker)["draft"] is not before[1]
    assert len(lines) == 1 and "on (" in lines[0] and "8 kept positions" in lines[0]
    draft_catchup.uninstall()
    assert os.environ[SKIP] == "0"
    after = (
        vars(v2.EAGLEWorkerV2)["_stub_skipped_draft_extend"],
        vars(v2.EagleDraftWorker)["draft"],
        vars(v2.EagleDraftWorker)["_draft_extend_for_prefill"],
    )
    assert after == before


def test_a_failure_at_run_time_is_one_line_and_sglangs_path(lines, monkeypatch):
    """A catch-up that raises must not take the rank down: one line, no traceback,
    SGLang's own skip switched back off (the per-cycle draft-extend runs again), the
    draft step itself still runs."""
    monkeypatch.setitem(draft_catchup._state, "skip_env", SKIP)
    monkeypatch.setitem(draft_catchup._state, "skip_was", None)
    os.environ[SKIP] = "1"
    req = Req()
    draft_catchup._kept[req] = draft_catchup._Kept(5, [object()], [object()])
    batch = SimpleNamespace(
        reqs=[req],
        forward_mode=SimpleNamespace(is_idle=lambda: False),
        seq_lens_cpu=None,  # what _catch_up cannot read: it raises
        spec_info=None,
    )
    ran = []
    out = draft_catchup._before_draft(lambda b: ran.append(b) or "drafted", None, (batch,), {})
    assert out == "drafted" and ran == [batch]
    assert len(lines) == 1 and "off from now on (TypeError" in lines[0]
    assert SKIP not in os.environ and not draft_catchup._kept
