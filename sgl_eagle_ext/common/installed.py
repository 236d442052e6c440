"""What SGLang is installed, read from files, never imported: the one place that knows
(the release table resolves "the installed release" with it; the preflight's probe keys
its cache on the rest of the answer).

    installed_version()               # this process's sglang, from its metadata
    installed_version(python, env)    # the sglang that `python` would import in `env`
    installed(python, env)            # ... with transformers, torch and a file signature
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from importlib import metadata

# Line 1: the sglang version (nothing if absent). Line 2 (JSON): what else the probe's
# answer depends on, for its cache: transformers / torch versions and a signature of
# the SGLang distribution's installed files (its RECORD, and the size and mtime of
# every file of the package: a patch changes them, not the version). Nothing is
# imported: importlib.metadata and find_spec read files only.
_INSTALLED = """
import hashlib, importlib.metadata as m, importlib.util as u, json, os
def v(d):
    try: return m.version(d)
    except m.PackageNotFoundError: return None
s = v('sglang')
if s:
    print(s)
    h = hashlib.sha256((m.distribution('sglang').read_text('RECORD') or '').encode())
    spec = u.find_spec('sglang')
    n = 0
    for root in list(spec.submodule_search_locations or []) if spec else []:
        for dp, dn, fn in os.walk(root):
            dn[:] = sorted(d for d in dn if d != '__pycache__')
            for f in sorted(fn):
                st = os.stat(os.path.join(dp, f))
                h.update(f'{dp}/{f}:{st.st_size}:{st.st_mtime_ns}'.encode())
                n += 1
    src = h.hexdigest() if n else None
    print(json.dumps({'transformers': v('transformers'), 'torch': v('torch'), 'src': src}))
"""


def installed(python: str, env: Mapping[str, str] | None = None) -> dict:
    """What `python` would import: {"sglang": version, "transformers": ..., "torch": ...,
    "src": signature of the sglang distribution's files}; {} when it has no SGLang or
    cannot run. Read from its files in one short subprocess, never imported (in the
    allow-listed environment: common/env_allow.py)."""
    try:
        from sgl_eagle_ext.common import env_allow, proctree  # psutil: only when asking

        out = proctree.run_in_group(
            [python, "-c", _INSTALLED],
            60,
            env=env_allow.allowed(os.environ if env is None else env),
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


def installed_version(
    python: str | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The sglang release installed: in this process's environment (python None: its
    metadata, no subprocess), or the one `python` would import in `env` (read from its
    files in a short subprocess, never imported). None where there is none."""
    if python is None:
        try:
            return metadata.version("sglang")
        except metadata.PackageNotFoundError:
            return None
    return installed(python, env).get("sglang")
