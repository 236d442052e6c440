"""NCCL propagation pieces without a server (the per-rank lines of real
scheduler processes are checked in tests/test_server_cpu.py)."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.common import nccl_line, releases
from sgl_eagle_ext.in_sglang import nccl_report
from sgl_eagle_ext.launcher import nccl

PRESET = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "16777216"}


def test_rank_line_round_trip():
    env = {**PRESET, "PATH": "/bin", "CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    line = "[2026-11-29 10:00:00 TP1] " + nccl_report.rank_line(1, env)
    rank, seen = nccl_line.parse_line(line)
    assert rank == "1" and seen == {**PRESET, "CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    assert nccl_line.parse_line("Decode batch, #running-req: 1") is None
    # the launcher's expectation is the same selection the rank reports
    assert nccl.expected(env) == seen


def test_table_flags_a_rank_that_differs():
    reports = {
        "0": dict(PRESET),
        "1": {**PRESET, "NCCL_PROTO": "Simple"},
        "2": {k: v for k, v in PRESET.items() if k != "NCCL_ALGO"},
    }
    text, warnings = nccl.table(reports, PRESET)
    header = text.splitlines()[0]
    assert all(f"rank {r}" in header for r in "012")
    assert sorted(warnings) == [
        "rank 1 has NCCL_PROTO=Simple, the preset says LL",
        "rank 2 has NCCL_ALGO=<unset>, the preset says Ring",
    ]
    assert nccl.table({"0": dict(PRESET)}, PRESET)[1] == []


def test_override_warnings_per_release():
    r23, r10 = releases.BY_VERSION["0.5.23"], releases.BY_VERSION["0.5.10.post1"]
    env = {**PRESET, "NCCL_MAX_NCHANNELS": "16", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    plain = nccl.override_warnings(r23, ["--tp-size", "8"], env)
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in w for w in plain)
    assert not any("NCCL_ALGO" in w for w in plain)
    det = ["--tp-size", "8", "--enable-deterministic-inference"]
    assert any("NCCL_ALGO=Ring" in w for w in nccl.override_warnings(r23, det, env))
    assert any("NCCL_MAX_NCHANNELS" in w for w in nccl.override_warnings(r23, det, env))
    assert not any("NCCL_MAX_NCHANNELS" in w for w in nccl.override_warnings(r10, det, env))
    assert any(w.startswith("note:") and "NCCL_GRAPH_REGISTER" in w for w in plain)
    # a value exported in the shell (the server inherits it) is overwritten alike, and
    # said so; one SGLang only fills in when unset is then left alone (no note)
    shell = {"CUDA_DEVICE_MAX_CONNECTIONS": "32", "NCCL_GRAPH_REGISTER": "1"}
    said = nccl.override_warnings(r23, ["--tp-size", "8"], dict(PRESET), shell)
    assert any(
        "overwrites CUDA_DEVICE_MAX_CONNECTIONS=32 (exported in this shell)" in w for w in said
    ), said
    assert not any("NCCL_GRAPH_REGISTER" in w for w in said)


def test_debug_summary(tmp_path):
    (tmp_path / "nccl.host.11.log").write_text(
        "host:11:11 [0] NCCL INFO NCCL_PROTO set by environment to LL\n"
        "host:11:11 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.\n"
        "host:11:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 - Init COMPLETE\n"
    )
    assert nccl.debug_summary(tmp_path) == {
        "nccl.host.11.log": {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"}
    }
    env = nccl.debug_env(tmp_path)
    assert env["NCCL_DEBUG"] == "INFO" and "%p" in env["NCCL_DEBUG_FILE"]


def _says(release: str, args: list[str], env: dict, var: str) -> list[str]:
    r = releases.BY_VERSION[release]
    return [w for w in nccl.override_warnings(r, args, env) if var + "=" in w or var + " " in w]


def test_override_table_conditions():
    """Issue 10 defect 4: each entry fires exactly under the release's own condition."""
    mixing = "NCCL_GRAPH_MIXING_SUPPORT"
    symm_dcp = ["--tp-size", "8", "--enable-symm-mem", "--dcp-size", "2"]
    assert _says("0.5.16", symm_dcp, {mixing: "1"}, mixing)[0].startswith(
        "SGLang 0.5.16 overwrites"
    )
    assert _says("0.5.16", ["--dcp-size", "2"], {}, mixing)[0].startswith("note:")
    assert _says("0.5.16", ["--enable-symm-mem"], {mixing: "1"}, mixing) == []  # dcp 1
    assert _says("0.5.13.post1", symm_dcp, {mixing: "1"}, mixing) == []

    reg = "NCCL_GRAPH_REGISTER"
    tp8 = ["--tp-size", "8"]
    assert _says("0.5.23", tp8, {}, reg)  # the TP8 + graphs case
    assert _says("0.5.23", ["--ep-size", "2"], {}, reg)
    assert _says("0.5.23", ["--tp-size", "1"], {}, reg) == []
    off = [
        *tp8,
        "--cuda-graph-backend-decode",
        "disabled",
        "--cuda-graph-backend-prefill",
        "disabled",
    ]
    assert _says("0.5.23", off, {}, reg) == []
    assert _says("0.5.21", tp8, {}, reg) == []  # only with the TP LM-head all-to-all
    assert _says("0.5.21", [*tp8, "--enable-tp-lm-head-all-to-all"], {}, reg)
    pure_dp = [*tp8, "--dp-size", "8", "--enable-dp-attention", "--disaggregation-mode", "decode"]
    assert _says("0.5.21", pure_dp, {}, reg)
    assert _says("0.5.19", [*tp8, "--enable-tp-lm-head-all-to-all"], {}, reg) == []

    for var in ("NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE"):
        assert any("MNNVL" in w for w in _says("0.5.19", ["--nnodes", "2"], {}, var))
        assert not any("MNNVL" in w for w in _says("0.5.19", ["--nnodes", "1"], {}, var))
        assert not any("MNNVL" in w for w in _says("0.5.16", ["--nnodes", "2"], {}, var))


def test_pdl_and_nvshmem_qp_depth_are_in_the_table():
    """Defect 5: SGLang normalises TRTLLM_ENABLE_PDL (every release) and, 0.5.21+, raises
    NVSHMEM_QP_DEPTH in each rank under DeepEP."""
    assert _says("0.5.10.post1", [], {}, "TRTLLM_ENABLE_PDL")[0].startswith("note:")
    deepep = ["--moe-a2a-backend", "deepep"]
    assert (
        "overwrites NVSHMEM_QP_DEPTH=128"
        in _says("0.5.23", deepep, {"NVSHMEM_QP_DEPTH": "128"}, "NVSHMEM_QP_DEPTH")[0]
    )
    assert _says("0.5.23", [], {"NVSHMEM_QP_DEPTH": "128"}, "NVSHMEM_QP_DEPTH") == []
    assert _says("0.5.19", deepep, {"NVSHMEM_QP_DEPTH": "128"}, "NVSHMEM_QP_DEPTH") == []


@pytest.mark.harness  # reads the harness venvs' SGLang sources
def test_env_table_names_are_in_the_harness_sources():
    """Each variable the table lists for the installed harness release is in its source."""
    from sgl_eagle_ext.common import wheels

    pkg = wheels.installed_source()
    rel = releases.BY_VERSION.get(wheels.source_version(pkg) or "") if pkg else None
    assert rel is not None, "run under a harness venv (.venv or .venv-0.5.10.post1)"
    text = "\n".join(p.read_text(errors="replace") for p in (pkg / "srt").rglob("*.py"))
    assert [o.var for o in rel.env_overrides if o.var not in text] == []


# -- issue 24: SGLang's unconditional defaults, the rank count, the PCIe all-reduce ------
def test_sglang_defaults_explain_the_ranks_unset_rows():
    """engine.py writes NCCL_CUMEM_ENABLE and NCCL_NVLS_ENABLE whenever unset, in every
    release: the table says so, for the rows the preset left empty."""
    for r in releases.RELEASES:
        notes = nccl.override_warnings(r, ["--tp-size", "8"], dict(PRESET))
        assert any(w.startswith("note:") and "NCCL_CUMEM_ENABLE" in w for w in notes), r.version
        assert any(w.startswith("note:") and "NCCL_NVLS_ENABLE" in w for w in notes), r.version
    seen = {"0": {**PRESET, "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}}
    lines = nccl.explain(releases.BY_VERSION["0.5.23"], ["--tp-size", "1"], seen, PRESET)
    assert [ln.split(":")[0] for ln in lines] == ["NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"]
    assert all("not in the preset; SGLang 0.5.23 sets it (0 when unset" in ln for ln in lines)
    # a value the preset set is the preset's, not explained away
    mine = {**PRESET, "NCCL_CUMEM_ENABLE": "1"}
    assert nccl.explain(releases.BY_VERSION["0.5.23"], [], {"0": mine}, mine) == []


def test_rank_table_checks_it_heard_every_tp_rank():
    assert nccl.expected_ranks(["--tp-size", "8"]) == 8
    assert nccl.expected_ranks([]) == 1
    assert nccl.expected_ranks(["--tp", "16", "--nnodes", "2"]) == 8  # this node's share
    assert nccl.expected_ranks(["--tp-size", "8", "--pp-size", "2", "--nnodes", "2"]) == 8
    eight = {str(r): dict(PRESET) for r in range(8)}
    assert nccl.rank_count_warning(eight, 8) is None
    seven = {k: v for k, v in eight.items() if k != "3"}
    assert nccl.rank_count_warning(seven, 8) == (
        "only 7 of 8 TP rank(s) reported their NCCL settings (missing: rank 3): the table "
        "proves nothing about the others"
    )
    node1 = {str(r): dict(PRESET) for r in range(8, 15)}  # node 1 of TP 16, one missing
    assert "only 7 of 8" in nccl.rank_count_warning(node1, 8)


def test_pcie_allreduce_is_gated_by_release_and_tp():
    on = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert [r.version for r in nccl.releases_with_pcie()] == ["0.5.21", "0.5.23"]
    assert nccl.pcie_allreduce(releases.BY_VERSION["0.5.23"], ["--tp-size", "8"], on) == (None, [])
    refused, _ = nccl.pcie_allreduce(releases.BY_VERSION["0.5.19"], ["--tp-size", "8"], on)
    assert refused == "SGLang 0.5.19 has no PCIe-IPC all-reduce (0.5.21, 0.5.23 do)"
    _, idle = nccl.pcie_allreduce(
        releases.BY_VERSION["0.5.21"], ["--tp-size", "6", "--enable-deterministic-inference"], on
    )
    assert len(idle) == 2 and "TP 6" in idle[0] and "deterministic" in idle[1]
    assert nccl.pcie_allreduce(releases.BY_VERSION["0.5.10.post1"], [], {}) == (None, [])


def test_pcie_allreduce_overlay_sets_the_variable_and_a_dry_run_refuses_old_releases(capsys):
    from sgl_eagle_ext.launcher import cli, plan

    request = plan.LaunchRequest(
        preset="baseline", model_path="/m", overlays=("pcie-allreduce",), sglang_version="0.5.23"
    )
    assert plan.build(request).env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    args = ["--preset", "baseline", "--overlay", "pcie-allreduce", "--model-path", "/m"]
    assert cli.main([*args, "--dry-run", "--sglang-version", "0.5.19"]) == 2
    err = capsys.readouterr().err
    assert "SGLang 0.5.19 has no PCIe-IPC all-reduce" in err and "nothing was started" in err


@pytest.mark.harness  # reads the harness venv's SGLang sources
def test_pcie_allreduce_and_nccl_defaults_match_the_installed_source():
    from sgl_eagle_ext.common import wheels

    pkg = wheels.installed_source()
    rel = releases.BY_VERSION[wheels.source_version(pkg)]
    module = pkg / "srt" / "distributed" / "device_communicators" / "pcie_ipc_ar.py"
    assert rel.pcie_allreduce == module.is_file()
    if module.is_file():
        text = module.read_text()
        assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in (pkg / "srt" / "environ.py").read_text()
        assert f"_SUPPORTED_WORLD_SIZES = {releases.PCIE_ALLREDUCE_TP}" in text
    engine = (pkg / "srt" / "entrypoints" / "engine.py").read_text()
    for var in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"):  # written whenever unset
        assert f'"{var}" not in os.environ' in engine
