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
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import wheels
from sgl_eagle_ext.launcher import cli as launch
from sgl_eagle_ext.launcher.preflight import cli as preflight
from sgl_eagle_ext.profiling import report
from sgl_eagle_ext.tools import healthcheck, imagebuild, router
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
    (
        "preflight context-length 5000 digits",  # exited 0: the number was never read
        preflight.main,
        lambda f: ["--model-path", str(f["model"]), "--context-length", "9" * 5000],
        "not a whole number",
    ),
    # -- one number parser: a timeout of 1e308 overflowed threading's wait (a traceback)
    *(
        (
            f"tune live startup-timeout {value}",
            tune.main,
            lambda f, value=value: [
                "live",
                "--model-path",
                "m",
                "--draft-model-path",
                "d",
                "--results",
                str(f["dir"] / "r.jsonl"),
                "--startup-timeout",
                value,
            ],
            words,
        )
        for value, words in (("1e308", "at most"), ("nan", "finite"), ("-1", "zero or positive"))
    ),
    (
        "launch stall-timeout 1e308",
        launch.main,
        lambda f: launch_args(f, "--stall-timeout", "1e308", "--dry-run"),
        "at most",
    ),
    (
        "bench seed 400 digits",
        bench.main,
        lambda f: ["single", "--url", NOWHERE, "--seed", "9" * 400],
        "not a whole number",
    ),
    # -- SGLang's own --config, read by the launcher: its file checked as every file
    (
        "launch config FIFO-free missing file",
        launch.main,
        lambda f: launch_args(f, "--dry-run", extra=("--config", str(f["dir"] / "no.yaml"))),
        "no such file",
    ),
    (
        "launch config=FILE",  # SGLang would not read it: said, not ignored
        launch.main,
        lambda f: launch_args(f, "--dry-run", extra=(f"--config={f['file']}",)),
        "--config FILE",
    ),
    (
        "launch conf FILE",  # argparse takes it for --config; SGLang merges only --config
        launch.main,
        lambda f: launch_args(f, "--dry-run", extra=("--conf", str(f["file"]))),
        "--config FILE",
    ),
]


def test_a_dry_run_sglang_refuses_prints_the_command_and_exits_2(files):
    """The command and SGLang's refusal are printed; the exit says the launch would stop
    at SGLang's own parser (a script checking presets with --dry-run sees it)."""
    code, text = run(launch.main, launch_args(files, "--dry-run", "--cpu", extra=("--bogus", "1")))
    assert code == 2 and "Traceback" not in text, text
    assert "#   SGLang 0.5.23 refuses these arguments: " in text and "--bogus 1" in text
    assert "sgl_eagle_ext.launch: error: SGLang 0.5.23 refuses these arguments" in text
    assert "in_sglang.serve" in text  # the command, still printed


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
    """The arguments before the machine: a bad --log-file is the one error even while
    something else holds the router's port (CI once met another test's server there)."""
    with socket.socket() as held, socket.socket() as held_too:
        for s in (held, held_too):
            s.bind(("127.0.0.1", 0))
            s.listen()
        code, text = run(
            router.main,
            [
                "--worker-url",
                NOWHERE,
                "--port",
                str(held.getsockname()[1]),
                "--metrics-port",
                str(held_too.getsockname()[1]),
                "--log-file",
                str(files["dir"]),
            ],
        )
    assert code == 2 and "directory" in text and "Traceback" not in text, text


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


# ------------------------------------------------------------------ odd files
# A FIFO blocks its reader forever, /dev/zero never ends: each must be refused at once
# with one line. The commands run in-process under an alarm, so a hang fails the test
# (within seconds) instead of stalling the suite.
class Hung(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int = 20):
    def fire(_signum, _frame):
        raise Hung(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def odd(tmp_path_factory, files) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("odd")
    o = {"fifo": tmp / "a.fifo", "zero": Path("/dev/zero"), "model": files["model"]}
    os.mkfifo(o["fifo"])
    extends = tmp / "extends.toml"
    extends.write_text(f'extends = "{o["fifo"]}"\n')
    o["extends_fifo"] = extends
    nul = tmp / "nul.toml"
    nul.write_text('extends = "baseline"\n[env]\nFOO = "a\\u0000b"\n')
    o["nul_env"] = nul
    fifo_model = tmp / "fifo-model"
    fifo_model.mkdir()
    os.mkfifo(fifo_model / "config.json")
    o["fifo_model"] = fifo_model
    binary = tmp / "binary.json"
    binary.write_bytes(b"\x00\xff\xfe" * 100)
    o["binary"] = binary
    deep = tmp / "deep.json"
    deep.write_text(DEEP_JSON)
    o["deep_json"] = deep
    broken = tmp / "broken.log"
    broken.symlink_to(tmp / "nowhere" / "x.log")
    o["broken"] = broken
    # a link to a file not there yet, at the filesystem root: written through, it
    # would create /eagle-ext-fuzz-<pid>.json
    o["dangling_root"] = tmp / "root-link.json"
    o["dangling_root"].symlink_to(f"/eagle-ext-fuzz-{os.getpid()}.json")
    o["dir"] = tmp / "a-dir"
    o["dir"].mkdir()
    o["log"] = tmp / "spec.log"
    from tests.test_report import profile_line

    o["log"].write_text(profile_line(1, 5.0, 2.0, [2, 3]) + "\n")
    typed = tmp / "typed.jsonl"  # a resume file edited by hand: a level as a string
    typed.write_text(
        '{"kind":"cell","level":"2","steps":1,"setup":{}}\n'
        '{"kind":"cell","level":1,"steps":0,"setup":{}}\n'
    )
    o["typed_results"] = typed
    for name, write in (
        ("fifo-version", lambda f: os.mkfifo(f)),
        ("latin1-version", lambda f: f.write_bytes(b"__version__ = '0.5.23\xe9'\n")),
    ):
        pkg = tmp / name / "sglang"
        (pkg / "srt").mkdir(parents=True)
        write(pkg / "_version.py")
        o[name] = pkg
    o["not_utf8_dir"] = Path(os.fsdecode(bytes(tmp) + b"/models-\xff"))
    return o


def live_args(results, *more: str, model="m") -> list[str]:
    """tune --live up to where it would start a server (refused before that; the model
    folders are checked after the options, before the run's files)."""
    return [
        "--live",
        "--model-path",
        str(model),
        "--draft-model-path",
        str(model),
        "--results",
        str(results),
        *more,
    ]


def spec_launch(f, *more: str) -> list[str]:
    return [
        "--preset",
        "eagle3-adaptive",
        "--model-path",
        str(f["model"]),
        "--draft-model-path",
        str(f["model"]),
        "--dry-run",
        *more,
    ]


ODD = [
    ("preset file FIFO", launch.main, lambda f, o: ["--preset-file", str(o["fifo"])], "FIFO"),
    (
        "preset file /dev/zero",
        launch.main,
        lambda f, o: ["--preset-file", str(o["zero"])],
        "character device",
    ),
    (
        "extends a FIFO",
        launch.main,
        lambda f, o: ["--preset-file", str(o["extends_fifo"])],
        "FIFO",
    ),
    (
        "api-key-file FIFO",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", "--api-key-file", str(o["fifo"])),
        "FIFO",
    ),
    (
        "api-key-file /dev/zero",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", "--api-key-file", str(o["zero"])),
        "character device",
    ),
    (
        "adaptive config FIFO",
        launch.main,
        lambda f, o: spec_launch(f, "--adaptive-config", str(o["fifo"])),
        "FIFO (named pipe)",  # what it is, not "does not exist"
    ),
    (
        "adaptive config binary",
        launch.main,
        lambda f, o: spec_launch(f, "--adaptive-config", str(o["binary"])),
        "UTF-8",
    ),
    (
        "adaptive config nested",
        launch.main,
        lambda f, o: spec_launch(f, "--adaptive-config", str(o["deep_json"])),
        "nested",
    ),
    ("report FIFO", report.main, lambda f, o: [str(o["fifo"])], "FIFO"),
    ("report /dev/zero", report.main, lambda f, o: [str(o["zero"])], "character device"),
    ("tune FIFO", tune.main, lambda f, o: [str(o["fifo"])], "FIFO"),
    ("bench plot FIFO", bench.main, lambda f, o: ["plot", str(o["fifo"])], "FIFO"),
    ("bench report /dev/zero", bench.main, lambda f, o: ["report", str(o["zero"])], "device"),
    ("bench goodput FIFO", bench.main, lambda f, o: ["goodput", str(o["fifo"])], "FIFO"),
    ("bench speculation FIFO", bench.main, lambda f, o: ["speculation", str(o["fifo"])], "FIFO"),
    (
        "bench prompts FIFO",
        bench.main,
        lambda f, o: ["single", "--url", NOWHERE, "--prompts", str(o["fifo"])],
        "FIFO",
    ),
    (
        "log-file over 255 characters",
        launch.main,
        lambda f, o: launch_args(f, "--log-file", "/tmp/" + "a" * 300),
        "too long",
    ),
    (
        "log-file broken link",
        launch.main,
        lambda f, o: launch_args(f, "--log-file", str(o["broken"])),
        "broken link",
    ),
    (
        "results broken link",
        bench.main,
        lambda f, o: ["sweep", "--url", NOWHERE, "--results", str(o["broken"])],
        "broken link",
    ),
    (
        "models-dir is a file",
        launch.main,
        lambda f, o: ["--demo", "--models-dir", str(f["file"])],
        "not a folder",
    ),
    ("preset env NUL", launch.main, lambda f, o: ["--preset-file", str(o["nul_env"])], "NUL"),
    (
        "max-tokens 20 digits",
        bench.main,
        lambda f, o: ["single", "--url", NOWHERE, "--max-tokens", "9" * 20],
        "must be at most",  # the one number parser: above 2**53
    ),
    (
        "url with a password",
        healthcheck.main,
        lambda f, o: ["--url", "http://me:CANARY-FUZZ@127.0.0.1:9"],
        "credentials",
    ),
    (
        "admin key ending in CR",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", extra=("--admin-api-key", "CANARY-FUZZ\r")),
        "control character",
    ),
    # -- round three (issue 26): abbreviated secret flags, keys SGLang cannot compare
    *(
        (
            f"abbreviated {flag}",
            launch.main,
            lambda f, o, flag=flag: launch_args(f, "--dry-run", extra=(flag, "CANARY-FUZZ")),
            "an abbreviation of the secret flag",
        )
        for flag in ("--api-k", "--admin-api", "--ssl-keyfile-pass", "--admin-api-k=CANARY-FUZZ")
    ),
    (
        "non-ASCII api key",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", extra=("--api-key", "CANARY-FUZZ-clé")),
        "non-ASCII",
    ),
    (
        "bench key with CR",
        bench.main,
        lambda f, o: ["single", "--url", NOWHERE, "--api-key", "CANARY-FUZZ\r"],
        "control character",
    ),
    (
        "bench non-ASCII key",
        bench.main,
        lambda f, o: ["single", "--url", NOWHERE, "--api-key", "CANARY-FUZZ-ключ"],
        "non-ASCII",
    ),
    (
        "bench header with LF",
        bench.main,
        lambda f, o: ["single", "--url", NOWHERE, "--header", "X-A=1\nX-B: CANARY-FUZZ"],
        "control character",
    ),
    # -- outputs: every written path through the one check
    (
        "tune --out dangling link to the root",
        tune.main,
        lambda f, o: [str(o["log"]), "--baseline-tps", "50", "--out", str(o["dangling_root"])],
        "broken link",
    ),
    (
        "tune --out FIFO",
        tune.main,
        lambda f, o: [str(o["log"]), "--baseline-tps", "50", "--out", str(o["fifo"])],
        "not a regular file",
    ),
    (
        "tune --out directory",
        tune.main,
        lambda f, o: [str(o["log"]), "--baseline-tps", "50", "--out", str(o["dir"])],
        "is a directory",
    ),
    ("tune --live --results FIFO", tune.main, lambda f, o: live_args(o["fifo"]), "regular file"),
    (
        "tune --live --results /dev/zero",
        tune.main,
        lambda f, o: live_args(o["zero"]),
        "regular file",
    ),
    (
        "tune --live --results dangling",
        tune.main,
        lambda f, o: live_args(o["dangling_root"]),
        "broken link",
    ),
    (
        "tune --live resume file wrongly typed",
        tune.main,
        lambda f, o: live_args(o["typed_results"], "--cpu", model=o["model"]),
        "line 1 is not a tune --live record (field 'level'",
    ),
    (
        "tune --live levels 5000 digits",
        tune.main,
        lambda f, o: live_args(o["dir"] / "r.jsonl", "--levels", "9" * 5000),
        "not a list of whole numbers",
    ),
    (
        "save-requests FIFO",
        bench.main,
        lambda f, o: ["sweep", "--url", NOWHERE, "--save-requests", str(o["fifo"])],
        "not a regular file",
    ),
    (
        "save-requests dangling",
        bench.main,
        lambda f, o: ["sweep", "--url", NOWHERE, "--save-requests", str(o["dangling_root"])],
        "broken link",
    ),
    (
        "shared-prefix 99999999999",
        bench.main,
        lambda f, o: ["sweep", "--url", NOWHERE, "--dataset", "shared-prefix:99999999999"],
        "at most 1048576",
    ),
    (
        "shared-prefix 5000 digits",
        bench.main,
        lambda f, o: ["sweep", "--url", NOWHERE, "--dataset", "shared-prefix:" + "9" * 5000],
        "at most 1048576",
    ),
    (
        "sglang-version 5000 digits",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", "--sglang-version", "0.5." + "9" * 5000),
        "not a version number",
    ),
    (
        "router abbreviated key",
        router.main,
        lambda f, o: ["--worker-url", NOWHERE, "--", "--api-k", "CANARY-FUZZ"],
        "an abbreviation of the secret flag --api-key",
    ),
    (
        "router non-ASCII key",
        router.main,
        lambda f, o: ["--worker-url", NOWHERE, "--", "--api-key", "CANARY-FUZZ-ключ"],
        "non-ASCII",
    ),
    (
        "bench ab abbreviated key",
        bench.main,
        lambda f, o: ["ab", "--preset-b", "eagle3-2step", "--", "--api-k", "CANARY-FUZZ"],
        "an abbreviation of the secret flag --api-key",
    ),
    (
        "imagebuild --record a directory",
        imagebuild.main,
        lambda f, o: ["--sglang-version", "0.5.23", "--record", str(o["dir"])],
        "is a directory",
    ),
    (
        "wheels version as a path",
        wheels.main,
        lambda f, o: ["../../eagle-ext-fuzz"],
        "not a release number",
    ),
    (
        "demo models dir under a file",
        launch.main,
        lambda f, o: ["--demo", "--models-dir", str(f["file"] / "m"), "--dry-run"],
        "--models-dir",
    ),
    (
        "demo models dir not UTF-8",
        launch.main,
        lambda f, o: ["--demo", "--models-dir", str(o["not_utf8_dir"]), "--dry-run"],
        "not UTF-8",
    ),
    *(
        (
            f"patches check, {name}",
            patches.main,
            lambda f, o, name=name: ["check", "--sglang-dir", str(o[name])],
            "cannot tell which SGLang release",
        )
        for name in ("fifo-version", "latin1-version")
    ),
    (
        "tune live results in a non-UTF-8 folder",  # its paths go into SGLang's preset
        tune.main,
        lambda f, o: live_args(o["not_utf8_dir"] / "r.jsonl"),
        "not UTF-8",
    ),
    (
        "launch config /dev/zero",
        launch.main,
        lambda f, o: launch_args(f, "--dry-run", extra=("--config", str(o["zero"]))),
        "not a regular file",
    ),
    (
        "tune sglang-version 5000 digits",
        tune.main,
        lambda f, o: [str(o["log"]), "--sglang-version", "9" * 5000],
        "not a version number",
    ),
]


@pytest.mark.parametrize("name, main, argv, words", ODD, ids=[c[0] for c in ODD])
def test_odd_files_and_values_are_one_line_at_once(files, odd, name, main, argv, words):
    with deadline():
        code, text = run(main, argv(files, odd))
    assert "Traceback" not in text
    assert code == 2, f"{name}: exit {code}\n{text}"
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) == 1, f"{name}: {text}"
    assert words in text, f"{name}: {text}"
    assert "CANARY-FUZZ" not in text


def test_preflight_refuses_a_fifo_config_and_nonsense_sizes(files, odd, tmp_path):
    with deadline():
        code, text = run(preflight.main, ["--model-path", str(odd["fifo_model"])])
    assert code == 1 and "FIFO" in text and "Traceback" not in text
    target = model_dir(tmp_path, "t", kimi_target(num_hidden_layers=4.5))
    draft = model_dir(tmp_path, "d", eagle3_draft(draft_vocab_size=-1), DRAFT_TENSORS)
    argv = ["--model-path", str(target), "--draft-model-path", str(draft), "--", "--tp-size", "0"]
    code, text = run(preflight.main, argv)
    assert code == 1 and "Traceback" not in text
    assert "--tp-size 0: must be a whole number >= 1" in text
    assert "text_config.num_hidden_layers: 4.5 is not a whole number" in text
    assert "draft_vocab_size: -1 is not a whole number" in text


# ------------------------------------------------------------------ the record readers
HOSTILE = ["x", [1, [2]], {"a": 1}, -1, True, 1e308, ""]


@pytest.fixture(scope="module")
def bench_records(tmp_path_factory) -> dict[str, Path]:
    """Real records: a sweep (with --save-requests) and a single run against the fake."""
    from tests.fakes.fake_sglang import Background, FakeSGLang, Faults

    tmp = tmp_path_factory.mktemp("records")
    bg = Background(FakeSGLang(faults=Faults(), accept_length=2.5)).__enter__()
    try:
        res, req = tmp / "r.jsonl", tmp / "req.jsonl"
        common = ["--url", bg.url, "--max-tokens", "6", "--warmup", "0", "--results", str(res)]
        sweep = ["sweep", *common, "--concurrency", "1,2", "--num-prompts", "4"]
        assert run(bench.main, [*sweep, "--save-requests", str(req), "--label", "A"])[0] == 0
        assert run(bench.main, ["single", *common, "--runs", "1"])[0] == 0
    finally:
        bg.stop()
    return {"results": res, "requests": req}


def mutations(path: Path) -> list[str]:
    """Every record of `path` once with each field (and each percentile) set to each
    hostile value, then the records as they were."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    lines = []
    for rec in recs:
        for key, value in rec.items():
            spots = [(key,)]
            if isinstance(value, dict) and key != "provenance":
                spots += [(key, k) for k in value]
            for spot in spots:
                for bad in HOSTILE:
                    r = json.loads(json.dumps(rec))
                    d = r
                    for k in spot[:-1]:
                        d = d[k]
                    d[spot[-1]] = bad
                    lines.append(json.dumps(r))
    return lines + [json.dumps(r) for r in recs]


@pytest.mark.parametrize(
    "reader, source",
    [
        ("goodput", "requests"),
        # these three draw figures: matplotlib comes with the harness (the [plot] extra)
        pytest.param("speculation", "requests", marks=pytest.mark.harness),
        pytest.param("plot", "results", marks=pytest.mark.harness),
        pytest.param("report", "results", marks=pytest.mark.harness),
    ],
)
def test_record_readers_skip_and_count_bad_records(bench_records, tmp_path, reader, source):
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text("\n".join(mutations(bench_records[source])) + "\n")
    out = ["-o", str(tmp_path / f"out.{'html' if reader == 'report' else 'png'}")]
    argv = [reader, str(hostile), *(out if reader != "goodput" else [])]
    with deadline(120):
        code, text = run(bench.main, argv)
    assert "Traceback" not in text
    assert code == 0, text
    assert "skipped: field" in text and "line(s) skipped in all" in text, text
    # nothing usable at all: one error line, not a traceback
    only_bad = tmp_path / "bad.jsonl"
    field = "e2e_ms" if source == "requests" else "max_tokens"
    recs = [json.loads(line) for line in bench_records[source].read_text().splitlines()]
    only_bad.write_text("".join(json.dumps({**r, field: "x"}) + "\n" for r in recs))
    code, text = run(bench.main, [reader, str(only_bad), *(out if reader != "goodput" else [])])
    assert "Traceback" not in text and code != 0
    assert len([line for line in text.splitlines() if "error:" in line]) == 1, text


@pytest.mark.harness  # draws the records (matplotlib: the [plot] extra)
def test_records_hold_non_utf8_paths_and_labels(tmp_path, monkeypatch):
    """A Latin-1 working directory, prompts file, results path and label: recorded,
    read back and drawn; os.fsencode of what is read gives the original bytes."""
    from tests.fakes.fake_sglang import Background, FakeSGLang, Faults

    work = Path(os.fsdecode(bytes(tmp_path) + b"/lat\xe9n"))
    work.mkdir()
    monkeypatch.chdir(work)
    prompts_file = work / os.fsdecode(b"pr\xe9.jsonl")
    prompts_file.write_text(json.dumps({"prompt": "hello there"}) + "\n")
    res = work / os.fsdecode(b"r\xe9s.jsonl")
    label = os.fsdecode(b"L\xe9")
    bg = Background(FakeSGLang(faults=Faults(), accept_length=2.5)).__enter__()
    try:
        common = ["--url", bg.url, "--max-tokens", "4", "--warmup", "0", "--results", str(res)]
        common += ["--prompts", str(prompts_file), "--label", label]
        assert run(bench.main, ["single", *common, "--runs", "1"])[0] == 0
        req = work / "req.jsonl"
        sweep = ["sweep", *common, "--concurrency", "1", "--num-prompts", "2"]
        assert run(bench.main, [*sweep, "--save-requests", str(req)])[0] == 0
    finally:
        bg.stop()
    recs = [json.loads(line) for line in res.read_text(encoding="utf-8").splitlines()]
    assert [os.fsencode(r["arm"]) for r in recs] == [b"L\xe9", b"L\xe9"]
    assert os.fsencode(recs[0]["provenance"]["host"]["cwd"]) == bytes(work)
    for argv in (["plot", str(res)], ["report", str(res)], ["goodput", str(req)]):
        code, text = run(bench.main, argv)
        assert code == 0 and "Traceback" not in text, text


# ------------------------------------------------------------------ unwritable output
def _subprocess(args: list[str], stdout) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )


def test_a_full_disk_is_one_error_line(files, tmp_path):
    from tests.test_report import profile_line

    log = tmp_path / "spec.log"
    log.write_text(profile_line(1, 5.0, 2.0, [2, 3]) + "\n")
    with open("/dev/full", "w") as full:
        for args in (
            ["sgl_eagle_ext.launch", "--list-presets"],
            ["sgl_eagle_ext.preflight", "--model-path", str(files["model"]), "--json"],
            ["sgl_eagle_ext.report", str(log)],
            ["sgl_eagle_ext.tune", str(log), "--baseline-tps", "50"],
        ):
            p = _subprocess(args, full)
            assert p.returncode != 0 and "Traceback" not in p.stderr, (args, p.stderr)
            errors = [line for line in p.stderr.splitlines() if "error:" in line]
            assert errors and "No space left" in errors[-1], (args, p.stderr)
    p = _subprocess(
        ["sgl_eagle_ext.tune", str(log), "--baseline-tps", "50", "--out", "/dev/full"],
        subprocess.DEVNULL,
    )
    # a device is no file to write a table to: refused before the logs are read
    assert p.returncode == 2 and "Traceback" not in p.stderr and "not a regular file" in p.stderr


@pytest.mark.parametrize(
    "main, where, name, argv",
    [
        (report, report, "parse", lambda f: [str(f["file"])]),
        (tune, tune.aggregate.Profile, "read", lambda f: [str(f["file"])]),
        (preflight, preflight, "run", lambda f: ["--model-path", str(f["model"])]),
    ],
    ids=["report", "tune", "preflight"],
)
def test_ctrl_c_is_exit_130_without_a_traceback(files, monkeypatch, main, where, name, argv):
    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, name, interrupted)
    code, text = run(main.main, argv(files))
    assert code == 130 and "interrupted" in text and "Traceback" not in text


def test_report_keeps_switches_in_bounded_memory():
    from sgl_eagle_ext.profiling import adaptive_log

    lines = (
        f"[2026-12-01 10:20:00] Switch adaptive runtime state: steps {i % 3} -> "
        f"{(i + 1) % 3}, draft_tokens 1 -> 2"
        for i in range(50_000)
    )
    log = adaptive_log.read(lines, keep=1000)
    assert log.total == 50_000 and len(log.switches) == 2000
    assert log.switches[-1].line == 50_000 and sum(log.by_reason.values()) == 50_000


def test_a_deep_sharegpt_json_is_one_clear_error(tmp_path):
    """A .json list nested 100000 deep: json's decoder recurses per bracket (a
    RecursionError, then unraisable noise); refused before it is decoded."""
    from sgl_eagle_ext.common.errors import UserError
    from sgl_eagle_ext.tools.bench import datasets

    for name, text in (("list.json", DEEP_JSON), ("obj.json", '[{"c": ' + DEEP_JSON + "}]")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(UserError, match="nested too deeply"):
            datasets.load_sharegpt(str(path))


# ------------------------------------------------------------------ round four (issue 36)
def test_a_removed_working_directory_is_one_error_line(files, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code, text = run(launch.main, launch_args(files, "--dry-run"))
    assert code == 2 and "Traceback" not in text, text
    assert [line for line in text.splitlines() if "error:" in line] == [
        "sgl_eagle_ext.launch: error: the working directory cannot be used (No such file "
        "or directory: removed?)."
    ], text


def test_odd_profile_records_are_skipped_and_counted(tmp_path):
    """A 400-digit integer (math.isfinite raised OverflowError on it), a negative cycle
    count (it cancelled a real window in the sums), formats v=0 and v=3 (read as v=2):
    each line skipped and counted, by report and tune logs alike."""
    from tests.test_report import profile_line

    good = profile_line(1, 5.0, 2.0, [2, 3])
    bad = [
        good.replace(" rank=0 ", " rank=" + "9" * 400 + " "),
        good.replace(" cycles=20 ", " cycles=-20 "),
        good.replace(" v=2 ", " v=0 "),
        good.replace(" v=2 ", " v=3 "),
    ]
    assert all(b != good for b in bad)
    log = tmp_path / "spec.log"
    log.write_text("\n".join([good, *bad]) + "\n")
    code, text = run(report.main, [str(log), "--json"])
    assert code == 0 and "Traceback" not in text, text
    out = json.loads(text)
    assert (out["profile_windows"], out["skipped_lines"]) == (1, 4), out
    # a tiny baseline rate: its ms per token overflows to inf, and so do the gains
    code, text = run(tune.main, ["logs", str(log), "--baseline-tps", "1e-320", "--json"])
    assert code == 0 and "Traceback" not in text, text
    assert '"gain": null' in text, text

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")

    json.loads(text, parse_constant=refuse)  # Infinity/NaN would be refused here


def test_a_server_info_with_objects_for_text_is_not_said(tmp_path):
    from tests.fakes.fake_sglang import Background, FakeSGLang, Faults

    fake = FakeSGLang(faults=Faults(), accept_length=2.5)
    fake.tokenizer_path = {"org": ["m"]}  # /server_info's tokenizer_path: an object
    bg = Background(fake).__enter__()
    try:
        argv = ["single", "--url", bg.url, "--max-tokens", "4", "--warmup", "0", "--runs", "1"]
        code, text = run(bench.main, [*argv, "--results", str(tmp_path / "r.jsonl")])
    finally:
        bg.stop()
    assert code == 0 and "Traceback" not in text, text


GPU_CHECK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.mark.parametrize(
    "name, argv, torch_init, stdout, code, words",
    [
        ("help", ["--help"], None, None, 0, "usage: benchmarks/gpu_check.py"),
        ("unknown argument", ["--bogus"], None, None, 2, "unrecognized arguments: --bogus"),
        ("full stdout", [], None, "/dev/full", 1, "cannot write the output"),
        ("torch import raises", [], "raise RuntimeError('no libcudart')", None, 0, "RuntimeError"),
        ("stub torch", [], "", None, 0, "needs CUDA"),
        (
            "stub torch says CUDA",
            [],
            "class cuda:\n    is_available = staticmethod(lambda: True)\n",
            None,
            1,
            "error: stopped by AttributeError",
        ),
    ],
)
def test_gpu_check_entry(tmp_path, name, argv, torch_init, stdout, code, words):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    if torch_init is not None:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "__init__.py").write_text(torch_init)
        env["PYTHONPATH"] = str(tmp_path)
    with open(stdout or os.devnull, "w") as sink:
        p = subprocess.run(
            [sys.executable, str(GPU_CHECK), *argv],
            stdout=sink if stdout else subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    text = (p.stdout or "") + p.stderr
    assert p.returncode == code, f"{name}: exit {p.returncode}\n{text}"
    assert words in text and "Traceback" not in text, f"{name}: {text}"
    assert len([line for line in text.splitlines() if "error:" in line]) == (code != 0), text


def test_printed_commands_and_report_lines_cannot_be_forged(files, tmp_path):
    """The one renderer (common/render.py): a newline in a model path stays inside one
    shell word of the dry run (it put `touch X #` on a line of its own: `launch
    --dry-run | sh` ran it), a newline in a preset value inside its fairness line, and
    an ANSI escape in any value is shown escaped, never sent to the terminal."""
    from sgl_eagle_ext.common import render
    from sgl_eagle_ext.launcher import fairness

    forged = "org/m\ntouch X #\x1b[2J"
    code, text = run(launch.main, ["--preset", "baseline", "--model-path", forged, "--dry-run"])
    assert code == 0, text
    assert "\x1b" not in text and "\\x1b[2J" in text
    lines = text.splitlines()
    assert not [ln for ln in lines if ln.startswith("touch")], text
    command = [ln for ln in lines if "sgl_eagle_ext.in_sglang.serve" in ln]
    assert len(command) == 1 and "--model-path $'org/m\\ntouch X #\\x1b[2J'" in command[0]
    # bash reads the printed word back as the value given
    echo = subprocess.run(
        ["bash", "-c", f"printf %s {render.shell_word(forged)}"], capture_output=True, text=True
    )
    assert echo.stdout == forged

    diff = fairness.Difference("x", {"A": "1\n  unequal: forged", "B": "2"}, "x")
    verdict = fairness.Verdict({"A": "rules", "B": "rules"}, [diff], allowed=True)
    assert len(verdict.lines()) == 2 and "forged" in verdict.lines()[1]
    assert all("\n" not in ln for ln in verdict.lines())


@pytest.mark.parametrize("stream", [True, False])
def test_a_stream_line_without_end_is_dropped_at_the_cap(monkeypatch, stream):
    """A server that streams one line without a newline: bench's reader drops it at
    MAX_LINE (it held the whole line until the request timeout: 1.5 GB was seen). Not
    streamed (--disable-stream), an answer that never ends is dropped at the same cap
    (it was read whole, without a bound)."""
    import asyncio

    from aiohttp import web

    from sgl_eagle_ext.tools.bench import client

    monkeypatch.setattr(client, "MAX_LINE", 1 << 20)  # the cap, scaled down: 1 MiB
    sent = []

    async def endless(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"data: ")
        while True:
            await resp.write(b"x" * 65536)
            sent.append(65536)

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", endless)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with client.Client(f"http://127.0.0.1:{port}", timeout=120, stream=stream) as c:
                return await c.chat([{"role": "user", "content": "hi"}], 4)
        finally:
            await runner.cleanup()

    r = asyncio.run(go())
    said = "longer than 1 MiB" if stream else "an answer larger than 1 MiB"
    assert r.error == client.E_IN_STREAM and said in r.detail, (r.error, r.detail)
    assert sum(sent) < 64 << 20  # stopped near the cap, not at the timeout
