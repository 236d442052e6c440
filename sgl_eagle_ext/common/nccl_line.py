"""The per-rank NCCL line, its one home: written in every scheduler (TP rank) process
before NCCL initialises (in_sglang/nccl_report.py), read by the launcher from the
server output (launcher/nccl.py), which turns the lines into its rank x variable table:

    EAGLE_EXT_NCCL rank=0 pid=1234 NCCL_ALGO=Ring NCCL_PROTO=LL ...

Names are those of NCCL (NCCL_*, TORCH_NCCL_*) and the CUDA variables NCCL reads.
Values are written as the rank has them; a line may be prefixed (SGLang's log stamps).
"""

from __future__ import annotations

from collections.abc import Mapping

from sgl_eagle_ext.common.contract import NCCL_EXTRA, NCCL_PREFIXES, NCCL_TAG

TAG = NCCL_TAG


def relevant(name: str) -> bool:
    """An NCCL-related variable: one the line carries."""
    return name.startswith(NCCL_PREFIXES) or name in NCCL_EXTRA


def selected(env: Mapping[str, str]) -> dict[str, str]:
    """The NCCL-related part of an environment."""
    return {k: env[k] for k in sorted(env) if relevant(k)}


def format_line(rank, pid: int, env: Mapping[str, str]) -> str:
    return " ".join(
        [TAG, f"rank={rank}", f"pid={pid}", *(f"{k}={v}" for k, v in selected(env).items())]
    )


def parse_line(line: str) -> tuple[str, dict[str, str]] | None:
    """(rank, {variable: value}) of a line holding the tag, else None."""
    at = line.find(TAG + " ")
    if at < 0:
        return None
    fields = dict(tok.split("=", 1) for tok in line[at + len(TAG) :].split() if "=" in tok)
    rank = fields.pop("rank", "?")
    fields.pop("pid", None)
    return rank, fields
