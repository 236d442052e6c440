"""Read a model directory's config.json; every bad input becomes a finding, never a traceback."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, Finding

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# SGLang's get_hf_text_config: the language model's sub-config of a multimodal
# config, by priority (thinker_config holds its own text_config).
SUB_CONFIGS = ("thinker_config", "llm_config", "language_config", "text_config")


@dataclass
class ModelDir:
    role: str  # "target" or "draft"
    flag: str  # the CLI flag it came from, for messages
    given: str
    path: Path | None = None
    config: dict | None = None
    text: dict = field(default_factory=dict)  # SGLang's hf_text_config
    text_prefix: str = ""  # "text_config." when nested

    @property
    def config_file(self) -> str:
        return str((self.path or Path(self.given)) / "config.json")

    @property
    def architecture(self) -> str | None:
        archs = (self.config or {}).get("architectures")
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    def finding(
        self,
        id_: str,
        severity: str,
        message: str,
        fix: str | None = None,
        key: str | None = None,
        text: bool = True,
        **data,
    ) -> Finding:
        """A finding about `key` of this config (in the text sub-config when `text`)."""
        dotted = (self.text_prefix if text else "") + key if key else None
        return Finding(id_, severity, message, fix, self.config_file, dotted, data=data)

    def number(
        self, key: str, *, required: bool = False, text: bool = True, why: str = ""
    ) -> tuple[int | float | None, Finding | None]:
        """A numeric field: (value, None), (None, None) if absent, or (None, finding)."""
        src = self.text if text else (self.config or {})
        value = src.get(key)
        if value is None:
            if not required:
                return None, None
            return None, self.finding(
                "config.missing-field",
                ERROR,
                f"the {self.role} config has no '{key}'{why}.",
                f"add {key} to {self.config_file} (copy it from the model's original config)",
                key,
                text,
            )
        if not is_number(value):
            return None, self.finding(
                "config.bad-field",
                ERROR,
                f"'{key}' is {value!r}, not a finite number.",
                f"set {key} to a number",
                key,
                text,
            )
        return value, None


def is_number(value) -> bool:
    """A JSON number SGLang can compute with: Python's json reads NaN and Infinity,
    and every comparison with NaN is false, so it would pass any range check."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _hub_cache_dir(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    hit = try_to_load_from_cache(repo_id, "config.json")
    return Path(hit).parent if isinstance(hit, str) else None


def text_config(config: dict) -> tuple[dict, str]:
    """(SGLang's hf_text_config, its dotted prefix) for a parsed config.json."""
    archs = config.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if first.startswith("Llava") and first.endswith("ForCausalLM"):
        return config, ""  # SGLang reads these at the top level
    for name in SUB_CONFIGS:
        sub = config.get(name)
        if isinstance(sub, dict):
            if name == "thinker_config" and isinstance(sub.get("text_config"), dict):
                return sub["text_config"], "thinker_config.text_config."
            return sub, name + "."
    return config, ""


def load(role: str, flag: str, given: str | None) -> tuple[ModelDir, list[Finding]]:
    md = ModelDir(role, flag, given or "")
    if not given:
        return md, [
            Finding("config.missing-dir", ERROR, f"no {role} model given.", f"pass {flag} DIR")
        ]
    path = Path(given).expanduser()
    if not path.exists() and HUB_ID.match(given) and not given.startswith((".", "/", "~")):
        cached = _hub_cache_dir(given)
        if cached is None:
            return md, [
                Finding(
                    "config.not-local",
                    INFO,
                    f"{flag} {given} is a Hugging Face id that is not in the local "
                    f"cache: its config is not checked here.",
                    "download it first (huggingface-cli download) to have it checked",
                )
            ]
        path = cached
    if not path.exists():
        return md, [
            Finding(
                "config.missing-dir",
                ERROR,
                f"{flag} {given}: no such directory.",
                "check the path: the directory holding config.json and the weights",
                file=str(path),
            )
        ]
    if not path.is_dir():
        return md, [
            Finding(
                "config.missing-dir",
                ERROR,
                f"{flag} {given}: not a directory.",
                "give the model directory, not a file inside it",
                file=str(path),
            )
        ]
    md.path = path
    cfg_file = path / "config.json"
    try:
        raw = safe_files.read_text("", cfg_file, missing_raises=True)
    except UserError as e:
        return md, [Finding("config.unreadable", ERROR, e.message, e.fix, file=str(cfg_file))]
    except FileNotFoundError:
        return md, [
            Finding(
                "config.missing-file",
                ERROR,
                f"the {role} directory has no config.json.",
                "point the flag at the model directory itself",
                file=str(cfg_file),
            )
        ]
    except (OSError, UnicodeDecodeError) as e:
        return md, [
            Finding(
                "config.unreadable",
                ERROR,
                f"cannot read the {role} config: {e}.",
                "check the file's permissions and encoding (UTF-8 JSON)",
                file=str(cfg_file),
            )
        ]
    try:
        config = nesting.json_loads(raw)
    except (ValueError, RecursionError) as e:  # also: nested too deep, a 5000-digit number
        where = (
            f"{e.msg} at line {e.lineno} column {e.colno}"
            if isinstance(e, json.JSONDecodeError)
            else "nested too deeply"
            if isinstance(e, nesting.TooDeep | RecursionError)
            else str(e).split(";")[0]
        )
        return md, [
            Finding(
                "config.invalid-json",
                ERROR,
                f"not valid JSON: {where}.",
                "fix the JSON syntax (or restore the file from the model's source)",
                file=str(cfg_file),
            )
        ]
    if not isinstance(config, dict):
        return md, [
            Finding(
                "config.invalid-json",
                ERROR,
                f"the top level is a {type(config).__name__}, not an object.",
                "restore the file from the model's source",
                file=str(cfg_file),
            )
        ]
    md.config = config
    md.text, md.text_prefix = text_config(config)
    found = []
    if md.architecture is None:
        found.append(
            md.finding(
                "config.missing-field",
                ERROR,
                "no 'architectures' list: SGLang cannot pick a model class.",
                'add "architectures": ["<ModelClass>"]',
                "architectures",
                text=False,
            )
        )
    return md, found
