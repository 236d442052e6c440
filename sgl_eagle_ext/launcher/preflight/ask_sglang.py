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

PROBE = Path(__file__).with_name("sglang_probe.py")
TAG = "PROBE "
TIMEOUT_S = 240.0  # importing SGLang's model registry takes ~10-20 s on a busy CPU


@dataclass
class Answer:
    """SGLang's own verdicts for one target/draft pair (None where it gave none)."""

    version: str
    seconds: float
    context: dict = field(default_factory=dict)
    aux: dict | None = None

    @property
    def label(self) -> str:
        return f"by SGLang {self.version}"


def installed_version(python: str, env: dict | None = None) -> str | None:
    """The sglang release `python` would import (read from its files, not imported)."""
    code = (
        "import importlib.metadata as m\n"
        "try: print(m.version('sglang'))\n"
        "except m.PackageNotFoundError: pass\n"
    )
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=30, env=env
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


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
) -> tuple[Answer | None, str]:
    """(SGLang's answer, '') or (None, why it could not be asked)."""
    request = {
        "context": [{"target": target_dir, "draft": draft_dir, "context_length": context_length}],
        "aux": [aux] if aux else [],
    }
    t0 = time.monotonic()
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
    out = json.loads(lines[-1][len(TAG) :])
    return (
        Answer(
            out["version"],
            time.monotonic() - t0,
            out["context"][0] if out["context"] else {},
            out["aux"][0] if out["aux"] else None,
        ),
        "",
    )


def default_python() -> str:
    """The python the launcher starts SGLang with (launcher/cli.py: sys.executable)."""
    return sys.executable
