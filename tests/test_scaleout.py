"""Scale-out argument checks (sgl_eagle_ext/launcher/preflight/scaleout.py) and the scale-out overlays."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.launcher import plan, presets
from sgl_eagle_ext.launcher.preflight import scaleout

NODE0 = [
    "--tp-size",
    "16",
    "--nnodes",
    "2",
    "--node-rank",
    "0",
    "--dist-init-addr",
    "10.0.0.1:20000",
    "--port",
    "30000",
]


def ids(found, severity=None):
    return {f.id for f in found if severity is None or f.severity == severity}


def with_args(base: list[str], *extra: str) -> list[str]:
    return [*base, *extra]  # the last spelling wins, as in argparse


def test_single_node_launch_has_nothing_to_say():
    assert scaleout.check(["--tp-size", "8"]) == []
    assert scaleout.gpus_per_node(["--tp-size", "8"]) == 8
    assert not scaleout.is_worker_node(["--tp-size", "8"])


def test_valid_two_node_tp16():
    found = scaleout.check(NODE0, {"NCCL_SOCKET_IFNAME": "ens1f0"})
    assert ids(found, "error") == set() and ids(found, "warning") == set()
    assert ids(found) == {"scaleout.layout"}
    assert scaleout.gpus_per_node(NODE0) == 8
    worker = with_args(NODE0, "--node-rank", "1")
    assert scaleout.is_worker_node(worker)
    assert (
        "serves no requests"
        in next(f for f in scaleout.check(worker) if f.id == "scaleout.layout").message
    )
    assert "scaleout.network" in ids(scaleout.check(NODE0, {}))


@pytest.mark.parametrize(
    "extra, error",
    [
        (["--node-rank", "2"], "scaleout.node-rank"),
        (["--node-rank", "-1"], "scaleout.node-rank"),
        (["--tp-size", "12", "--nnodes", "5"], "scaleout.tp-nnodes"),
        (["--dp-size", "2"], "scaleout.dp-multinode"),
        (["--dist-init-addr", "10.0.0.1"], "scaleout.dist-init-addr-format"),
        (["--dist-init-addr", "10.0.0.1:port"], "scaleout.dist-init-addr-format"),
        (["--dist-init-addr", "10.0.0.1:70000"], "scaleout.dist-init-addr-format"),
        (["--dist-init-addr", "fd00::1:20000"], "scaleout.dist-init-addr-format"),
        (["--dist-init-addr", "127.0.0.1:20000"], "scaleout.dist-init-addr-host"),
        (["--dist-init-addr", "localhost:20000"], "scaleout.dist-init-addr-host"),
        (["--dist-init-addr", "0.0.0.0:20000"], "scaleout.dist-init-addr-host"),
        (["--dist-init-addr", "10.0.0.1:30000"], "scaleout.dist-init-port"),
        (["--nnodes", "two"], "scaleout.nnodes"),
        (["--nnodes", "0"], "scaleout.nnodes"),
    ],
)
def test_bad_multi_node_arguments_are_errors(extra, error):
    assert error in ids(scaleout.check(with_args(NODE0, *extra)), "error")


def test_dist_init_addr_is_required_and_accepts_names_ipv6_and_the_alias():
    no_addr = ["--tp-size", "16", "--nnodes", "2", "--node-rank", "1"]
    assert "scaleout.dist-init-addr-missing" in ids(scaleout.check(no_addr), "error")
    for addr in ("node0.cluster:20000", "[fd00::1]:20000", "192.168.1.10:1"):
        assert ids(scaleout.check([*no_addr, "--dist-init-addr", addr]), "error") == set(), addr
    assert ids(scaleout.check([*no_addr, "--nccl-init-addr=10.0.0.1:20000"]), "error") == set()


def test_node_rank_without_nnodes():
    found = scaleout.check(["--tp-size", "8", "--node-rank", "1"])
    assert "scaleout.node-rank" in ids(found, "error")


def test_aliases_and_equals_spelling():
    args = [
        "--tensor-parallel-size=16",
        "--nnodes=2",
        "--node-rank=1",
        "--dist-init-addr=10.0.0.1:20000",
    ]
    assert ids(scaleout.check(args), "error") == set()
    assert scaleout.gpus_per_node(args) == 8
    assert scaleout.gpus_per_node(["--tp", "8", "--pp-size", "2", "--nnodes", "2"]) == 8


def test_pipeline_parallel_with_eagle3_is_a_warning():
    found = scaleout.check(
        [
            "--tp-size",
            "8",
            "--pp-size",
            "2",
            "--nnodes",
            "2",
            "--dist-init-addr",
            "10.0.0.1:20000",
            "--speculative-algorithm",
            "EAGLE3",
        ]
    )
    assert "scaleout.pp-eagle3" in ids(found, "warning")


def test_enforce_raises_one_user_error_with_every_problem():
    with pytest.raises(UserError) as e:
        scaleout.enforce(with_args(NODE0, "--node-rank", "3", "--dist-init-addr", "127.0.0.1:1"))
    assert "--node-rank 3" in e.value.message and "127.0.0.1" in e.value.message
    assert scaleout.enforce(NODE0) == []


def test_rendered_presets_with_scale_out_overlays_check_clean():
    """The shipped scale-out overlay on each preset, plus the per-node arguments the guide
    tells operators to add, renders to arguments the checks accept."""
    release = releases.PRIMARY
    overlay = presets.load(path=presets.PRESET_DIR / "overlays" / "2node.toml")
    for name in presets.shipped():
        preset = presets.load(name=name).merged_with(overlay)
        for rank in ("0", "1"):
            args = plan.render_server_args(
                preset,
                release,
                [
                    "--model-path",
                    "/models/t",
                    "--node-rank",
                    rank,
                    "--dist-init-addr",
                    "10.0.0.1:20000",
                ],
            )
            assert ids(scaleout.check(args), "error") == set(), (name, rank, args)
            assert scaleout.gpus_per_node(args) == 8


# -- the launcher's --overlay ---------------------------------------------------
def dry_run(capsys, *argv: str) -> tuple[int, str, str]:
    from sgl_eagle_ext.launcher import cli as launch

    code = launch.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_launcher_overlay_2node_renders_multi_node_tp(capsys):
    code, out, _ = dry_run(
        capsys,
        "--preset",
        "eagle3-3step",
        "--overlay",
        "2node",
        "--model-path",
        "/m/t",
        "--draft-model-path",
        "/m/d",
        "--dry-run",
        "--",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "10.0.0.1:20000",
    )
    assert code == 0
    cmd = out.strip().splitlines()[-1].split()
    assert cmd[cmd.index("--tp-size") + 1] == "16" and cmd[cmd.index("--nnodes") + 1] == "2"
    assert cmd[cmd.index("--node-rank") + 1] == "1"
    assert "NCCL_PROTO=LL" in out, "the preset's NCCL block stays"
    assert scaleout.is_worker_node(cmd) and ids(scaleout.check(cmd), "error") == set()


def test_launcher_overlay_errors_and_own_files(capsys, tmp_path):
    code, _, err = dry_run(
        capsys, "--preset", "baseline", "--overlay", "3node", "--model-path", "/m/t", "--dry-run"
    )
    assert code == 2 and "no such overlay" in err and "2node" in err
    mine = tmp_path / "big-batch.toml"
    mine.write_text('description = "mine"\n[server]\nmax-running-requests = 64\n')
    code, out, _ = dry_run(
        capsys, "--preset", "baseline", "--overlay", str(mine), "--model-path", "/m/t", "--dry-run"
    )
    assert code == 0 and "--max-running-requests 64" in out
    # an overlay without `hardware` keeps the preset's SM120 flag guard
    code, _, err = dry_run(
        capsys,
        "--preset",
        "baseline",
        "--overlay",
        str(mine),
        "--model-path",
        "/m/t",
        "--dry-run",
        "--",
        "--attention-backend",
        "trtllm_mla",
    )
    assert code == 2 and "SM120" in err
