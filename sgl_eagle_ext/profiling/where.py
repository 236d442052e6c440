"""`report --where PHASE [--sglang-version V]`: which SGLang method opens and closes
a phase, per supported release (the phase table here, the methods from the release
table in common/releases.py)."""

from __future__ import annotations

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.profiling.phases import CYCLE, PHASE_TABLE, where

SPANS = {p.name: p for p in (*PHASE_TABLE, CYCLE)}


def answer(phase: str, version: str | None = None) -> list[str]:
    """Lines to print; UserError (exit 2, one line naming the valid values) for an
    unknown phase or release."""
    if phase not in SPANS:
        raise UserError(f"--where {phase}: no such phase; phases: {', '.join(SPANS)}.")
    if version is None:
        chosen = releases.RELEASES
    elif version in releases.BY_VERSION:
        chosen = (releases.BY_VERSION[version],)
    else:
        raise UserError(
            f"--sglang-version {version}: not a supported release; releases: "
            f"{', '.join(r.version for r in releases.RELEASES)}."
        )
    lines = [f"{phase}: {SPANS[phase].what}"]
    for release in chosen:
        lines.append(f"SGLang {release.version}:")
        lines += [f"  {line}" for line in where(phase, release)]
    return lines
