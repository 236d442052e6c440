"""Preset files: load, validate, resolve `extends` (launcher/plan.py renders them);
and write them (dumps/write: every preset file the project writes, e.g. tune live's).

A preset is a TOML file (the shipped ones live in `launch/`):

    description = "..."
    extends = "baseline"          # a shipped preset name, or a path to a .toml file
    hardware = "sm120"            # optional; enables the SM120 flag guard
    [server]                      # SGLang flags without dashes, classic names
    tp-size = 8                   # true -> bare flag; false -> not passed
    [env]                         # environment of the server and every rank
    NCCL_PROTO = "LL"
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError

# The top-level launch/ folder, shipped in the wheel (symlink launcher/preset_files).
PRESET_DIR = resources.files("sgl_eagle_ext.launcher") / "preset_files"
TOP_LEVEL_KEYS = {"description", "extends", "hardware", "server", "env"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_EXTENDS = 32  # files in one `extends` chain


@dataclass
class Preset:
    name: str
    source: str  # the file it was read from (the most derived one)
    description: str = ""
    hardware: str | None = None
    server: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    chain: list[str] = field(default_factory=list)  # files, base first

    @property
    def speculative(self) -> bool:
        return bool(self.server.get("speculative-algorithm"))

    def merged_with(self, overlay: Preset) -> Preset:
        """This preset with `overlay`'s values on top (used for the CPU overlay)."""
        return Preset(
            name=f"{self.name}+{overlay.name}",
            source=self.source,
            description=self.description,
            # an overlay that names no hardware keeps the preset's flag guard; "" drops it
            hardware=self.hardware if overlay.hardware is None else (overlay.hardware or None),
            server={**self.server, **overlay.server},
            env={**self.env, **overlay.env},
            chain=self.chain + overlay.chain,
        )


def shipped() -> dict[str, Path]:
    """Shipped preset names -> files."""
    return {
        p.name[: -len(".toml")]: Path(str(p))
        for p in PRESET_DIR.iterdir()
        if p.name.endswith(".toml")
    }


def load(name: str | None = None, path: str | Path | None = None) -> Preset:
    """Load a shipped preset by name, or a user file by path, with its `extends` chain."""
    if path is not None:
        return _load_file(Path(path), seen=())
    files = shipped()
    if name not in files:
        raise UserError(
            f"unknown preset '{name}' (shipped presets: {', '.join(sorted(files))}).",
            fix="pick one of those, or pass your own file with --preset-file PATH",
        )
    return _load_file(files[name], seen=())


def _read_toml(file: Path) -> dict:
    try:
        text = safe_files.read_text("preset file", file, missing_raises=True)
    except FileNotFoundError:
        raise UserError(
            f"preset file {file} does not exist.",
            fix="check the path given to --preset-file or to 'extends'",
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"preset file {file} cannot be read: {e}.") from None
    try:
        return nesting.toml_loads(text)
    except (nesting.TooDeep, RecursionError):
        raise UserError(
            f"preset file {file}: nested too deeply.", fix="a preset holds flat tables only"
        ) from None
    except tomllib.TOMLDecodeError as e:  # its message names line and column
        raise UserError(
            f"preset file {file}: invalid TOML: {e}.", fix="correct the TOML syntax at that line"
        ) from None


def _load_file(file: Path, seen: tuple[Path, ...]) -> Preset:
    try:
        file = file.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symbolic-link loop (3.11)
        raise UserError(
            f"preset file {file}: cannot be resolved ({e}).",
            fix="check the path (a symbolic link that points to itself?)",
        ) from None
    if len(seen) >= MAX_EXTENDS:
        raise UserError(
            f"preset file {seen[0]}: its 'extends' chain is deeper than {MAX_EXTENDS} files.",
            fix="flatten the chain (a preset rarely needs more than 2 or 3 levels)",
        )
    if file in seen:
        cycle = " -> ".join(str(p) for p in (*seen, file))
        raise UserError(
            f"preset files extend each other in a cycle: {cycle}.",
            fix="remove one of the 'extends' lines",
        )
    data = _read_toml(file)
    _validate(file, data)

    base = None
    if "extends" in data:
        base = _load_file(_extends_target(file, data["extends"]), seen=(*seen, file))
    name = file.name[: -len(".toml")] if file.name.endswith(".toml") else file.name
    server = {**(base.server if base else {}), **data.get("server", {})}
    env = {**(base.env if base else {}), **{k: str(v) for k, v in data.get("env", {}).items()}}
    return Preset(
        name=name,
        source=str(file),
        description=data.get("description", base.description if base else ""),
        hardware=data.get("hardware", base.hardware if base else None),
        server=server,
        env=env,
        chain=(base.chain if base else []) + [str(file)],
    )


def _extends_target(file: Path, target: str) -> Path:
    if target.endswith(".toml") or "/" in target:
        return (file.parent / target).resolve()
    files = shipped()
    if target not in files:
        raise UserError(
            f"preset file {file}: field 'extends' names '{target}', which is neither a shipped "
            f"preset ({', '.join(sorted(files))}) nor a .toml path.",
            fix="use a shipped preset name or a path relative to this file",
        )
    return files[target]


# SGLang flags that take several whole numbers (nargs="+"), in classic spelling
LIST_FLAGS = frozenset({"cuda-graph-bs", "cuda-graph-bs-prefill"})


def _validate(file: Path, data: dict) -> None:
    def bad(where: str, what: str, fix: str) -> UserError:
        return UserError(f"preset file {file}: {where}: {what}.", fix=fix)

    unknown = set(data) - TOP_LEVEL_KEYS
    if unknown:
        raise bad(
            f"field '{sorted(unknown)[0]}'",
            "unknown top-level field",
            f"use only {', '.join(sorted(TOP_LEVEL_KEYS))}",
        )
    for key in ("description", "extends", "hardware"):
        if key in data and not isinstance(data[key], str):
            raise bad(f"field '{key}'", "must be a string", f'write {key} = "..."')
    for table in ("server", "env"):
        if table in data and not isinstance(data[table], dict):
            raise bad(f"'{table}'", "must be a table", f"write [{table}] on its own line")
    for key, value in data.get("server", {}).items():
        if not FLAG_NAME.match(key):
            raise bad(
                f"[server] '{key}'",
                "is not a flag name",
                "write SGLang flags without leading dashes, e.g. tp-size = 8",
            )
        # a list of whole numbers, for a flag that takes several (cuda-graph-bs = [1, 2, 4])
        is_list = (
            key in LIST_FLAGS
            and isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        )
        if not isinstance(value, (str, int, float, bool)) and not (is_list and value):
            raise bad(
                f"[server] '{key}'",
                f"has a {type(value).__name__} value",
                "use a string, number or true/false"
                + (" (or a list of whole numbers)" if key in LIST_FLAGS else ""),
            )
    for key, value in data.get("env", {}).items():
        if not ENV_NAME.match(key):
            raise bad(
                f"[env] '{key}'",
                "is not a valid environment variable name",
                "use letters, digits and underscores",
            )
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise bad(
                f"[env] '{key}'",
                "must be a string or a number",
                f'write {key} = "1" (environment values are strings)',
            )
        if "\x00" in str(value):  # no process environment can hold it
            raise bad(f"[env] '{key}'", "holds a NUL character", "remove the \\u0000")


# -- writing -----------------------------------------------------------------------------


_ESCAPES = {'"': '\\"', "\\": "\\\\"}


def _toml_string(text: str) -> str:
    """A TOML basic string: quote and backslash escaped, control characters as \\uXXXX."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    raise ValueError(f"a preset value is a string, a number or true/false, not {value!r}")


def dumps(
    *,
    comment: str = "",
    description: str | None = None,
    extends: str | None = None,
    server: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """A preset file's text (the format above). `comment` heads the file; `notes` puts a
    comment line above a [server] or [env] key. Read back before it is returned: what a
    caller writes is what the launcher reads."""
    notes = notes or {}
    top = {"description": description, "extends": extends}
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"{k} = {_toml_value(v)}" for k, v in top.items() if v is not None]
    for table, values in (("server", server), ("env", env)):
        if values:
            lines.append(f"[{table}]")
            for key, value in values.items():
                if key in notes:
                    lines.append(f"# {notes[key]}")
                lines.append(f"{key} = {_toml_value(value)}")
    text = "\n".join(lines) + "\n"
    expected = {k: v for k, v in top.items() if v is not None}
    expected |= {t: dict(v) for t, v in (("server", server), ("env", env)) if v}
    if tomllib.loads(text) != expected:  # a bug here, never the caller's input
        raise ValueError(f"preset text does not read back as written:\n{text}")
    return text


def write(path: Path, inside: Path | None = None, flag: str = "--out", **fields) -> Path:
    """Write dumps(**fields) to `path` through the checked writer (common/paths.py: a
    regular file or absent, inside the tree `inside` when given, one atomic rename)."""
    from sgl_eagle_ext.common import paths

    return paths.write_text(flag, path, dumps(**fields), inside=inside)
