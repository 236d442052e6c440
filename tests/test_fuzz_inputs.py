"""Hostile input to every command line (launch, preflight, report, bench, router,
healthcheck, patches, tune): ports, URLs, numbers, presets, configs,
logs, output paths. Each must end with exit 2 and one clear error line, never a
traceback, and start nothing. The commands run in-process (their real `main`),
so an exception that escapes them fails the test instead of printing."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.launcher import cli as launch
from sgl_eagle_ext.launcher.preflight import cli as preflight
from sgl_eagle_ext.profiling import report
from sgl_eagle_ext.tools import healthcheck, router
from sgl_eagle_ext.tools.bench import cli as bench
from sgl_eagle_ext.tools.patches import cli as patches
from sgl_eagle_ext.tools.tune import cli as tune
from tests.test_preflight import DRAFT_TENSORS, eagle3_draft, kimi_target, model_dir

ROOT = os.geteuid() == 0
DEEP_JSON = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"n": ' + "9" * 5000 + "}"
NOWHERE = "http://127.0.0.1:9"  # discard port: nothing answers


def run(main, argv: list[str]) -> tuple[int, str]:
    """(exit code, stdout + stderr) of an in-process run; an escaping exception fails."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fuzz")
    f = {"dir": tmp / "a-dir", "file": tmp / "a-file"}
    f["dir"].mkdir()
    f["file"].write_text("x\n")
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    f["model"] = model
    bad_port = tmp / "port.toml"
    bad_port.write_text('extends = "baseline"\n[server]\nport = "abc"\n')
    f["port_preset"] = bad_port
    loop = tmp / "loop.toml"
    loop.symlink_to(loop)
    f["loop_preset"] = loop
    chain = tmp / "chain"
    chain.mkdir()
    for i in range(1100):
        (chain / f"p{i}.toml").write_text(
            f'extends = "p{i + 1}.toml"\n' if i < 1099 else 'extends = "baseline"\n'
        )
    f["chain_preset"] = chain / "p0.toml"
    deep = tmp / "deep.toml"
    deep.write_text("[server]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    f["deep_preset"] = deep
    for name, text in (("deep", DEEP_JSON), ("huge", HUGE_INT)):
        (tmp / f"{name}.jsonl").write_text(text + "\n")
        f[f"{name}_jsonl"] = tmp / f"{name}.jsonl"
    nccl_file = tmp / "srv.nccl"
    nccl_file.write_text("not a folder")
    f["nccl_clash_log"] = tmp / "srv.log"
    return f


def launch_args(files, *more: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "--preset",
        "baseline",
        "--model-path",
        str(files["model"]),
        "--no-preflight",
        *more,
        "--",
        *extra,
    ]


# (name, main, argv builder, words the one error line must hold)
CASES = [
    # -- the launcher
    ("launch port abc", launch.main, lambda f: launch_args(f, extra=("--port", "abc")), "abc"),
    (
        "launch port 99999",
        launch.main,
        lambda f: launch_args(f, extra=("--port", "99999")),
        "99999",
    ),
    ("launch port -5", launch.main, lambda f: launch_args(f, extra=("--port=-5",)), "-5"),
    (
        "launch preset port abc",
        launch.main,
        lambda f: ["--preset-file", str(f["port_preset"]), "--model-path", str(f["model"])],
        "not a TCP port",
    ),
    (
        "launch preset link loop",
        launch.main,
        lambda f: ["--preset-file", str(f["loop_preset"])],
        "loop.toml",
    ),
    (
        "launch extends 1100 deep",
        launch.main,
        lambda f: ["--preset-file", str(f["chain_preset"])],
        "deeper than",
    ),
    ("launch deep TOML", launch.main, lambda f: ["--preset-file", str(f["deep_preset"])], "deep"),
    (
        "launch log-file dir",
        launch.main,
        lambda f: launch_args(f, "--log-file", str(f["dir"])),
        "directory",
    ),
    (
        "launch log-file under a file",
        launch.main,
        lambda f: launch_args(f, "--log-file", str(f["file"] / "x.log")),
        "is a file",
    ),
    (
        "launch nccl-debug under a file",
        launch.main,
        lambda f: launch_args(f, "--nccl-debug", "--log-file", str(f["file"] / "x.log")),
        "is a file",
    ),
    (
        "launch nccl-debug folder is a file",
        launch.main,
        lambda f: launch_args(f, "--nccl-debug", "--log-file", str(f["nccl_clash_log"])),
        "not a folder",
    ),
    (
        "launch stall-timeout -1",
        launch.main,
        lambda f: launch_args(f, "--stall-timeout", "-1"),
        "-1",
    ),
    (
        "launch stall-timeout nan",
        launch.main,
        lambda f: launch_args(f, "--stall-timeout", "nan"),
        "nan",
    ),
    (
        "launch startup-timeout inf",
        launch.main,
        lambda f: launch_args(f, "--startup-timeout", "inf"),
        "inf",
    ),
    (
        "launch unresolvable host",
        launch.main,
        lambda f: launch_args(
            f, "--log-file", str(f["dir"] / "h.log"), extra=("--host", "no-such-host.invalid")
        ),
        "cannot be resolved",
    ),
    (
        "launch api-key-file missing",
        launch.main,
        lambda f: launch_args(f, "--api-key-file", str(f["dir"] / "nope")),
        "--api-key-file",
    ),
    (
        "launch model path is a file",
        launch.main,
        lambda f: ["--preset", "baseline", "--model-path", str(f["file"])],
        "not a directory",
    ),
    # -- bench
    ("bench url [::1", bench.main, lambda f: ["single", "--url", "http://[::1"], "http://[::1"),
    ("bench url port 99999", bench.main, lambda f: ["sweep", "--url", "http://h:99999"], "99999"),
    ("bench temperature nan", bench.main, lambda f: ["single", "--temperature", "nan"], "nan"),
    (
        "bench request-timeout nan",
        bench.main,
        lambda f: ["sweep", "--request-timeout", "nan"],
        "nan",
    ),
    ("bench request-timeout -1", bench.main, lambda f: ["single", "--request-timeout", "-1"], "-1"),
    ("bench slo nan", bench.main, lambda f: ["sweep", "--slo-tpot-ms", "nan"], "nan"),
    (
        "bench concurrency 100000",
        bench.main,
        lambda f: ["sweep", "--url", NOWHERE, "--concurrency", "1,100000"],
        "100000",
    ),
    ("bench concurrency abc", bench.main, lambda f: ["sweep", "--concurrency", "1,abc"], "abc"),
    (
        "bench results dir",
        bench.main,
        lambda f: ["single", "--url", NOWHERE, "--results", str(f["dir"])],
        "directory",
    ),
    (
        "bench results /tmp",
        bench.main,
        lambda f: ["single", "--url", NOWHERE, "--results", "/tmp"],
        "directory",
    ),
    (
        "bench results under a file",
        bench.main,
        lambda f: ["sweep", "--url", NOWHERE, "--results", str(f["file"] / "r.jsonl")],
        "is a file",
    ),
    (
        "bench prompts deep JSON",
        bench.main,
        lambda f: ["single", "--url", NOWHERE, "--prompts", str(f["deep_jsonl"])],
        "nested",
    ),
    (
        "bench prompts 5000 digits",
        bench.main,
        lambda f: ["single", "--url", NOWHERE, "--prompts", str(f["huge_jsonl"])],
        "digits",
    ),
    (
        "bench prompts a dir",
        bench.main,
        lambda f: ["single", "--prompts", str(f["dir"])],
        "--prompts",
    ),
    (
        "bench ab port 99999",
        bench.main,
        lambda f: ["ab", "--preset-b", "eagle3-2step", "--port", "99999"],
        "99999",
    ),
    ("bench plot a dir", bench.main, lambda f: ["plot", str(f["dir"])], "is a directory"),
    (
        "bench key after --",
        bench.main,
        lambda f: ["single", "--", "--api-key", "CANARY-FUZZ"],
        "only go to",
    ),
    # -- report
    ("report a dir", report.main, lambda f: [str(f["dir"])], "is a directory"),
    (
        "report baseline-tps nan",
        report.main,
        lambda f: [str(f["file"]), "--baseline-tps", "nan"],
        "nan",
    ),
    (
        "report target-tps inf",
        report.main,
        lambda f: [str(f["file"]), "--target-tps", "inf"],
        "inf",
    ),
    # -- router
    ("router url [::1", router.main, lambda f: ["--worker-url", "http://[::1"], "http://[::1"),
    (
        "router port 99999",
        router.main,
        lambda f: ["--worker-url", NOWHERE, "--port", "99999"],
        "99999",
    ),
    ("router port abc", router.main, lambda f: ["--worker-url", NOWHERE, "--port", "abc"], "abc"),
    (
        "router unresolvable host",
        router.main,
        lambda f: ["--worker-url", NOWHERE, "--host", "no-such-host.invalid"],
        "cannot be resolved",
    ),
    (
        "router timeout nan",
        router.main,
        lambda f: ["--worker-url", NOWHERE, "--worker-timeout", "nan"],
        "nan",
    ),
    # -- healthcheck
    ("healthcheck url [::1", healthcheck.main, lambda f: ["--url", "http://[::1"], "http://[::1"),
    ("healthcheck url port -5", healthcheck.main, lambda f: ["--url", "http://h:-5"], "-5"),
    ("healthcheck timeout nan", healthcheck.main, lambda f: ["--timeout", "nan"], "nan"),
    # -- tune
    ("tune a dir", tune.main, lambda f: [str(f["dir"])], "is a directory"),
    (
        "tune baseline-tps nan",
        tune.main,
        lambda f: [str(f["file"]), "--baseline-tps", "nan"],
        "nan",
    ),
    ("tune min-gain -1", tune.main, lambda f: [str(f["file"]), "--min-gain", "-1"], "-1"),
    ("tune deep JSON log", tune.main, lambda f: [str(f["deep_jsonl"])], "no EAGLE3_PROFILE"),
    ("tune 5000-digit log", tune.main, lambda f: [str(f["huge_jsonl"])], "no EAGLE3_PROFILE"),
    # -- patches
    (
        "patches unknown release",
        patches.main,
        lambda f: ["check", "--sglang-dir", str(f["dir"])],
        "not an sglang",
    ),
    # -- preflight
    (
        "preflight port abc",
        preflight.main,
        lambda f: ["--model-path", str(f["model"]), "--port", "abc"],
        "abc",
    ),
]


@pytest.mark.parametrize("name, main, argv, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line_and_exit_2(files, name, main, argv, words):
    code, text = run(main, argv(files))
    assert "Traceback" not in text
    assert code == 2, f"{name}: exit {code}\n{text}"
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) == 1, f"{name}: {text}"
    assert words in text, f"{name}: {text}"
    assert "CANARY-FUZZ" not in text


def test_log_file_in_a_read_only_folder_is_refused(files, tmp_path):
    if ROOT:  # root may write into a mode-0500 folder; not into a process's /proc entry
        ro = Path("/proc/1")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
    code, text = run(launch.main, launch_args(files, "--log-file", str(ro / "x.log")))
    assert code == 2 and "permission denied" in text


def test_results_log_file_router_log_refused_before_anything(files, tmp_path):
    code, text = run(
        router.main,
        [
            "--worker-url",
            NOWHERE,
            "--port",
            "39871",
            "--metrics-port",
            "39872",
            "--log-file",
            str(files["dir"]),
        ],
    )
    assert code == 2 and "directory" in text and "Traceback" not in text


def test_concurrency_beyond_the_open_file_limit_is_refused(tmp_path):
    """`ulimit -n 1024` (soft and hard): 3000 clients cannot fit: refused up front."""

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgl_eagle_ext.bench",
            "sweep",
            "--url",
            NOWHERE,
            "--concurrency",
            "1,3000",
            "--results",
            str(tmp_path / "r.jsonl"),
        ],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert "3000 clients need about 3064 open files" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_concurrency_raises_the_soft_limit_to_the_hard_one(tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    code = (
        "import resource; from sgl_eagle_ext.tools.bench import limits; "
        "limits.check_concurrency(3000); print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit
    )
    assert p.returncode == 0 and p.stdout.strip() == "4096", p.stderr
    assert "raised from 256 to 4096" in p.stderr


# ---------------------------------------------------------------- wrong verdicts


@pytest.mark.parametrize("where", ["max_position_embeddings", "rope factor"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_preflight_never_says_ok_on_nan_or_infinity(tmp_path, where, value):
    draft = eagle3_draft()
    if where == "rope factor":
        draft["rope_scaling"] = {**draft["rope_scaling"], "factor": value}
    else:
        draft["max_position_embeddings"] = value
    t = model_dir(tmp_path, "target", kimi_target())
    d = model_dir(tmp_path, "draft", json.dumps(draft), DRAFT_TENSORS)  # writes NaN / Infinity
    code, text = run(
        preflight.main, ["--model-path", str(t), "--draft-model-path", str(d), "--no-host"]
    )
    assert code != 0 and "Traceback" not in text
    assert "config.bad-field" in text and "not a finite number" in text
    assert "preflight OK" not in text


@pytest.mark.parametrize("config", [DEEP_JSON, HUGE_INT], ids=["deep", "5000-digits"])
def test_preflight_reports_unparsable_configs(tmp_path, config):
    t = model_dir(tmp_path, "target", config)
    code, text = run(preflight.main, ["--model-path", str(t), "--no-host"])
    assert code != 0 and "Traceback" not in text and "config.invalid-json" in text


def test_report_json_is_valid_and_a_nan_line_does_not_poison_its_group(tmp_path):
    from tests.test_report import profile_line

    good = profile_line(1, 30.0, 28.5, [2] * 19 + [3])
    bad = good.replace("verify_fwd_ms=", "verify_fwd_ms=nan/", 1)
    bad_json = json.dumps({"v": 1, "rank": 0, "cycles": 5, "bs": {"1": 5}, "x": math.nan})
    log = tmp_path / "server.log"
    log.write_text(
        "\n".join([good, bad, bad_json, DEEP_JSON, HUGE_INT.replace("n", "cycles"), good]) + "\n"
    )
    code, text = run(report.main, [str(log), "--json", "--baseline-tps", "82"])
    assert code == 0, text
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    (row,) = data["rows"]
    assert row["windows"] == 2 and data["skipped_lines"] >= 2
    assert math.isfinite(row["phases"]["verify_fwd"]["mean_ms"])
    assert row["break_even_accept_len"] == pytest.approx(2.46, abs=0.005)
