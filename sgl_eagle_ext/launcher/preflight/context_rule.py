"""SGLang's context-length rule (get_context_length), applied to a config.json dict.

SGLang derives a model's context length from its hf_text_config: the first of
KEYS present, times rope_scaling["factor"] -- except that the factor counts as 1
when rope_scaling has original_max_position_embeddings or rope_type "llama3";
2048 when no key is present. Every supported release has this rule.

`rule_for(pkg)` runs the release's own function, compiled from its source file
without importing SGLang (importing it needs torch and more, and may fail on a
machine that only prepares a launch); `derive` is our reimplementation, used
when that source is not at hand. tests/test_preflight.py checks they agree.

SGLang sees the config through transformers 5 (all supported releases pin it),
where `rope_scaling` is an alias of `rope_parameters`, a legacy "type" key is
also stored as "rope_type", and yarn/llama3/longrope always carry
original_max_position_embeddings (filled from max_position_embeddings when the
file has none, so their factor never multiplies); ConfigView reproduces that.
tests/test_oracle.py checks it against ModelConfig under each harness release.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import releases

KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
FALLBACK = 2048
# Rope types whose original_max_position_embeddings transformers 5 always sets.
FILLS_ORIGINAL = ("llama3", "yarn", "longrope")
# Where the rule lives in each release's `sglang` package (Release.context_rule_file),
# newest layout first: `pkg` may be any release's source.
RULE_FILES = tuple(dict.fromkeys(r.context_rule_file for r in reversed(releases.RELEASES)))


def rope_view(cfg: dict) -> dict | None:
    """The rope dict SGLang reads as `config.rope_scaling` under transformers 5."""
    rope = cfg.get("rope_parameters")
    if not isinstance(rope, dict) or not rope:
        rope = cfg.get("rope_scaling")
    if not isinstance(rope, dict):
        return None
    rope = dict(rope)
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope["type"]
    if rope.get("rope_type") in FILLS_ORIGINAL:
        # transformers 5 (standardize_rope_params) moves a top-level
        # original_max_position_embeddings into these rope types, else fills it from
        # max_position_embeddings: SGLang then counts their factor as 1.
        if "original_max_position_embeddings" in cfg:
            rope["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        elif "max_position_embeddings" in cfg:
            rope.setdefault("original_max_position_embeddings", cfg["max_position_embeddings"])
    return rope


class ConfigView:
    """Attribute access to a config dict, as a transformers config object gives it."""

    def __init__(self, cfg: dict):
        self._cfg = cfg

    def __getattr__(self, name: str):
        if name == "rope_scaling":
            return rope_view(self._cfg)
        try:
            return self._cfg[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Derivation:
    value: int
    key: str | None  # the field the value came from (None: the 2048 fallback)
    raw: int | float | None
    factor: float

    def explain(self) -> str:
        if self.key is None:
            return f"none of {', '.join(KEYS)} is set: SGLang assumes {FALLBACK}"
        if self.factor == 1:
            return f"{self.key} {self.raw}"
        return f"{self.key} {self.raw} x rope factor {self.factor:g} = {self.value}"


def factor(cfg: dict) -> float:
    rope = rope_view(cfg)
    if not rope:
        return 1
    if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
        return 1  # these scalings already count the extension in the position field
    return rope.get("factor", 1)


def derive(cfg: dict) -> Derivation:
    """Our reimplementation of SGLang's rule, with where the value came from."""
    f = factor(cfg)
    for key in KEYS:
        if cfg.get(key) is not None:
            return Derivation(int(f * cfg[key]), key, cfg[key], f)
    return Derivation(FALLBACK, None, None, f)


def field_for(cfg: dict) -> str:
    """The field that sets the context limit (the one to raise in an overlay)."""
    return derive(cfg).key or "max_position_embeddings"


def raised(cfg: dict, length: int) -> dict:
    """A copy of `cfg` whose derived context length is at least `length`."""
    out = dict(cfg)
    key, f = field_for(cfg), factor(cfg) or 1
    out[key] = math.ceil(length / f)
    while int(f * out[key]) < length:  # float rounding
        out[key] += 1
    return out


@functools.cache
def rule_for(pkg: Path | None) -> Callable[[object], int] | None:
    """SGLang's own get_context_length from the `sglang` package at `pkg`, or None."""
    if pkg is None:
        return None
    for rel in RULE_FILES:
        file = Path(pkg) / rel
        try:
            tree = ast.parse(file.read_text(encoding="utf-8-sig"), str(file))
        except (OSError, SyntaxError, ValueError):
            continue
        wanted = [
            n
            for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name == "get_context_length")
            or (
                isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "CONTEXT_LENGTH_KEYS" for t in n.targets)
            )
        ]
        if len(wanted) != 2:
            continue
        namespace: dict = {}
        exec(compile(ast.Module(body=wanted, type_ignores=[]), str(file), "exec"), namespace)
        return namespace["get_context_length"]
    return None


def context_length(cfg: dict, pkg: Path | None = None) -> tuple[int, str]:
    """(derived length, which rule computed it)."""
    rule = rule_for(pkg)
    if rule is not None:
        try:
            return int(rule(ConfigView(cfg))), f"SGLang's own get_context_length ({pkg})"
        except Exception:  # a newer function body needing more of its module: ours
            pass
    return derive(cfg).value, "sgl-eagle-ext's reimplementation of SGLang's rule"
