"""Concurrency the host can carry: one socket per client must fit under the
open-file limit (RLIMIT_NOFILE), checked before the first request rather than
found out as "Too many open files" mid-level with nothing written."""

from __future__ import annotations

import resource
import sys

from sgl_eagle_ext.common.errors import UserError

# Beyond this many concurrent clients, one load generator measures its own
# connection backlog, not the server (a server answers "connection refused").
MAX_CONCURRENCY = 10000
SPARE_FILES = 64  # the interpreter, records, logs, DNS, the server probes


def check_concurrency(level: int, flag: str = "--concurrency") -> None:
    """Refuse a level beyond MAX_CONCURRENCY; raise the soft open-file limit to the
    hard one when that is needed, else refuse with the numbers."""
    if level > MAX_CONCURRENCY:
        raise UserError(
            f"{flag}: {level} concurrent clients is beyond what one load generator "
            f"measures faithfully (at most {MAX_CONCURRENCY}).",
            fix=f"use levels up to {MAX_CONCURRENCY}; for more, run several bench processes",
        )
    need = level + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            print(
                f"note: open-file limit raised from {soft} to {hard} for {level} clients",
                file=sys.stderr,
            )
            return
        except (ValueError, OSError):
            pass
    raise UserError(
        f"{flag}: {level} clients need about {need} open files; this process may open "
        f"{soft} (hard limit {hard}).",
        fix=f"raise the limit (`ulimit -n {need}` as allowed, or the container's nofile "
        f"ulimit), or use levels up to {max(1, min(soft, hard) - SPARE_FILES)}",
    )
