"""On-disk cache of SGLang's answers to sglang_probe.py (seconds of CPU per launch saved).

One entry per launch, found by a sha256 of everything the answer depends on: the SGLang
python's path, the sglang / transformers / torch versions it imports and a signature of
the sglang distribution's installed files (its RECORD and every file's size and mtime:
a patch changes them, not the version), the probe script's bytes, the launch's SGLang
argument list, its working directory, every local file or directory that list names
(a model directory: bytes of its small files, config.json, generation_config.json,
quantization configs, ...; name, size and mtime of weights) and the environment
variables SGLang or transformers could read, and the visible GPUs. Only that hash and
SGLang's answer are stored (no paths of the key, no environment values, secret-looking
fields masked by the probe: no secret can land in the cache). A failed probe is stored as failed, with
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
FORMAT = 3  # 2: one entry per launch (its argument list), failures kept; 3: memory, host
BIG = 16 << 20  # files above this (weights) are keyed by name, size and mtime, not bytes
# Environment variables that can change what SGLang or transformers answer. Values are
# hashed into the key, never stored; names that look like secrets are left out.
ENV_PREFIXES = ("SGLANG_", "SGL_", "HF_", "TRANSFORMERS_", "HUGGINGFACE_", "PYTHON")
# The visible GPUs too: a GPU launch's resolution reads their memory, and torch reads
# the variable once, when CUDA starts (so one probe process cannot ask for two sets).
ENV_NAMES = (
    *("VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH"),
    *("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"),
    "EAGLE_EXT_PROBE_HOST",  # the GPU host SGLang resolves as on (preflight/hosts.py)
)
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "AUTH")
# The HTTP port is where a server listens, not an input of SGLang's resolution (no hook
# reads it): launches that differ only in it share one entry, and a hit is answered with
# the launch's own port (with_port). A restart on another free port asks SGLang once.
PORT_FLAG = "--port"
PORT_HOLDER = "<port>"


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


def looks_secret(name: str) -> bool:
    return any(w in name.upper() for w in SECRET_WORDS)


def env_part(env: Mapping[str, str]) -> dict:
    """The environment variables SGLang's answer can depend on (secret names left out)."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not looks_secret(k) and k != BYPASS
    }


def _path_signature(token: str, cwd: str) -> list | None:
    """A local file or directory an argument names, seen from the launch's working
    directory `cwd`: its signature (None: not a path)."""
    if not token or token.startswith("-") or len(token) > 4096:
        return None
    p = Path(cwd) / Path(token).expanduser()  # an absolute token stays itself
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


def _portless(argv: list[str]) -> list[str]:
    """The argument list with its port as a placeholder, at the end (one key for every
    spelling and place of `--port`)."""
    rest, port = ServerArgv(argv).without(PORT_FLAG)
    return list(argv) if port is None else [*rest, PORT_FLAG, PORT_HOLDER]


def with_port(answer: dict, argv: list[str]) -> dict:
    """A stored answer as SGLang gives it for this launch: its own `--port` in the
    resolved fields (the entry may have been stored by a launch on another port)."""
    port = ServerArgv(argv).value("port")
    fields = (answer.get("settings") or {}).get("fields")
    if port is None or not isinstance(fields, dict) or "port" not in fields:
        return answer
    try:
        value = int(port)
    except ValueError:
        return answer
    return {**answer, "settings": {**answer["settings"], "fields": {**fields, "port": value}}}


def key(
    python: str,
    installed: Mapping,
    probe: Path,
    argv: list[str],
    env: Mapping[str, str],
    cwd: str | None = None,
) -> str | None:
    """The entry's name for one launch (run in `cwd`, default this process's), or None
    when its answer cannot be keyed."""
    if not installed.get("sglang") or "transformers" not in installed or not installed.get("src"):
        return None
    cwd = os.path.realpath(cwd or os.getcwd())
    named = ServerArgv(argv)
    for flag in ("model-path", "speculative-draft-model-path"):
        given = named.value(flag)
        if given is not None and _path_signature(given, cwd) is None:
            return None  # a hub id: what it resolves to is not keyed here
    paths = {}
    for token in argv:
        for part in (token, token.partition("=")[2]):  # --flag=PATH too
            sig = _path_signature(part, cwd)
            if sig is not None:
                paths[part] = sig
    material = {
        "format": FORMAT,
        "python": python,
        "python_real": os.path.realpath(python),
        "installed": dict(installed),
        "probe": hashlib.sha256(probe.read_bytes()).hexdigest(),
        "argv": _portless(list(argv)),
        "cwd": cwd,
        "paths": paths,
        "env": env_part(env),
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
