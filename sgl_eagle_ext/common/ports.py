"""Ports for servers this project starts (bench compare/ab arms, benchmarks/, tune --live).

A port the kernel hands out for `bind(0)` lies inside Linux's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, usually 32768-60999): between our check
and the server's own bind, minutes later on a GPU host, any outgoing connection
(the launcher's health probes included) may take it as its source port. So the
port is chosen OUTSIDE that range, where the kernel never assigns source ports,
and checked free (nothing listening, bindable) at the moment of choosing.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, when /proc cannot be read
LOWEST = 10000  # below: well-known and registered services crowd in
TRIES = 200


def ephemeral_range(path: Path = RANGE_FILE) -> tuple[int, int]:
    """(low, high) of the kernel's source-port range, both inclusive."""
    try:
        low, high = (int(v) for v in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def candidates(ephemeral: tuple[int, int]) -> list[int]:
    """Ports outside the ephemeral range, above LOWEST (below 65536)."""
    low, high = ephemeral
    return [*range(LOWEST, low), *range(high + 1, 65536)]


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing holds `port`: a listening socket can bind it on `host` and on all addresses."""
    for addr in (host, "0.0.0.0"):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def pick(span: int = 1, host: str = "127.0.0.1", rng: random.Random | None = None) -> int:
    """A free port P outside the ephemeral range with P..P+span-1 all free (SGLang
    may open neighbours of its --port). Raises OSError when none is found."""
    rng = rng or random.SystemRandom()
    pool = [p for p in candidates(ephemeral_range()) if p + span - 1 <= 65535]
    for _ in range(TRIES):
        if not pool:
            break
        port = rng.choice(pool)
        if all(bindable(p, host) for p in range(port, port + span)):
            return port
    if not pool:  # the whole range is ephemeral here: the kernel's pick is all there is
        with socket.socket() as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    raise OSError("no free port outside the ephemeral range")
