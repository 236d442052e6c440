"""Scale-out checks: SGLang's multi-node tensor parallelism and data-parallel replicas.

Reads only the SGLang arguments of the launch (and its environment), so it runs
in microseconds, before any weight loads, on every node:

  --nnodes N --node-rank R --dist-init-addr HOST:PORT   (multi-node TP; every node
      runs the same command with its own --node-rank; HOST:PORT is node 0's)
  --tp-size / --pp-size / --dp-size                    (sizes SGLang splits over nodes)

    from sgl_eagle_ext.launcher.preflight import scaleout
    findings = scaleout.check(server_args, env)        # list[Finding]
    scaleout.gpus_per_node(server_args)                # GPUs this node needs
    scaleout.enforce(server_args, env)                 # launcher: UserError on errors

Facts (SGLang 0.5.23, arg_groups/validation_hook.py check_server_args): it asserts
(tp_size * pp_size) % nnodes == 0 and refuses --dp-size > 1 with --nnodes > 1
("multi-node data-parallel replicas are not supported"); pipeline parallelism takes
EAGLE but not EAGLE3 drafts. Nodes with --node-rank >= 1 serve no requests: their
port answers /health and /health_generate with 200 once their ranks are up.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding

FLAGS = {  # our name -> SGLang spellings (aliases included)
    "nnodes": ("--nnodes",),
    "node-rank": ("--node-rank",),
    "dist-init-addr": ("--dist-init-addr", "--nccl-init-addr"),
    "tp-size": ("--tp-size", "--tp", "--tensor-parallel-size"),
    "pp-size": ("--pp-size", "--pipeline-parallel-size"),
    "dp-size": ("--dp-size", "--data-parallel-size"),
    "port": ("--port",),
    "speculative-algorithm": ("--speculative-algorithm",),
}
DEFAULTS = {
    "nnodes": "1",
    "node-rank": "0",
    "tp-size": "1",
    "pp-size": "1",
    "dp-size": "1",
    "port": "30000",
}
IPV6_ADDR = re.compile(r"^\[(?P<host>[^\]]+)\]:(?P<port>[^:]+)$")
NETWORK_ENV = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME")


def _value(server_args, name: str) -> str | None:
    # the last spelling on the line wins, as in argparse
    found = ServerArgv.of(server_args).last_of(*FLAGS[name])
    return found if found is not None else DEFAULTS.get(name)


def _int(server_args: list[str], name: str, found: list[Finding]) -> int | None:
    text = _value(server_args, name)
    try:
        return int(text)
    except (TypeError, ValueError):
        found.append(
            Finding(
                f"scaleout.{name}", ERROR, f"--{name} {text}: not an integer.", f"pass --{name} N"
            )
        )
        return None


def parse_addr(text: str) -> tuple[str, int]:
    """'10.0.0.1:5000' / 'node0:5000' / '[fd00::1]:5000' -> (host, port); ValueError if not."""
    m = IPV6_ADDR.match(text)
    if m:
        host, port = m["host"], m["port"]
        ipaddress.IPv6Address(host)
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host or ":" in host:
            raise ValueError("expected HOST:PORT (an IPv6 address in brackets: [ADDR]:PORT)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"port {port!r} is not a number from 1 to 65535")
    return host, int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def gpus_per_node(server_args: list[str]) -> int:
    """GPUs one node needs: tp * pp split over --nnodes (what the host checks should count)."""
    found: list[Finding] = []
    tp, pp, nnodes = (_int(server_args, n, found) for n in ("tp-size", "pp-size", "nnodes"))
    if found or not nnodes or nnodes < 1:
        return max(tp or 1, 1) * max(pp or 1, 1)
    return max((tp or 1) * (pp or 1) // nnodes, 1)


def is_worker_node(server_args: list[str]) -> bool:
    """--node-rank >= 1: this node runs TP ranks only and serves no requests."""
    try:
        return int(_value(server_args, "node-rank") or 0) >= 1
    except ValueError:
        return False


def check(server_args, env: Mapping[str, str] | None = None) -> list[Finding]:
    server_args = list(server_args)
    env = env or {}
    found: list[Finding] = []
    nnodes = _int(server_args, "nnodes", found)
    rank = _int(server_args, "node-rank", found)
    tp = _int(server_args, "tp-size", found)
    pp = _int(server_args, "pp-size", found)
    dp = _int(server_args, "dp-size", found)
    if None in (nnodes, rank, tp, pp, dp):
        return found
    addr = _value(server_args, "dist-init-addr")
    algorithm = (_value(server_args, "speculative-algorithm") or "").upper()

    if pp > 1 and algorithm == "EAGLE3":
        found.append(
            Finding(
                "scaleout.pp-eagle3",
                WARNING,
                f"--pp-size {pp} with EAGLE3: SGLang 0.5.23 refuses pipeline parallelism with "
                f'EAGLE-3 drafts ("Pipeline parallelism currently only supports EAGLE").',
                "split the model with --tp-size over the nodes instead, or serve more traffic with "
                "data-parallel replicas behind sglang-router",
            )
        )
    if nnodes < 1:
        found.append(
            Finding(
                "scaleout.nnodes",
                ERROR,
                f"--nnodes {nnodes}: must be 1 or more.",
                "pass the number of machines, e.g. --nnodes 2",
            )
        )
        return found
    if not 0 <= rank < nnodes:
        found.append(
            Finding(
                "scaleout.node-rank",
                ERROR,
                f"--node-rank {rank} with --nnodes {nnodes}: the rank must be 0 to {nnodes - 1}.",
                "give node 0 (the one that serves requests) --node-rank 0 and the others 1, 2, ..."
                if nnodes > 1
                else "drop --node-rank, or pass --nnodes N for a multi-node launch",
            )
        )
    if nnodes == 1:
        if addr is not None:
            found.append(
                Finding(
                    "scaleout.dist-init-addr-single-node",
                    INFO,
                    f"--dist-init-addr {addr} with one node: SGLang uses it only for "
                    f"multi-node or attention-DP launches.",
                )
            )
        return found

    # -- multi-node tensor parallelism ----------------------------------------------
    if (tp * pp) % nnodes:
        found.append(
            Finding(
                "scaleout.tp-nnodes",
                ERROR,
                f"--tp-size {tp} x --pp-size {pp} = {tp * pp} GPUs cannot be split evenly over "
                f"--nnodes {nnodes} (SGLang asserts tp_size * pp_size divisible by nnodes).",
                f"use --tp-size {nnodes * 8} for {nnodes} nodes of 8 GPUs",
            )
        )
    if dp > 1:
        found.append(
            Finding(
                "scaleout.dp-multinode",
                ERROR,
                f"--dp-size {dp} with --nnodes {nnodes}: SGLang does not run data-parallel replicas "
                f"across nodes.",
                "start one independent server per node (no --nnodes) and put sglang-router in front "
                "(python -m sgl_eagle_ext.router); see docs/operators-guide.md",
            )
        )
    if addr is None:
        found.append(
            Finding(
                "scaleout.dist-init-addr-missing",
                ERROR,
                f"--nnodes {nnodes} without --dist-init-addr: the nodes cannot find each other.",
                "pass --dist-init-addr HOST:PORT with node 0's address and a free port, the same "
                "on every node",
            )
        )
        return found
    try:
        host, port = parse_addr(addr)
    except ValueError as e:
        found.append(
            Finding(
                "scaleout.dist-init-addr-format",
                ERROR,
                f"--dist-init-addr {addr}: {e}.",
                "write it as HOST:PORT, e.g. 10.0.0.1:20000 or [fd00::1]:20000",
            )
        )
        return found
    if _loopback(host) or _unspecified(host):
        found.append(
            Finding(
                "scaleout.dist-init-addr-host",
                ERROR,
                f"--dist-init-addr {addr}: {host} is not an address the other nodes can reach.",
                "use node 0's address on the network between the nodes",
            )
        )
    server_port = _int(server_args, "port", [])
    if rank == 0 and server_port == port:
        found.append(
            Finding(
                "scaleout.dist-init-port",
                ERROR,
                f"--dist-init-addr port {port} is also the HTTP --port of node 0.",
                "pick another port for --dist-init-addr (e.g. 20000) and open it between the nodes",
            )
        )
    if not any(env.get(k) for k in NETWORK_ENV):
        found.append(
            Finding(
                "scaleout.network",
                INFO,
                f"multi-node TP ({nnodes} nodes): every all-reduce crosses the network; NCCL picks "
                f"the interface itself (none of {', '.join(NETWORK_ENV)} is set).",
                "in Docker use --network host; set NCCL_SOCKET_IFNAME (and NCCL_IB_HCA for "
                "InfiniBand/RoCE) if NCCL picks the wrong interface",
            )
        )
    found.append(
        Finding(
            "scaleout.layout",
            INFO,
            f"node {rank} of {nnodes}: {gpus_per_node(server_args)} GPU(s) here, rendezvous at "
            f"{addr}"
            + (
                "; this node serves the API"
                if rank == 0
                else "; this node serves no requests (send them to node 0)"
            )
            + ".",
        )
    )
    return found


def enforce(server_args, env: Mapping[str, str] | None = None) -> list[Finding]:
    """For the launcher: raise UserError listing every error; return the warnings."""
    found = check(server_args, env)
    errors = [f for f in found if f.severity == ERROR]
    if errors:
        raise UserError(
            "scale-out arguments: " + " ".join(f.message for f in errors),
            fix="; ".join(dict.fromkeys(f.fix for f in errors if f.fix)),
        )
    return [f for f in found if f.severity == WARNING]
