"""In each scheduler (TP rank) process, before NCCL initialises: one line with
the NCCL-related variables this rank really has. The launcher turns these lines
into its rank x variable table (launcher/nccl.py)."""

from __future__ import annotations

import os

from sgl_eagle_ext.common.contract import NCCL_EXTRA, NCCL_PREFIXES, NCCL_TAG
from sgl_eagle_ext.in_sglang_base import registry


def rank_line(rank, env=os.environ) -> str:
    names = sorted(k for k in env if k.startswith(NCCL_PREFIXES) or k in NCCL_EXTRA)
    return " ".join(
        [NCCL_TAG, f"rank={rank}", f"pid={os.getpid()}", *(f"{k}={env[k]}" for k in names)]
    )


def report_rank(rank) -> None:
    print(rank_line(rank), flush=True)  # before SGLang configures logging: plain stdout


# Every rank of a launcher-started server, first of all (a rank that hangs later has
# told its settings). Not through the plugin: only the launcher reads these lines.
FEATURE = registry.register(
    registry.Feature(
        NCCL_TAG,
        enabled=lambda env: True,
        hooks={registry.SCHEDULER: lambda ctx: report_rank(ctx.tp_rank)},
        order=registry.REPORT,
        plugin=False,
    )
)
