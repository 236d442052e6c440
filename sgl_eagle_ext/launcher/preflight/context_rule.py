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
# transformers' config classes give a config without a length key their class default
# (SGLang reads the attribute, so 2048 applies only to classes without one). Every
# default is a max_position_embeddings; tests/test_oracle.py checks this table against
# the config classes of each harness release's transformers.
CLASS_DEFAULT_LENGTH = {
    "apertus": 65536,
    "code_llama": 2048,
    "deepseek_v2": 2048,
    "deepseek_v3": 4096,
    "deepseek_v32": 4096,  # SGLang 0.5.23 loads it as its DeepSeek-V3 config
    "exaone_moe": 2048,
    "gemma3_text": 131072,
    "gemma4_text": 131072,
    "glm4_moe": 131072,
    "glm4_moe_lite": 202752,
    "glm_moe_dsa": 202752,
    "gpt_oss": 131072,
    "llama": 2048,
    "llama4_text": 131072,
    "longcat_flash": 131072,
    "mellum": 131072,
    "minimax_m2": 196608,
    "ministral3": 262144,
    "mistral": 131072,
    "phi3": 4096,
    "qwen2": 32768,
    "qwen2_5_vl_text": 32768,
    "qwen2_moe": 32768,
    "qwen3": 32768,
    "qwen3_5_text": 32768,
    "qwen3_5_moe_text": 32768,
    "qwen3_moe": 32768,
    "qwen3_next": 32768,
    "qwen3_vl_text": 128000,
    "qwen3_vl_moe_text": 128000,
}
# The text sub-config class of a nested config (its model_type when the file omits it).
TEXT_TYPE = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "kimi_k25": "deepseek_v3",
    "llama4": "llama4_text",
    "mistral3": "mistral",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
}
# Multimodal config classes that ignore text keys written at the top level: SGLang
# reads their text_config (class defaults when the file has none).
TOP_LEVEL_IGNORED = frozenset(
    {"gemma3", "gemma4", "gemma4_unified", "llama4", "qwen3_vl", "qwen3_vl_moe"}
)
TEXT_TYPE.update(gemma4_unified="gemma4_text")
# Config classes that keep a yarn/longrope dict as written (no original length filled
# in), so its factor multiplies.
NO_ROPE_FILL = frozenset({"longcat_flash", "qwen3_next"})
# Config classes whose length SGLang derives in ways these rules do not mirror: the
# dry-run verdict says it cannot predict them.
UNMIRRORED = frozenset({"glm5_next", "gemma4_unified_assistant"})
# Config classes that split rope per attention layer type (transformers 5: rope_parameters
# {"full_attention": {...}, "sliding_attention": {...}}): SGLang's rule then finds no
# top-level factor and counts 1. The classes differ per transformers release
# (Release.rope_per_layer_types); these are the text types of both harness pins.
# Rope types whose original_max_position_embeddings transformers 5 always sets.
FILLS_ORIGINAL = ("llama3", "yarn", "longrope")
# Where the rule lives in each release's `sglang` package (Release.context_rule_file),
# newest layout first: `pkg` may be any release's source.
RULE_FILES = tuple(dict.fromkeys(r.context_rule_file for r in reversed(releases.RELEASES)))


def per_layer(rope: dict) -> bool:
    """A rope dict keyed by attention layer type (no top-level factor)."""
    return bool(rope) and all(isinstance(v, dict) for v in rope.values())


def rope_view(cfg: dict, split: bool = False, fills: bool = True) -> dict | None:
    """The rope dict SGLang reads as `config.rope_scaling` under transformers 5.
    split: the config class splits rope per layer type (a flat dict in the file
    becomes the full-attention entry)."""
    rope = cfg.get("rope_parameters")
    if not isinstance(rope, dict) or not rope:
        rope = cfg.get("rope_scaling")
    if not isinstance(rope, dict):
        return None
    if per_layer(rope):
        return dict(rope)
    rope = dict(rope)
    if split:
        return {"full_attention": rope, "sliding_attention": {"rope_type": "default"}}
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope["type"]
    if fills and rope.get("rope_type") in FILLS_ORIGINAL:
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
    default_of: str | None = None  # the config class whose default gave the value

    def explain(self) -> str:
        if self.key is None:
            return f"none of {', '.join(KEYS)} is set: SGLang assumes {FALLBACK}"
        raw = f"{self.key} {self.raw}"
        if self.default_of:
            raw = f"no length key: the {self.default_of} config class default {raw}"
        if self.factor == 1:
            return raw
        return f"{raw} x rope factor {self.factor:g} = {self.value}"


@dataclass(frozen=True)
class Loaded:
    """How a config's class shapes what SGLang reads: its text model_type, whether it
    splits rope per layer type (release-dependent), whether it fills yarn's original
    length, and whether the rules can mirror it at all."""

    model_type: str | None = None
    split_rope: bool = False
    fills_original: bool = True
    mirrored: bool = True


def loaded_as(config: dict | None, text: dict, split_types=frozenset()) -> Loaded:
    outer = (config or {}).get("model_type")
    own = None if text is config else text.get("model_type")
    mt = own or TEXT_TYPE.get(outer, outer)
    return Loaded(
        mt,
        mt in split_types,
        mt not in NO_ROPE_FILL,
        not ({mt, outer} & UNMIRRORED),
    )


def sglang_text(config: dict | None, text: dict) -> dict:
    """The text config SGLang reads: a multimodal class that ignores top-level text keys
    sees only its (default) text_config when the file has none."""
    if text is config and (config or {}).get("model_type") in TOP_LEVEL_IGNORED:
        return {}
    return text


def factor(cfg: dict, how: Loaded = Loaded()) -> float:
    rope = rope_view(cfg, how.split_rope, how.fills_original)
    if not rope:
        return 1
    if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
        return 1  # these scalings already count the extension in the position field
    return rope.get("factor", 1)


def derive(cfg: dict, how: Loaded = Loaded()) -> Derivation:
    """Our reimplementation of SGLang's rule, with where the value came from."""
    f = factor(cfg, how)
    for key in KEYS:
        if cfg.get(key) is not None:
            return Derivation(int(f * cfg[key]), key, cfg[key], f)
    default = CLASS_DEFAULT_LENGTH.get(how.model_type)
    if default is not None:
        return Derivation(int(f * default), "max_position_embeddings", default, f, how.model_type)
    return Derivation(FALLBACK, None, None, f)


def field_for(cfg: dict) -> str:
    """The field that sets the context limit (the one to raise in an overlay)."""
    for key in KEYS:
        if cfg.get(key) is not None:
            return key
    return "max_position_embeddings"


def raised(cfg: dict, length: int, how: Loaded = Loaded()) -> dict:
    """A copy of `cfg` whose derived context length is at least `length`."""
    out = dict(cfg)
    key, f = field_for(cfg), factor(cfg, how) or 1
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


def context_length(cfg: dict, pkg: Path | None = None, how: Loaded = Loaded()) -> tuple[int, str]:
    """(derived length, which rule computed it). With `pkg`: the release's own
    function compiled from its source, on ConfigView (tests compare it with ours)."""
    rule = rule_for(pkg)
    if rule is not None and how == Loaded():
        try:
            return int(rule(ConfigView(cfg))), f"SGLang's own get_context_length ({pkg})"
        except Exception:  # a newer function body needing more of its module: ours
            pass
    return derive(cfg, how).value, "sgl-eagle-ext's rule"
