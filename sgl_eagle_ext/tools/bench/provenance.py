"""Where a result came from: server args and environment, versions, GPUs, prompts, command.

Secrets never reach a record: environment variables, flags and /server_info
fields whose name says key, token, secret, password or credential are replaced
by "***".
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psutil

from sgl_eagle_ext import __version__
from sgl_eagle_ext.common import http, releases
from sgl_eagle_ext.common.redaction import REDACTED, SECRET, redact_args, redact_tree

__all__ = ["REDACTED", "SECRET", "redact_args", "redact_env", "redact_info"]

# Environment variables that change how a server behaves (the NCCL block first).
ENV_PREFIXES = (
    "NCCL_",
    "CUDA_",
    "SGLANG_",
    "SGL_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "EAGLE_",
    "NVIDIA_",
    "OMP_",
    "MKL_",
    "HF_",
    "TRANSFORMERS_",
    "GLOO_",
    "FLASHINFER_",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", socket.gethostname()}


def redact_env(env: dict[str, str], keep_all: bool = False) -> dict[str, str]:
    """The relevant variables (all if keep_all), secrets replaced."""
    from sgl_eagle_ext.common import redaction

    return redaction.redact_env(env, lambda k: keep_all or k.startswith(ENV_PREFIXES))


def redact_info(info: dict, secrets: tuple[str, ...] = ()) -> dict:
    """/server_info without per-scheduler states, secrets hidden by name and by value
    (its `launch_command` holds SGLang's own command line, --api-key included)."""
    return redact_tree({k: v for k, v in info.items() if k != "internal_states"}, secrets)


GPU_FIELDS = ("index", "name", "memory_mib", "driver", "bus_id")  # as nvidia-smi is asked


def gpus() -> dict:
    """GPU names, memory and driver (nvidia-smi), or why there are none."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"gpus": [], "note": "nvidia-smi not found (no NVIDIA driver on this host)"}
    try:
        out = subprocess.run(
            [
                smi,
                "--query-gpu=index,name,memory.total,driver_version,pci.bus_id",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"gpus": [], "note": f"nvidia-smi failed: {e}"}
    if out.returncode != 0:
        return {"gpus": [], "note": f"nvidia-smi failed: {out.stderr.strip()[:200]}"}
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= len(GPU_FIELDS):
            rows.append(dict(zip(GPU_FIELDS, parts)))
    return {"gpus": rows, "note": ""}


def git_commit() -> dict:
    """The project checkout's commit, when running from one."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or not shutil.which("git"):
        return {}

    def git(*args: str) -> str:
        run = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=10)
        return run.stdout.decode(errors="replace").strip()

    try:
        head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {"commit": head, "dirty": bool(dirty)} if head else {}


def local_server_process(host: str, port: int) -> dict:
    """Command line and environment of the process listening on a local port."""
    if host not in LOCAL_HOSTS:
        return {
            "note": f"server on {host}: its command line and environment are not visible "
            f"from here (run the benchmark on the server host, or use `bench ab`)"
        }
    pids = http.listener_pids(port)
    if not pids:
        return {"note": f"no local process found listening on port {port} (permissions?)"}
    pid = min(pids)
    try:
        proc = psutil.Process(pid)
        cmdline = redact_args(proc.cmdline())
        try:
            env = redact_env(proc.environ())
        except (psutil.AccessDenied, psutil.ZombieProcess):
            env = None
        return {
            "pid": pid,
            "cmdline": cmdline,
            "env": env,
            "note": "" if env is not None else "environment not readable (another user)",
        }
    except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
        return {"note": f"process {pid}: {type(e).__name__}"}


def command_line(argv: list[str] | None = None) -> str:
    argv = sys.argv if argv is None else argv
    prog = (
        "python -m sgl_eagle_ext.bench"
        if argv and argv[0].endswith(("bench/__main__.py", "bench", "bench.py"))
        else (argv[0] if argv else "")
    )
    return f"{prog} {shlex.join(redact_args(list(argv[1:])))}".strip()


def host_facts() -> dict:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "command": command_line(),
        "cwd": os.getcwd(),
        "python": platform.python_version(),
        "project": {"name": "sgl-eagle-ext", "version": __version__, **git_commit()},
        "sglang_installed": releases.installed_version(),
        **{"gpu": gpus()},
    }


def server_facts(server, *, launch: dict | None = None) -> dict:
    """Everything known about the server under test.

    `launch`: the plan when this tool started the server (preset, args, env);
    otherwise the listening process is inspected when it is local.
    """
    info = server.info or {}
    facts = {
        "url": server.base_url,
        "sglang_version": info.get("version"),
        "release_rules": f"{server.release.version} ({server.release_how})",
        "model_path": info.get("model_path") or server.model_id,
        "draft_model_path": info.get("speculative_draft_model_path"),
        "speculative": {
            k: info.get(k)
            for k in (
                "speculative_algorithm",
                "speculative_num_steps",
                "speculative_eagle_topk",
                "speculative_num_draft_tokens",
            )
        },
        "resolved_args": redact_info(info, (getattr(server, "api_key", None) or "",)),
    }
    if launch is not None:
        facts["started_by"] = "bench ab (through sgl_eagle_ext.launch)"
        facts.update(launch)
    else:
        facts["started_by"] = "outside this tool"
        facts["process"] = local_server_process(server.host, server.port)
    return facts
