"""Ask the installed SGLang how it resolves several launches, in one subprocess.

Run as a file by the python that will start the servers (`python resolve_sglang.py
cases.json`); imports SGLang, the standard library and, as the server entry does before
SGLang, the project's in-server injection (the CPU harness's stand-ins). For each case
{"argv": [...], "env": {...}} it builds ServerArgs with SGLang's own parser
(prepare_server_args) under that environment, runs its resolution (resolve_once() where
the release has it, else the constructor's __post_init__ already did), and prints one
line `RESOLVED <json>`: a list of {"version", "fields", "changes", "error"} where
fields are the resolved values (nested configs flattened to dotted names, JSON values
only) and changes [field, before, after, hook] the ones SGLang set itself (the hook is
known from 0.5.19's declare_resolution record; "" before).

Used by launcher/fairness.py until the preflight's one question to SGLang answers it,
and by the tests as the oracle of the release table's predicted rules.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

TAG = "RESOLVED "


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(value.value, (str, int)):  # an Enum
        return value.value
    if hasattr(value, "__dict__") and type(value).__module__.startswith("sglang"):
        try:
            return _plain({k: v for k, v in vars(value).items() if not k.startswith("_")})
        except TypeError:
            pass
    return f"<{type(value).__name__}>"  # an object (a ModelConfig): equal for every arm


def _flat(fields: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in fields.items():
        if isinstance(v, dict) and v and all(isinstance(x, str) for x in v):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _as_the_server_entry() -> None:
    """What the server entry (in_sglang/serve.py) does before SGLang is imported, for
    this case's environment: on the CPU harness (EAGLE_EXT_CPU=1), the sgl_kernel
    stand-in and the harness's fixes (idempotent)."""
    try:
        from sgl_eagle_ext.common.contract import CPU_ENV
        from sgl_eagle_ext.cpu import harness
    except ImportError:
        return  # not importable from here: SGLang says what it lacks
    if os.environ.get(CPU_ENV) == "1":
        harness.install_server()


def _forget_platform() -> None:
    """SGLang caches what it detects from the environment (is_cpu() reads
    SGLANG_USE_CPU_ENGINE once): forget it, so each case sees its own environment."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith(("sglang.srt.utils", "sglang.srt.platforms", "sglang.srt.environ")):
            continue
        for value in list(vars(mod).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", "").startswith("sglang"):
                try:
                    clear()
                except Exception:
                    pass


def resolve(argv: list[str], env: dict) -> dict:
    from sglang.srt import server_args as sa

    saved = dict(os.environ)
    os.environ.update(env)
    _as_the_server_entry()
    _forget_platform()
    try:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                args = sa.prepare_server_args(list(argv))
            except SystemExit:  # argparse: its own message on stderr
                lines = err.getvalue().strip().splitlines() or ["refused the arguments"]
                return {"error": lines[-1]}
        raw = {}
        if hasattr(args, "resolve_once"):
            args.resolve_once()
            fields = args.resolved_dict()
            raw = getattr(args, "_raw_input", {}) or {}
            hooks = {}
            for source, declared in getattr(args, "_resolved_overrides", None) or ():
                for name in declared:
                    hooks[name] = source  # the last declaration wins, as in SGLang
        else:
            fields = {k: v for k, v in vars(args).items() if not k.startswith("_")}
            hooks = {}
        flat = _flat(_plain(fields))
        raw_flat = _flat(_plain(raw)) if raw else {}
        changes = []
        for name, hook in hooks.items():
            for key in [k for k in flat if k == name or k.startswith(name + ".")]:
                before = raw_flat.get(key)
                if before != flat[key]:
                    changes.append([key, before, flat[key], hook])
        return {"fields": flat, "changes": changes}
    except Exception as e:  # SGLang refused the launch: its own words
        return {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}"}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(path: str) -> int:
    from importlib import metadata

    with open(path) as f:
        cases = json.load(f)
    version = metadata.version("sglang")
    out = [{"version": version, **resolve(c["argv"], c.get("env") or {})} for c in cases]
    print(TAG + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
