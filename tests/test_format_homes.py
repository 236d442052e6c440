"""Formats with one home (issue 25): preset files the project writes go through the preset module's
writer (launcher/presets.py) and read back through the launcher's own reader; the chain
rule is one function (common/chain.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sgl_eagle_ext.common import chain, releases
from sgl_eagle_ext.launcher import presets
from sgl_eagle_ext.tools.tune import live, live_report

PACKAGE = Path(chain.__file__).resolve().parents[1]


@pytest.fixture
def odd_dir(tmp_path):
    """A folder whose name TOML must escape (a quote, a backslash, a non-ASCII letter)."""
    d = tmp_path / 'runs "A"\\é'
    d.mkdir()
    return d


def test_tune_lives_server_preset_reads_back_through_the_launcher(odd_dir):
    path = live.live_preset(None, odd_dir, levels=[1, 4], steps=[0, 1, 3])
    p = presets.load(path=path)
    assert p.server["speculative-num-steps"] == 3
    assert p.server["speculative-num-draft-tokens"] == 4  # the chain rule
    assert p.server["speculative-adaptive"] is True
    # the run's batch limits are arguments every server of the run shares (server_pins)
    pins = live.server_pins([1, 4], releases.resolve(None)[0], False, [])
    assert pins[pins.index("--max-running-requests") + 1] == "4"
    assert Path(p.server["speculative-adaptive-config"]).parent == odd_dir.resolve()
    assert p.env["EAGLE_EXT_SCHEDULE_FILE"] == str((odd_dir / "schedule.json").resolve())
    assert p.chain[-2].endswith("eagle3-adaptive.toml")  # extends the shipped preset


def test_the_baseline_arm_and_the_recommended_preset_read_back(odd_dir):
    user = presets.write(odd_dir / "mine.toml", extends="eagle3-3step", server={"tp-size": 2})
    base = presets.load(path=live.arm_preset(user, odd_dir, "baseline"))
    assert base.server["tp-size"] == 2 and base.server["speculative-algorithm"] is False
    cells = [
        {"level": 1, "steps": s, "client": {"output_tok_s": t}, "profile": {"accept_len": 2.0}}
        for s, t in ((0, 10.0), (2, 13.0))
    ]
    _, text = live_report.recommended_fixed(cells, str(user))
    rec = odd_dir / "rec.toml"
    rec.write_text(text)
    p = presets.load(path=rec)
    assert (p.server["speculative-num-steps"], p.server["speculative-num-draft-tokens"]) == (2, 3)
    assert p.server["tp-size"] == 2  # from the user's preset it extends


def test_the_writer_refuses_what_a_preset_cannot_hold():
    with pytest.raises(ValueError):
        presets.dumps(server={"x": [1, 2]})
    with pytest.raises(ValueError):
        presets.dumps(server={"x": float("nan")})
    assert presets.dumps(env={"A": "a\nb\x00"}) == '[env]\nA = "a\\u000ab\\u0000"\n'


def test_the_chain_rule_is_written_once():
    assert [chain.draft_tokens(s) for s in (1, 3, 5)] == [2, 4, 6]
    assert all(chain.steps_of(chain.draft_tokens(s)) == s for s in range(8))
    # no other module adds or subtracts 1 between a chain's steps and its draft tokens
    pattern = re.compile(r"(draft[-_]tokens[^\n#]*[+-] ?1\b|steps \+ 1\}|s \+ 1\})")
    found = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("chain.py", "sglang_probe.py") and "standin" not in p.parts
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []
