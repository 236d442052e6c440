"""EAGLE3_PROFILE* environment switches (read once, in the scheduler process).
Their names are defined in profiling/names.py.

EAGLE3_PROFILE=1              turn profiling on (anything else: off, nothing patched)
EAGLE3_PROFILE_RANKS=0        ranks that profile and log: "0" (default), "all", or "0,3"
EAGLE3_PROFILE_INTERVAL_S=5   log a window at least this many seconds apart ...
EAGLE3_PROFILE_CYCLES=0       ... or every N decode cycles when N > 0
EAGLE3_PROFILE_FILE=PATH      also append each window as a JSON line ({rank} is replaced)
EAGLE3_PROFILE_SYNC_CHECK=1   count syncs inside cycles (syncs=; what is counted: syncs.py)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sgl_eagle_ext.profiling import names


@dataclass(frozen=True)
class Config:
    enabled: bool
    ranks: frozenset[int] | None  # None: all ranks
    interval_s: float
    cycles: int
    file: str | None
    sync_check: bool

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks


def from_env(env=os.environ) -> Config:
    ranks_text = env.get(names.ENV_RANKS, "0").strip().lower()
    ranks = (
        None
        if ranks_text == "all"
        else frozenset(int(r) for r in ranks_text.split(",") if r.strip().isdigit())
    )
    return Config(
        enabled=names.enabled(env),
        ranks=ranks,
        interval_s=_number(env, names.ENV_INTERVAL_S, 5.0),
        cycles=int(_number(env, names.ENV_CYCLES, 0)),
        file=env.get(names.ENV_FILE) or None,
        sync_check=env.get(names.ENV_SYNC_CHECK) == "1",
    )


def _number(env, name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default
