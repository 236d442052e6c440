"""Run sglang_probe.py in the python that will start SGLang and read its verdicts.

Preflight asks the installed release itself when it is the release being launched:
its ModelConfig derives the context lengths (its transformers, class defaults, rope
handling) and the target class's own set_eagle3_layers_to_capture gives the capture
indices. Anything else (no SGLang there, another release, a failure or a timeout)
leaves the verdicts to the project's rules, with one line saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.launcher.preflight import probe_cache
from sgl_eagle_ext.launcher.preflight.sglang_probe import TAG

PROBE = Path(__file__).with_name("sglang_probe.py")
TIMEOUT_S = 240.0  # importing SGLang's model registry takes ~10-20 s on a busy CPU


@dataclass
class Answer:
    """SGLang's own verdicts for one target/draft pair (None where it gave none)."""

    version: str
    seconds: float
    context: dict = field(default_factory=dict)
    aux: dict | None = None
    cached_at: str | None = None  # when SGLang gave this answer, if it came from the cache

    @property
    def label(self) -> str:
        if self.cached_at:
            return f"by SGLang {self.version} (cached answer from {self.cached_at})"
        return f"by SGLang {self.version}"


# Line 1: the sglang version (nothing if absent). Line 2 (JSON): what else the probe's
# answer depends on, for its cache: transformers / torch versions and a stat signature of
# the sglang sources the probe runs (a patch changes them, not the version). Nothing is
# imported: importlib.metadata and find_spec read files only.
_INSTALLED = """
import hashlib, importlib.metadata as m, importlib.util as u, json, os
def v(d):
    try: return m.version(d)
    except m.PackageNotFoundError: return None
s = v('sglang')
if s:
    print(s)
    spec = u.find_spec('sglang')
    sig = []
    for root in list(spec.submodule_search_locations or []) if spec else []:
        for sub in ('srt/configs', 'srt/models'):
            for dp, dn, fn in os.walk(os.path.join(root, sub)):
                dn.sort()
                for f in sorted(fn):
                    if f.endswith('.py'):
                        st = os.stat(os.path.join(dp, f))
                        sig.append([os.path.join(dp, f), st.st_size, st.st_mtime_ns])
    src = hashlib.sha256(json.dumps(sig).encode()).hexdigest() if sig else None
    print(json.dumps({'transformers': v('transformers'), 'torch': v('torch'), 'src': src}))
"""


def installed(python: str, env: dict | None = None) -> dict:
    """What `python` would import: {"sglang": version, "transformers": ..., "torch": ...,
    "src": signature of sglang's model sources}; {} when it has no SGLang or cannot run.
    Read from its files in one short subprocess (~0.1-0.3 s), never imported."""
    try:
        out = subprocess.run(
            [python, "-c", _INSTALLED], capture_output=True, text=True, timeout=30, env=env
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = out.stdout.strip().splitlines()
    if not lines or not lines[0].strip():
        return {}
    found = {"sglang": lines[0].strip()}
    try:
        extra = json.loads(lines[1]) if len(lines) > 1 else {}
        if isinstance(extra, dict):
            found.update({k: v for k, v in extra.items() if k != "sglang"})
    except ValueError:
        pass  # a python that answers only the version: its answers are not cached
    return found


def installed_version(python: str, env: dict | None = None) -> str | None:
    """The sglang release `python` would import (read from its files, not imported)."""
    return installed(python, env).get("sglang")


def probe_env(env: dict | None) -> dict:
    """The launch environment, minus what would bend SGLang's verdicts or import ours."""
    base = dict(os.environ if env is None else env)
    for name in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_IS_IN_CI"):
        base.pop(name, None)
    base.setdefault("HF_HUB_OFFLINE", "1")
    return base


def ask(
    python: str,
    target_dir: str,
    draft_dir: str | None,
    context_length: int | None,
    aux: dict | None,
    env: dict | None = None,
    timeout: float = TIMEOUT_S,
    found: dict | None = None,
) -> tuple[Answer | None, str]:
    """(SGLang's answer, '') or (None, why it could not be asked).

    found: installed(python, env), when the caller has it. With it (and the cache not
    bypassed by EAGLE_EXT_PROBE_CACHE=0), an answer SGLang gave before on exactly the
    same inputs is read from probe_cache instead of asked again."""
    request = {
        "context": [{"target": target_dir, "draft": draft_dir, "context_length": context_length}],
        "aux": [aux] if aux else [],
    }
    t0 = time.monotonic()
    name = None
    if found and probe_cache.enabled(env):
        try:
            name = probe_cache.key(python, found, PROBE, request, probe_env(env))
        except Exception:
            name = None  # an unreadable config: SGLang is asked and says what it makes of it
        hit = probe_cache.load(name) if name else None
        if hit is not None:
            out, when = hit
            return _answer(out, time.monotonic() - t0, when), ""
    out, why = _probe(python, request, env, timeout)
    if out is None:
        return None, why
    if name:
        probe_cache.store(name, out)
    return _answer(out, time.monotonic() - t0), ""


def _answer(out: dict, seconds: float, cached_at: str | None = None) -> Answer:
    return Answer(
        out["version"],
        seconds,
        out["context"][0] if out["context"] else {},
        out["aux"][0] if out["aux"] else None,
        cached_at,
    )


def _probe(python: str, request: dict, env: dict | None, timeout: float):
    """(the probe's JSON answer, '') or (None, why)."""
    with tempfile.TemporaryDirectory(prefix="sgl-eagle-ext-probe-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps(request))
        try:
            proc = subprocess.run(
                [python, str(PROBE), str(path)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=probe_env(env),
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return None, f"asking SGLang timed out after {timeout:.0f} s"
        except OSError as e:
            return None, f"could not run {python}: {e.strerror or e}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(TAG)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"asking SGLang failed (exit {proc.returncode}): {tail[:200]}"
    return json.loads(lines[-1][len(TAG) :]), ""


def default_python() -> str:
    """The python the launcher starts SGLang with (launcher/cli.py: sys.executable)."""
    return sys.executable
