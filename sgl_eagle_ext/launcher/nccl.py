"""NCCL settings that provably reach every rank.

In each scheduler process, before NCCL initialises, the rank prints one line
with the NCCL-related variables it actually has (in_sglang/nccl_report.py):

    EAGLE_EXT_NCCL rank=0 pid=1234 NCCL_ALGO=Ring NCCL_PROTO=LL ...

The launcher collects these lines from the server output and prints one table
(rank x variable), warning when a rank differs from the preset. Before launch
it warns when SGLang itself will overwrite a value (releases.EnvOverride).
`--nccl-debug` turns on NCCL's own INIT/ENV logging to per-process files and
summarises which settings NCCL says it took from the environment.
"""

from __future__ import annotations

import re
from pathlib import Path

from sgl_eagle_ext.common.cli_args import last_value
from sgl_eagle_ext.common.contract import NCCL_EXTRA, NCCL_PREFIXES, NCCL_TAG
from sgl_eagle_ext.common.releases import Release

UNSET = "<unset>"
NCCL_TAKEN = re.compile(r"NCCL INFO (\S+) set by environment to (\S+)")


def parse_line(line: str) -> tuple[str, dict[str, str]] | None:
    at = line.find(NCCL_TAG + " ")
    if at < 0:
        return None
    fields = dict(tok.split("=", 1) for tok in line[at + len(NCCL_TAG) :].split() if "=" in tok)
    rank = fields.pop("rank", "?")
    fields.pop("pid", None)
    return rank, fields


def table(reports: dict[str, dict[str, str]], expected: dict[str, str]) -> tuple[str, list[str]]:
    """The rank x variable table, and one warning per rank/variable that
    differs from the preset (`expected`)."""
    names = sorted(
        set(expected) | {k for r in reports.values() for k in r if k.startswith(NCCL_PREFIXES)}
    )
    ranks = sorted(reports, key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else r))
    width = max([len(n) for n in names] + [8])
    cols = [max(len(f"rank {r}"), *(len(reports[r].get(n, UNSET)) for n in names)) for r in ranks]
    lines = [
        f"{'variable':{width}}  {'preset':>10}  "
        + "  ".join(f"{'rank ' + r:>{c}}" for r, c in zip(ranks, cols))
    ]
    warnings = []
    for n in names:
        want = expected.get(n, "")
        cells = []
        for r, c in zip(ranks, cols):
            got = reports[r].get(n, UNSET)
            cells.append(f"{got:>{c}}")
            if n in expected and got != want:
                warnings.append(f"rank {r} has {n}={got}, the preset says {want}")
        lines.append(f"{n:{width}}  {want or '-':>10}  " + "  ".join(cells))
    return "\n".join(lines), warnings


def _int_arg(args: list[str], *flags: str, default: int = 1) -> int:
    values = [v for f in flags if (v := last_value(args, f)) is not None]
    try:
        return int(values[-1]) if values else default
    except ValueError:
        return default


def _graphs_on(args: list[str]) -> bool:
    """Any CUDA-graph phase left on (0.5.16+ spells it per phase)."""
    if "--disable-cuda-graph" in args:
        return False
    phases = ("--cuda-graph-backend-decode", "--cuda-graph-backend-prefill")
    return not all(last_value(args, f) == "disabled" for f in phases)


def _tp_lm_head_a2a(args: list[str]) -> bool:
    """Explicit, or 0.5.21's default: a pure-DP decode node (disaggregated decode,
    DP attention, dp == tp > 1)."""
    if "--enable-tp-lm-head-all-to-all" in args:
        return True
    tp, dp = _int_arg(args, *_TP), _int_arg(args, *_DP)
    return (
        last_value(args, "--disaggregation-mode") == "decode"
        and "--enable-dp-attention" in args
        and dp > 1
        and tp == dp
        and "--enable-dp-lm-head" not in args
    )


_TP = ("--tp-size", "--tp", "--tensor-parallel-size")
_DP = ("--dp-size", "--dp", "--data-parallel-size")
_EP = ("--ep-size", "--ep", "--expert-parallel-size")
CONDITIONS = {  # EnvOverride.needs
    "dcp>1": lambda a: _int_arg(a, "--dcp-size", "--decode-context-parallel-size") > 1,
    "nnodes>1": lambda a: _int_arg(a, "--nnodes") > 1,
    "parallel>1": lambda a: max(_int_arg(a, *f) for f in (_TP, _EP, _DP)) > 1,
    "graphs-on": _graphs_on,
    "tp-lm-head-a2a": _tp_lm_head_a2a,
    "deepep": lambda a: (last_value(a, "--moe-a2a-backend") or "").startswith("deepep"),
}


def override_warnings(release: Release, server_args: list[str], env: dict[str, str]) -> list[str]:
    """Variables of `env` (the preset's) that SGLang will overwrite for this launch."""
    out = []
    for o in release.env_overrides:
        triggered = not o.flags or any(f in server_args for f in o.flags)
        if not triggered or not all(CONDITIONS[c](server_args) for c in o.needs):
            continue
        if o.var in env and not o.setdefault:
            out.append(f"SGLang {release.version} overwrites {o.var}={env[o.var]}: {o.when}")
        elif o.var not in env and o.setdefault:
            out.append(f"note: SGLang {release.version} sets {o.var} for you: {o.when}")
    return out


def debug_env(folder: Path) -> dict[str, str]:
    """NCCL's own logging, one file per process (%h host, %p pid)."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV",
        "NCCL_DEBUG_FILE": str(folder / "nccl.%h.%p.log"),
    }


def debug_summary(folder: Path) -> dict[str, dict[str, str]]:
    """file name -> {variable: value} for every 'X set by environment to V' line."""
    out = {}
    for f in sorted(folder.glob("nccl.*.log")):
        taken = {}
        for line in f.read_text(errors="replace").splitlines():
            m = NCCL_TAKEN.search(line)
            if m:
                taken[m[1]] = m[2].rstrip(".")
        out[f.name] = taken
    return out


def expected(env: dict[str, str]) -> dict[str, str]:
    """The NCCL-related part of the environment the launcher gives the server."""
    return {k: v for k, v in env.items() if k.startswith(NCCL_PREFIXES) or k in NCCL_EXTRA}
