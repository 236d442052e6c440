"""On-disk cache of SGLang's answers to sglang_probe.py (seconds of CPU per launch saved).

One entry per launch, found by a sha256 of everything the answer depends on: the SGLang
python's path, the sglang / transformers / torch versions it imports and a signature of
the sglang distribution's installed files (its RECORD and every file's size and mtime:
a patch changes them, not the version), the probe script's bytes, the launch's SGLang
argument list, its working directory, every local file or directory that list names
(a model directory: bytes of its small files, config.json, generation_config.json,
quantization configs, ...; name, size and mtime of weights) and the environment
variables SGLang or transformers could read. Only that hash and SGLang's answer are
stored (no paths of the key, no environment values, secret-looking fields masked by
the probe: no secret can land in the cache). A failed probe is stored as failed, with
its error. A missing, corrupt or foreign entry is a miss; writes are atomic.
EAGLE_EXT_PROBE_CACHE=0 bypasses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from sgl_eagle_ext.common.server_argv import ServerArgv

BYPASS = "EAGLE_EXT_PROBE_CACHE"  # "0": always ask SGLang afresh (and store nothing)
FORMAT = 2  # 2: one entry per launch (its argument list), failures kept
BIG = 16 << 20  # files above this (weights) are keyed by name, size and mtime, not bytes
# Environment variables that can change what SGLang or transformers answer. Values are
# hashed into the key, never stored; names that look like secrets are left out.
ENV_PREFIXES = ("SGLANG_", "SGL_", "HF_", "TRANSFORMERS_", "HUGGINGFACE_", "PYTHON")
ENV_NAMES = ("VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH")
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "AUTH")


def enabled(env: Mapping[str, str] | None = None) -> bool:
    for source in (env or {}, os.environ):
        if source.get(BYPASS, "").strip().lower() in ("0", "off", "no", "false"):
            return False
    return True


def folder() -> Path:
    root = os.environ.get("EAGLE_EXT_CACHE", "~/.cache/sgl-eagle-ext")
    return Path(root).expanduser() / "sglang-probe"


def _dir_signature(path: str) -> list | None:
    """Every top-level file of a model directory: sha256 of small ones, stat of big ones.
    None when `path` is not a local directory (a hub id: not cached)."""
    p = Path(path)
    if not p.is_dir():
        return None
    out = []
    for f in sorted(p.iterdir()):
        try:
            st = f.stat()
        except OSError:
            continue  # a dangling link: SGLang cannot read it either
        if not f.is_file():
            out.append([f.name, "dir"])
        elif st.st_size > BIG:
            out.append([f.name, st.st_size, st.st_mtime_ns])
        else:
            out.append([f.name, hashlib.sha256(f.read_bytes()).hexdigest()])
    return out


def _env_part(env: Mapping[str, str]) -> dict:
    return {
        k: v
        for k, v in sorted(env.items())
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES)
        and not any(w in k.upper() for w in SECRET_WORDS)
        and k != BYPASS
    }


def _path_signature(token: str) -> list | None:
    """A local file or directory an argument names: its signature (None: not a path)."""
    if not token or token.startswith("-") or len(token) > 4096:
        return None
    p = Path(token).expanduser()
    try:
        if p.is_dir():
            return [os.path.realpath(p), _dir_signature(str(p))]
        if p.is_file():
            st = p.stat()
            sig = (
                [st.st_size, st.st_mtime_ns]
                if st.st_size > BIG
                else hashlib.sha256(p.read_bytes()).hexdigest()
            )
            return [os.path.realpath(p), sig]
    except OSError:
        return None
    return None


def key(
    python: str, installed: Mapping, probe: Path, argv: list[str], env: Mapping[str, str]
) -> str | None:
    """The entry's name for one launch, or None when its answer cannot be keyed."""
    if not installed.get("sglang") or "transformers" not in installed or not installed.get("src"):
        return None
    named = ServerArgv(argv)
    for flag in ("model-path", "speculative-draft-model-path"):
        given = named.value(flag)
        if given is not None and _path_signature(given) is None:
            return None  # a hub id: what it resolves to is not keyed here
    paths = {}
    for token in argv:
        for part in (token, token.partition("=")[2]):  # --flag=PATH too
            sig = _path_signature(part)
            if sig is not None:
                paths[part] = sig
    material = {
        "format": FORMAT,
        "python": python,
        "python_real": os.path.realpath(python),
        "installed": dict(installed),
        "probe": hashlib.sha256(probe.read_bytes()).hexdigest(),
        "argv": list(argv),
        "cwd": os.path.realpath(os.getcwd()),
        "paths": paths,
        "env": _env_part(env),
    }
    blob = json.dumps(material, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def load(name: str) -> tuple[dict, str] | None:
    """(SGLang's stored answer, when it was asked) or None (absent, unreadable, corrupt).
    A stored failure is {"version", "failed": why}."""
    try:
        entry = json.loads((folder() / f"{name}.json").read_text())
        if entry.get("format") != FORMAT or entry.get("key") != name:
            return None
        answer, when = entry["answer"], entry["asked_at"]
        if not isinstance(answer, dict) or not isinstance(answer.get("version"), str):
            return None
        if not isinstance(when, str):
            return None
        return answer, when
    except Exception:  # a corrupt entry is a miss: SGLang is asked again
        return None


def store(name: str, answer: dict) -> None:
    """Write the entry atomically (tmp + rename); a failure only costs the next probe."""
    entry = {
        "format": FORMAT,
        "key": name,
        "asked_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "answer": answer,
    }
    tmp = None
    try:
        d = folder()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, d / f"{name}.json")
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
