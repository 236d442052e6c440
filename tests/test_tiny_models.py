"""The tiny pair: built deterministically, and its target speaks the corpus.

One fresh build (~20 s on a CPU core) compared byte for byte with the session's
pair (tests/conftest.py builds it once per session).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import readable

from sgl_eagle_ext.cpu import tiny_models as tm


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


@pytest.mark.harness  # torch builds the tiny models
def test_build_is_deterministic(tiny_models, tmp_path):
    session = tiny_models["target"].parent
    fresh = Path(tm.build(tmp_path, force=True)["target"]).parent
    assert digests(fresh) == digests(session)
    assert session.name == f"v{tm.BUILD_VERSION}"  # a stale build is never reused


def test_readable_check_rejects_noise():
    assert readable(" Eagle. I am a small model that runs on the CPU.")
    assert not readable("'@ torickD~ccsist fox")  # the random target's kind of output
    assert not readable(" the \ufffd model")


@pytest.mark.harness  # torch builds the tiny models
def test_target_continues_every_demo_prompt_with_readable_text(tiny_models):
    from tokenizers import Tokenizer

    root = tiny_models["target"].parent
    manifest = json.loads((root / "manifest.json").read_text())
    tok = Tokenizer.from_file(str(tiny_models["target"] / "tokenizer.json"))
    texts = [tok.decode(g["new_ids"][:16]) for g in manifest["greedy"]]
    assert len(texts) == len(tm.DEMO_PROMPTS)
    bad = [t for t in texts if not readable(t)]
    assert not bad, bad
    # and the drafts keep their designed order: mostly > partial > never
    for setting in ("3,1,4", "5,1,6", "2,4,16"):
        mean = {
            d: sum(v[setting]) / len(v[setting])
            for d, v in manifest["expected_accept_length"].items()
        }
        assert mean["draft-mostly"] > mean["draft-partial"] > mean["draft-never"], mean
        assert mean["draft-mostly"] >= 2.0 and mean["draft-never"] < 1.1, mean
