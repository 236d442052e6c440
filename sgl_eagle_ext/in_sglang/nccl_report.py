"""In each scheduler (TP rank) process, before NCCL initialises: one line with
the NCCL-related variables this rank really has. The launcher turns these lines
into its rank x variable table (launcher/nccl.py); the line's format is
common/nccl_line.py's."""

from __future__ import annotations

import os

from sgl_eagle_ext.common import nccl_line
from sgl_eagle_ext.common.contract import NCCL_TAG
from sgl_eagle_ext.in_sglang_base import registry


def rank_line(rank, env=os.environ) -> str:
    return nccl_line.format_line(rank, os.getpid(), env)


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
