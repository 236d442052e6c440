"""Run GNU patch on one diff: dry runs to tell the state, real runs only after one.

GNU patch (Debian/Ubuntu package `patch`) must be on PATH. Options used:
-p1 (diffs name a/sglang/... and b/sglang/...), -f (never ask, and never guess that
a patch "looks reversed": forward means forward), --fuzz=0 (the context must
match exactly; a fuzzy match on another release's code is not the same fix),
--no-backup-if-mismatch (we keep our own backup).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError

BASE = ("-p1", "-f", "--fuzz=0", "--no-backup-if-mismatch")


def _binary() -> str:
    found = shutil.which("patch")
    if not found:
        raise UserError(
            "GNU patch is not installed (no `patch` on PATH).",
            fix="install it: apt-get install -y patch",
        )
    return found


def run(diff: Path, root: Path, *, reverse: bool = False, dry_run: bool = True) -> tuple[bool, str]:
    """Apply (or with `reverse`, un-apply) `diff` under `root`; True if it went cleanly."""
    cmd = [_binary(), *BASE, "-d", str(root), "-i", str(diff)]
    if reverse:
        cmd.append("-R")
    if dry_run:
        cmd.append("--dry-run")
    else:
        cmd.append("--reject-file=-")  # never leave .rej files in site-packages
    done = subprocess.run(cmd, capture_output=True, text=True)
    return done.returncode == 0, (done.stdout + done.stderr).strip()
