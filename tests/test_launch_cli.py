"""The launcher without a server: dry-run output per preset and release, overrides,
secrets, and every kind of bad input (one message, exit 2, nothing started)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher import presets

NCCL = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
SPEC = {
    "eagle3-2step": ("2", "4", "16"),
    "eagle3-3step": ("3", "1", "4"),
    "eagle3-5step": ("5", "1", "6"),
}


def launch(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.launch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def command_of(out: str) -> list[str]:
    line = [ln for ln in out.splitlines() if " -m sgl_eagle_ext.in_sglang.serve " in ln]
    assert len(line) == 1, out
    return line[0].split()


def env_of(out: str) -> dict[str, str]:
    return dict(
        ln.split("=", 1)
        for ln in out.splitlines()
        if "=" in ln and not ln.startswith("#") and " " not in ln
    )


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def assert_user_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert p.stderr.count("error:") == 1, p.stderr
    for n in needles:
        assert n in p.stderr, p.stderr


@pytest.mark.parametrize("preset", ["baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step"])
@pytest.mark.parametrize("version", [r.version for r in releases.RELEASES])
def test_dry_run_every_preset_every_release(preset, version):
    p = launch(
        "--preset",
        preset,
        "--model-path",
        "M",
        "--draft-model-path",
        "D",
        "--sglang-version",
        version,
        "--dry-run",
    )
    assert p.returncode == 0, p.stderr
    cmd, env = command_of(p.stdout), env_of(p.stdout)
    # the NCCL block, and the chain-verify switch every preset sets (in_sglang/chain_verify.py)
    assert env == {**NCCL, "EAGLE_EXT_CHAIN_VERIFY": "1"}
    assert flag(cmd, "--tp-size") == "8"
    assert flag(cmd, "--model-path") == "M"
    assert flag(cmd, "--attention-backend") == "triton"
    graph_flag = (
        "--cuda-graph-max-bs"
        if releases.version_key(version) < releases.version_key("0.5.16")
        else "--cuda-graph-max-bs-decode"
    )
    assert flag(cmd, graph_flag) == "128"
    if releases.version_key(version) >= releases.version_key("0.5.21"):
        assert "--cuda-graph-max-bs" not in cmd  # argparse: ambiguous option there
    assert "--enable-flashinfer-allreduce-fusion" not in cmd
    if preset == "baseline":
        assert "--speculative-algorithm" not in cmd and "--speculative-draft-model-path" not in cmd
    else:
        steps, topk, tokens = SPEC[preset]
        assert flag(cmd, "--speculative-algorithm") == "EAGLE3"
        assert flag(cmd, "--speculative-draft-model-path") == "D"
        assert flag(cmd, "--speculative-num-steps") == steps
        assert flag(cmd, "--speculative-eagle-topk") == topk
        assert flag(cmd, "--speculative-num-draft-tokens") == tokens


def test_presets_share_everything_but_speculation():
    base = presets.load("baseline")
    for name in SPEC:
        p = presets.load(name)
        assert p.env == base.env
        non_spec = {k: v for k, v in p.server.items() if not k.startswith("speculative-")}
        assert non_spec == base.server


def test_dry_run_needs_no_sglang():
    code = (
        "import sys, importlib.metadata as md\n"
        "real = md.version\n"
        "def fake(name):\n"
        "    if name == 'sglang': raise md.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "md.version = fake\n"
        "from sgl_eagle_ext.launcher import cli as launch\n"
        "rc = launch.main(['--preset', 'baseline', '--model-path', 'M', '--dry-run'])\n"
        "assert rc == 0\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('sglang', 'torch')]\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"# sglang: {releases.PRIMARY.version} (not installed" in p.stdout


def test_extra_args_override_preset_and_pass_untouched():
    p = launch(
        "--preset",
        "eagle3-2step",
        "--model-path",
        "M",
        "--draft-model-path",
        "D",
        "--sglang-version",
        "0.5.23",
        "--dry-run",
        "--",
        "--tp",
        "4",
        "--cuda-graph-max-bs-decode=64",
        "--speculative-num-steps",
        "3",
        "--some-future-flag",
        "x",
    )
    assert p.returncode == 0, p.stderr
    cmd = command_of(p.stdout)
    assert "--tp-size" not in cmd and flag(cmd, "--tp") == "4"
    assert "--cuda-graph-max-bs-decode" not in cmd and "--cuda-graph-max-bs-decode=64" in cmd
    assert cmd.count("--speculative-num-steps") == 1 and flag(cmd, "--speculative-num-steps") == "3"
    extra = [
        "--tp",
        "4",
        "--cuda-graph-max-bs-decode=64",
        "--speculative-num-steps",
        "3",
        "--some-future-flag",
        "x",
    ]
    assert cmd[-len(extra) :] == extra


def test_old_flag_spelling_is_passed_untouched_with_a_warning():
    p = launch(
        "--preset",
        "baseline",
        "--model-path",
        "M",
        "--sglang-version",
        "0.5.23",
        "--dry-run",
        "--",
        "--cuda-graph-max-bs",
        "64",
    )
    assert p.returncode == 0
    assert "--cuda-graph-max-bs-decode" in p.stderr
    cmd = command_of(p.stdout)
    assert flag(cmd, "--cuda-graph-max-bs") == "64" and "--cuda-graph-max-bs-decode" not in cmd


def test_api_key_never_printed():
    p = launch(
        "--preset", "baseline", "--model-path", "M", "--dry-run", "--", "--api-key", "sekrit-123"
    )
    assert p.returncode == 0
    assert "sekrit-123" not in p.stdout + p.stderr
    assert "--api-key" not in command_of(p.stdout)  # it travels in the environment
    assert env_of(p.stdout)["EAGLE_EXT_API_KEY"] == "'***'"


def test_cpu_overlay_keeps_speculation_and_nccl():
    p = launch(
        "--preset",
        "eagle3-2step",
        "--cpu",
        "--model-path",
        "M",
        "--draft-model-path",
        "D",
        "--sglang-version",
        "0.5.23",
        "--dry-run",
    )
    assert p.returncode == 0, p.stderr
    cmd, env = command_of(p.stdout), env_of(p.stdout)
    assert flag(cmd, "--device") == "cpu" and flag(cmd, "--tp-size") == "1"
    assert flag(cmd, "--cuda-graph-backend-decode") == "disabled"
    assert flag(cmd, "--speculative-num-draft-tokens") == "16"
    assert env["TRITON_INTERPRET"] == "1" and env["EAGLE_EXT_CPU"] == "1"
    assert {k: env[k] for k in NCCL} == NCCL


def test_user_preset_extends_shipped(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'extends = "eagle3-2step"\n[server]\nspeculative-num-steps = 3\nport = 31000\n'
        '[env]\nNCCL_PROTO = "Simple"\n'
    )
    p = launch("--preset-file", str(f), "--model-path", "M", "--draft-model-path", "D", "--dry-run")
    assert p.returncode == 0, p.stderr
    cmd = command_of(p.stdout)
    assert flag(cmd, "--speculative-num-steps") == "3" and flag(cmd, "--port") == "31000"
    assert flag(cmd, "--speculative-eagle-topk") == "4"
    assert env_of(p.stdout)["NCCL_PROTO"] == "Simple"


def test_unknown_release_needs_force():
    p = launch(
        "--preset", "baseline", "--model-path", "M", "--sglang-version", "0.5.22", "--dry-run"
    )
    assert_user_error(p, "0.5.22", "--force")
    p = launch(
        "--preset",
        "baseline",
        "--model-path",
        "M",
        "--sglang-version",
        "0.5.22",
        "--force",
        "--dry-run",
    )
    assert p.returncode == 0
    assert "using the rules of 0.5.21" in p.stdout


def test_forced_pre_release_gets_the_previous_releases_rules():
    """0.5.21rc1 sorts before 0.5.21 (PEP 440): --force applies 0.5.19's rules, not
    those of the release it precedes."""
    args = ["--preset", "eagle3-3step", "--model-path", "M", "--draft-model-path", "D"]
    p = launch(*args, "--sglang-version", "0.5.21rc1", "--dry-run")
    assert_user_error(p, "0.5.21rc1", "--force")
    p = launch(*args, "--sglang-version", "0.5.21rc1", "--force", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "using the rules of 0.5.19" in p.stdout


def test_unknown_preset():
    assert_user_error(
        launch("--preset", "eagle3-9step", "--dry-run"), "eagle3-9step", "baseline, eagle3-2step"
    )


@pytest.mark.parametrize(
    "text, needles",
    [
        ("[server]\ntp-size = 8\nport = \n", ["line 3", "invalid TOML"]),
        ('[server]\n"--tp-size" = 8\n', ["--tp-size", "without leading dashes"]),
        ('extends = "nonesuch"\n', ["'extends'", "nonesuch"]),
        ('colour = "red"\n', ["colour", "unknown top-level field"]),
        ("[env]\nNCCL_PROTO = true\n", ["NCCL_PROTO", "string"]),
        ("[server]\nport = [1, 2]\n", ["port", "list"]),
    ],
)
def test_malformed_preset_file(tmp_path, text, needles):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    before = f.read_bytes()
    assert_user_error(
        launch("--preset-file", str(f), "--model-path", "M", "--dry-run"), str(f), *needles
    )
    assert f.read_bytes() == before


def test_extends_cycle(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    assert_user_error(launch("--preset-file", str(tmp_path / "a.toml"), "--dry-run"), "cycle")


def test_missing_preset_file(tmp_path):
    assert_user_error(
        launch("--preset-file", str(tmp_path / "nope.toml"), "--dry-run"), "does not exist"
    )


def test_speculative_preset_needs_draft():
    assert_user_error(
        launch("--preset", "eagle3-3step", "--model-path", "M", "--dry-run"), "--draft-model-path"
    )


def test_sm120_rejected_flags():
    assert_user_error(
        launch(
            "--preset",
            "baseline",
            "--model-path",
            "M",
            "--dry-run",
            "--",
            "--attention-backend",
            "trtllm_mla",
        ),
        "trtllm_mla",
        "SM120",
    )
    assert_user_error(
        launch(
            "--preset",
            "baseline",
            "--model-path",
            "M",
            "--dry-run",
            "--",
            "--enable-flashinfer-allreduce-fusion",
        ),
        "allreduce",
    )


def test_missing_model_directory(tmp_path):
    p = launch(
        "--preset",
        "baseline",
        "--model-path",
        str(tmp_path / "no-such-model"),
        "--log-file",
        str(tmp_path / "server.log"),
    )
    assert_user_error(p, "no-such-model", "no such directory")
    assert not (tmp_path / "server.log").exists()  # nothing was started
    (tmp_path / "empty").mkdir()
    assert_user_error(
        launch("--preset", "baseline", "--model-path", str(tmp_path / "empty")), "config.json"
    )


def test_port_in_use(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = launch(
            "--preset",
            "baseline",
            "--model-path",
            str(model),
            "--log-file",
            str(tmp_path / "server.log"),
            "--",
            "--port",
            str(port),
        )
    assert_user_error(p, f"port {port}", "already in use")
    assert not (tmp_path / "server.log").exists()
