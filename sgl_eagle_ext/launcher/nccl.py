"""NCCL settings that provably reach every rank.

In each scheduler process, before NCCL initialises, the rank prints one line
with the NCCL-related variables it actually has (in_sglang/nccl_report.py; the
line's format: common/nccl_line.py):

    EAGLE_EXT_NCCL rank=0 pid=1234 NCCL_ALGO=Ring NCCL_PROTO=LL ...

The launcher collects these lines from the server output and prints one table
(rank x variable), warning when a rank differs from the preset. Before launch
it warns when SGLang itself will overwrite a value (releases.EnvOverride).
`--nccl-debug` turns on NCCL's own INIT/ENV logging to per-process files and
summarises which settings NCCL says it took from the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nccl_line
from sgl_eagle_ext.common.contract import NCCL_PREFIXES
from sgl_eagle_ext.common.releases import PCIE_ALLREDUCE_ENV, PCIE_ALLREDUCE_TP, Release
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.common.table import Col, L, Table

UNSET = "<unset>"
NCCL_TAKEN = re.compile(r"NCCL INFO (\S+) set by environment to (\S+)")


def table(reports: dict[str, dict[str, str]], expected: dict[str, str]) -> tuple[str, list[str]]:
    """The rank x variable table, and one warning per rank/variable that
    differs from the preset (`expected`)."""
    names = sorted(
        set(expected) | {k for r in reports.values() for k in r if k.startswith(NCCL_PREFIXES)}
    )
    ranks = sorted(reports, key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else r))
    grid = Table(
        L("variable", 8),
        Col("preset", 10, sep="  "),
        *(Col(f"rank {r}", sep="  ") for r in ranks),
    )
    rows, warnings = [], []
    for n in names:
        want = expected.get(n, "")
        got = [reports[r].get(n, UNSET) for r in ranks]
        rows.append((n, want or "-", *got))
        for r, value in zip(ranks, got):
            if n in expected and value != want:
                warnings.append(f"rank {r} has {n}={value}, the preset says {want}")
    return "\n".join(grid.render(rows)), warnings


def _int_arg(argv: ServerArgv, *flags: str, default: int = 1) -> int:
    # the last of `flags` that is given (flags: one setting's spellings)
    return argv.number(*reversed(flags), default=default)


def _graphs_on(argv: ServerArgv) -> bool:
    """Any CUDA-graph phase left on (0.5.16+ spells it per phase)."""
    if argv.has("disable-cuda-graph"):
        return False
    phases = ("cuda-graph-backend-decode", "cuda-graph-backend-prefill")
    return not all(argv.value(f) == "disabled" for f in phases)


def _tp_lm_head_a2a(argv: ServerArgv) -> bool:
    """Explicit, or 0.5.21's default: a pure-DP decode node (disaggregated decode,
    DP attention, dp == tp > 1)."""
    if argv.has("enable-tp-lm-head-all-to-all"):
        return True
    tp, dp = _int_arg(argv, *_TP), _int_arg(argv, *_DP)
    return (
        argv.value("disaggregation-mode") == "decode"
        and argv.has("enable-dp-attention")
        and dp > 1
        and tp == dp
        and not argv.has("enable-dp-lm-head")
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
    "deepep": lambda a: (a.value("--moe-a2a-backend") or "").startswith("deepep"),
}


def triggered(release: Release, server_args) -> list:
    """The release table's environment writes (releases.EnvOverride) that apply to
    this launch: their flags given (or none needed) and every condition holding."""
    argv = ServerArgv.of(server_args)
    return [
        o
        for o in release.env_overrides
        if (not o.flags or any(argv.has(f) for f in o.flags))
        and all(CONDITIONS[c](argv) for c in o.needs)
    ]


def override_warnings(
    release: Release, server_args, env: dict[str, str], exported: Mapping[str, str] | None = None
) -> list[str]:
    """Variables SGLang will overwrite for this launch: of `env` (the preset's and the
    request's), or `exported` in the shell the server inherits (os.environ)."""
    out = []
    for o in triggered(release, server_args):
        value, where = env.get(o.var), ""
        if value is None and o.var in (exported or {}):
            value, where = exported[o.var], " (exported in this shell)"
        if value is not None and not o.setdefault:
            out.append(f"SGLang {release.version} overwrites {o.var}={value}{where}: {o.when}")
        elif value is None and o.setdefault:
            out.append(f"note: SGLang {release.version} sets {o.var} for you: {o.when}")
    return out


def explain(
    release: Release, server_args, reports: dict[str, dict[str, str]], expected: dict[str, str]
) -> list[str]:
    """One line per variable the ranks have that the preset did not set, where the
    release table says SGLang sets it for this launch (the rank table's '-' rows)."""
    seen = {k for r in reports.values() for k in r}
    why: dict[str, list[str]] = {}
    for o in triggered(release, server_args):
        if o.var in seen and o.var not in expected:
            why.setdefault(o.var, []).append(o.when)
    return [
        f"{var}: not in the preset; SGLang {release.version} sets it ({'; '.join(whens)})"
        for var, whens in sorted(why.items())
    ]


def expected_ranks(server_args) -> int:
    """The TP ranks this launcher's server runs (all of them on one node; under
    --nnodes, this node's share), each of which reports its NCCL line."""
    argv = ServerArgv.of(server_args)
    tp = _int_arg(argv, *_TP)
    pp = _int_arg(argv, "--pp-size", "--pipeline-parallel-size")
    nnodes = max(1, _int_arg(argv, "--nnodes"))
    return max(1, min(tp, tp * pp // nnodes))


def rank_count_warning(reports: dict[str, dict[str, str]], want: int) -> str | None:
    """None when every TP rank reported; else which are missing. A rank that never
    reported is a rank whose settings the table cannot vouch for."""
    if len(reports) >= want:
        return None
    got = {int(r) for r in reports if r.isdigit()}
    # ranks 0..want-1 on one node; another node's ranks are numbered past them
    missing = [] if any(r >= want for r in got) else [r for r in range(want) if r not in got]
    return (
        f"only {len(reports)} of {want} TP rank(s) reported their NCCL settings"
        + (f" (missing: rank {', '.join(map(str, missing[:8]))})" if missing else "")
        + ": the table proves nothing about the others"
    )


def pcie_allreduce(
    release: Release, server_args, env: dict[str, str]
) -> tuple[str | None, list[str]]:
    """SGLang's PCIe-IPC all-reduce (overlay pcie-allreduce) for this launch: (why the
    release cannot run it, or None; the settings under which SGLang leaves every
    all-reduce on NCCL anyway, pcie_ipc_ar.eligible_group / PcieIpcCommunicator)."""
    if env.get(PCIE_ALLREDUCE_ENV, "").lower() not in ("1", "true", "yes", "on"):
        return None, []
    if not release.pcie_allreduce:
        newer = [r.version for r in releases_with_pcie()]
        return f"SGLang {release.version} has no PCIe-IPC all-reduce ({', '.join(newer)} do)", []
    argv = ServerArgv.of(server_args)
    found = []
    tp = _int_arg(argv, *_TP)
    if tp not in PCIE_ALLREDUCE_TP:
        found.append(f"TP {tp}: its kernels serve TP {', '.join(map(str, PCIE_ALLREDUCE_TP))}")
    if argv.has("enable-deterministic-inference"):
        found.append("--enable-deterministic-inference turns it off")
    if argv.value("device") == "cpu":
        found.append("no CUDA device")
    return None, [f"{PCIE_ALLREDUCE_ENV}=1 does nothing here: {w}" for w in found]


def releases_with_pcie() -> list[Release]:
    from sgl_eagle_ext.common.releases import RELEASES

    return [r for r in RELEASES if r.pcie_allreduce]


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
    return nccl_line.selected(env)


# -- the PCIe-IPC all-reduce's size bound (SGLang 0.5.23 pcie_ipc_ar.py) -----------------
# SGLang builds the workspace once, on the first model runner's prepare(): its widest
# decode reduction, max captured batch size x that runner's tokens per request (the
# startup state's verify width) x hidden; a reduction with more elements goes to NCCL
# (should_pcie_ipc_ar), as does every prefill chunk wider than it. SGLANG_PCIE_IPC_MAX_NUMEL
# replaces the derivation. An adaptive state with more draft tokens than the startup
# state verifies wider batches: those above the bound fall back to NCCL.
PCIE_MAX_NUMEL_ENV = "SGLANG_PCIE_IPC_MAX_NUMEL"


@dataclass(frozen=True)
class VerifyShape:
    steps: int  # the runtime state
    tokens: int  # tokens per request it verifies
    batch_sizes: tuple[int, ...]  # its captured decode batch sizes
    over: tuple[int, ...]  # those whose verify all-reduce exceeds the bound

    @property
    def widest(self) -> int:
        return max(self.batch_sizes, default=0) * self.tokens


def pcie_bound(release: Release, server_args, env, hidden: int | None = None):
    """(bound rows, [VerifyShape per runtime state]) for a launch with the overlay on;
    (None, []) when it is off, refused or the shapes are unknown (no captured sizes)."""
    from sgl_eagle_ext.common import adaptive_config, chain
    from sgl_eagle_ext.launcher import runtime_states

    if env.get(PCIE_ALLREDUCE_ENV, "").lower() not in ("1", "true", "yes", "on"):
        return None, []
    if not release.pcie_allreduce:
        return None, []
    argv = ServerArgv.of(server_args)
    sizes = runtime_states.decode_capture_sizes(argv)
    if not sizes:
        return None, []  # SGLang's default for the GPU's memory
    steps = argv.num_steps
    if not argv.speculative_algorithm or steps is None:
        states = [(0, 1, tuple(sizes))]
    else:
        tokens = argv.number("speculative-num-draft-tokens", default=chain.draft_tokens(steps))
        buckets = None
        path = argv.value(adaptive_config.FLAG)
        if argv.has("speculative-adaptive") and path:
            buckets, _ = adaptive_config.load(path, release)
        plan = runtime_states.count(steps, buckets, sizes)
        states = [(steps, tokens, plan.states[0].batch_sizes)]
        states += [(s.steps, chain.draft_tokens(s.steps), s.batch_sizes) for s in plan.states[1:]]
    bound = max(sizes) * states[0][1]
    numel = env.get(PCIE_MAX_NUMEL_ENV)
    if numel and hidden:
        try:
            bound = int(numel) // hidden
        except ValueError:
            pass
    shapes = [VerifyShape(s, t, bs, tuple(b for b in bs if b * t > bound)) for s, t, bs in states]
    return bound, shapes


def pcie_bound_lines(release: Release, server_args, env, hidden: int | None = None):
    """(note, [warnings]) on the overlay's size bound for this launch (None: overlay off)."""
    bound, shapes = pcie_bound(release, server_args, env, hidden)
    if bound is None:
        return None, []
    size = f" x hidden {hidden} = {bound * hidden * 2 / 2**20:.1f} MiB bf16" if hidden else ""
    widest = max(s.widest for s in shapes)
    note = (
        f"{PCIE_ALLREDUCE_ENV}: SGLang's PCIe-IPC workspace takes all-reduces of up to "
        f"{bound} rows{size} (the startup state's widest verify); verify shapes: "
        + ", ".join(
            f"{s.steps} steps {s.tokens} tokens/request up to {s.widest} rows" for s in shapes
        )
    )
    warnings = []
    for s in shapes:
        if s.over:
            warnings.append(
                f"{PCIE_ALLREDUCE_ENV}: the {s.steps}-step state verifies {s.tokens} tokens a "
                f"request, wider than the workspace's {bound} rows at batch sizes "
                f"{s.over[0]}-{s.over[-1]}: those all-reduces fall back to NCCL; "
                + (
                    f"set {PCIE_MAX_NUMEL_ENV}={widest * hidden} (SGLang 0.5.23) to cover them"
                    if hidden
                    else f"raise {PCIE_MAX_NUMEL_ENV} (SGLang 0.5.23) to {widest} x hidden"
                )
            )
    return note, warnings
