"""Reliability pieces that need no server: the log pump never stops draining, results
are never lost or torn, parallel --fix runs take turns, secrets are redacted by one
rule everywhere."""

from __future__ import annotations

import csv
import json
import multiprocessing
import sys
import time
from pathlib import Path

import pytest

from sgl_eagle_ext.common import redaction
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_process import ServerProcess
from sgl_eagle_ext.launcher.preflight import overlay
from sgl_eagle_ext.tools.bench import records

# a child that writes 4 MB (far beyond a pipe's 64 KB) and exits: it blocks forever
# unless somebody drains its output
CHATTY = [sys.executable, "-c", "import sys\nfor i in range(40000): print('x' * 100)"]


@pytest.mark.parametrize("bad", ["a directory", "disk failure"])
def test_the_log_pump_drains_whatever_happens_to_the_log(tmp_path, bad, capsys):
    log = tmp_path / "server.log"
    if bad == "a directory":
        log.mkdir()
    server = ServerProcess(CHATTY, None, log, echo=False)
    if bad == "disk failure":

        def broken(line, end, log_file):
            raise OSError(28, "No space left on device")

        server._line = broken
    server.start()
    t0 = time.monotonic()
    while server.alive() and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    assert not server.alive(), "the child blocked on a full pipe"
    assert server.returncode() == 0
    server.stop()
    assert "server log not written any more" in capsys.readouterr().err
    assert server.log_error


def test_a_listener_bug_does_not_stop_the_draining(tmp_path):
    def buggy(line):
        raise RuntimeError("bug")

    server = ServerProcess(CHATTY, None, tmp_path / "s.log", echo=False, listeners=[buggy])
    server.start()
    t0 = time.monotonic()
    while server.alive() and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    assert not server.alive()
    server.stop()


# ------------------------------------------------------------------ results


def test_a_csv_results_name_never_collides_with_the_jsonl(tmp_path):
    rec = records.Recorder(tmp_path / "out.csv", run_id="R")
    assert rec.jsonl == tmp_path / "out.jsonl" and rec.csv == tmp_path / "out.csv"
    rec.write("single", {"status": "ok"}, {})
    rec.write("single", {"status": "ok"}, {})
    assert [json.loads(x)["kind"] for x in rec.jsonl.read_text().splitlines()] == ["single"] * 2
    rows = list(csv.reader(rec.csv.open()))
    assert tuple(rows[0]) == records.CSV_COLUMNS and len(rows) == 3
    records.Recorder(tmp_path / "out.csv")  # the next run is not refused


@pytest.mark.parametrize("where", ["dir", "under a file"])
def test_the_results_path_is_checked_before_anything(tmp_path, where):
    (tmp_path / "f").write_text("")
    path = tmp_path if where == "dir" else tmp_path / "f" / "r.jsonl"
    with pytest.raises(UserError, match="--results"):
        records.Recorder(path)


def test_a_failed_final_write_is_rescued_not_lost(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(records.tempfile, "gettempdir", lambda: str(tmp_path / "rescue"))
    (tmp_path / "rescue").mkdir()
    rec = records.Recorder(tmp_path / "gone" / "r.jsonl", run_id="RUN")
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone").chmod(0o500)
    (tmp_path / "gone" / "r.jsonl").mkdir()  # a write there fails (even as root)
    rec.write("single", {"status": "ok", "tok_s": 1.5}, {})
    err = capsys.readouterr().err
    assert "cannot write" in err and "bench-rescued-RUN.jsonl" in err
    (line,) = (tmp_path / "rescue" / "bench-rescued-RUN.jsonl").read_text().splitlines()
    assert json.loads(line)["tok_s"] == 1.5


def _append_rows(path: str, n: int) -> None:
    for _ in range(n):
        records.append_csv(Path(path), {"kind": "sweep", "status": "ok"})


def test_parallel_writers_write_the_csv_header_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for trial in range(5):
        path = tmp_path / f"r{trial}.csv"
        procs = [ctx.Process(target=_append_rows, args=(str(path), 20)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        rows = list(csv.reader(path.open()))
        assert sum(tuple(r) == records.CSV_COLUMNS for r in rows) == 1
        assert len(rows) == 1 + 6 * 20


def test_records_are_redacted_by_value(tmp_path):
    rec = records.Recorder(tmp_path / "r.jsonl", secrets=("K3Y",))
    rec.write("single", {"level_key": "request_rate"}, {"server": {"cmd": "x --api-key K3Y"}})
    text = (tmp_path / "r.jsonl").read_text() + (tmp_path / "r.csv").read_text()
    assert "K3Y" not in text and '"level_key": "request_rate"' in text


# ------------------------------------------------------------------ --fix overlays


def _write_overlay(original: str, root: str, i: int) -> None:
    overlay.write(Path(original), {"n": i}, {}, Path(root))


def test_parallel_fix_runs_take_turns(tmp_path):
    original = tmp_path / "draft"
    original.mkdir()
    (original / "config.json").write_text("{}")
    (original / "model.safetensors").write_text("w")
    root = tmp_path / "overlays"
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_write_overlay, args=(str(original), str(root), i)) for i in range(24)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 24
    (only,) = root.iterdir()  # no stale -old-PID folder, no half overlay
    assert json.loads((only / "config.json").read_text())["n"] in range(24)
    assert (only / "model.safetensors").resolve() == original / "model.safetensors"


def test_an_overlay_folder_inside_the_model_dir_is_refused(tmp_path):
    original = tmp_path / "draft"
    original.mkdir()
    (original / "config.json").write_text("{}")
    with pytest.raises(overlay.Refused, match="inside the model directory"):
        overlay.write(original, {"n": 1}, {}, original / "overlays")
    assert sorted(p.name for p in original.iterdir()) == ["config.json"]


# ------------------------------------------------------------------ one redaction rule


def test_one_redaction_rule():
    names = {
        "HF_TOKEN": True,
        "EAGLE_EXT_API_KEY": True,
        "PROXY_AUTH": True,
        "GCP_CREDENTIALS": True,
        "DB_PASSWORD": True,
        "TOKENIZERS_PARALLELISM": False,
        "NCCL_PROTO": False,
        "max_tokens": False,
        "level_key": True,  # by name, a key: only where names are judged (env, args, info)
    }
    assert {n: redaction.is_secret_name(n) for n in names} == names
    from sgl_eagle_ext.launcher import cli as launch
    from sgl_eagle_ext.tools.bench import provenance

    assert provenance.SECRET is redaction.SECRET
    assert not hasattr(launch, "SECRET_ENV")  # the launcher's own, looser rule is gone
    info = provenance.redact_info(
        {"launch_command": "python -m x --api-key 'S 1' --port 1", "note": "key S 1 here"},
        ("S 1",),
    )
    assert "S 1" not in json.dumps(info) and "--port 1" in info["launch_command"]


# ------------------------------------------------------------------ the launcher's key


def test_the_launcher_takes_the_key_off_every_command_line(tmp_path, capsys, tiny_models):
    from sgl_eagle_ext.launcher import cli as launch

    key_file = tmp_path / "key"
    key_file.write_text("K3Y-FILE\n")
    base = ["--preset", "eagle3-2step", "--cpu", "--model-path", str(tiny_models["target"])]
    base += ["--draft-model-path", str(tiny_models["draft-mostly"]), "--dry-run"]
    for extra in (["--api-key-file", str(key_file)], ["--", "--api-key", "K3Y-FILE"]):
        assert launch.main([*base, *extra]) == 0
        out = capsys.readouterr().out
        assert "K3Y-FILE" not in out
        assert "EAGLE_EXT_API_KEY='***'" in out  # it travels in the environment
        assert "--api-key" not in out.splitlines()[-1]  # not on the server's command line


def test_every_secret_flag_travels_in_the_environment(capsys, tiny_models, monkeypatch):
    """--admin-api-key and --ssl-keyfile-password (and --api-key) after `--` are on no
    command line and printed by no dry run; the server entry puts them back."""
    from sgl_eagle_ext.common import releases, secret_flags
    from sgl_eagle_ext.launcher import cli as launch

    assert set(releases.SECRET_SERVER_FLAGS) >= {"api-key", "admin-api-key", "ssl-keyfile-password"}
    values = {"api-key": "K1\\x", "admin-api-key": "ADM1N\\K", "ssl-keyfile-password": "PW\\d"}
    extra = [t for flag, v in values.items() for t in (f"--{flag}", v)]
    base = ["--preset", "eagle3-2step", "--cpu", "--model-path", str(tiny_models["target"])]
    base += ["--draft-model-path", str(tiny_models["draft-mostly"]), "--dry-run"]
    assert launch.main([*base, "--", *extra]) == 0
    out = capsys.readouterr().out
    for flag, v in values.items():
        assert v not in out and v.replace("\\", "\\\\") not in out
        assert f"--{flag}" not in out.splitlines()[-1]
        assert f"{secret_flags.env_name(flag)}='***'" in out
    # the server entry: back into SGLang's arguments, the variables gone from its env
    env = secret_flags.to_environment(values)
    argv = secret_flags.argv_from_environment(env)
    assert env == {} and argv[argv.index("--admin-api-key") + 1] == values["admin-api-key"]


@pytest.mark.parametrize("key", ["abc\r", "a\nb", "x\x00y"])
def test_a_key_no_header_can_carry_is_refused_up_front(tiny_models, capsys, key):
    from sgl_eagle_ext.launcher import cli as launch

    base = ["--preset", "baseline", "--cpu", "--model-path", str(tiny_models["target"])]
    assert launch.main([*base, "--dry-run", "--", "--admin-api-key", key]) == 2
    err = capsys.readouterr().err
    assert "control character" in err and key not in err


def test_masking_covers_escaped_forms_and_keeps_short_keys_to_whole_tokens():
    key = 'K\\E"Y\r'
    text = f"raw {key} repr {key!r} json {json.dumps(key)} jj {json.dumps(json.dumps(key))}"
    masked = redaction.redact_text(text, [key])
    assert "K" not in masked.replace("***", "")  # every form is gone
    # a one-character key hides the key where it stands alone, not every "a"
    assert redaction.redact_text("a banana; key=a; 'a'", ["a"]) == "*** banana; key=***; '***'"
    rec = redaction.redact_values({"url": "http://h/a", "label": "a"}, ["a"])
    assert rec == {"url": "http://h/***", "label": "***"}


def test_a_url_with_a_password_is_refused_without_echoing_it():
    from sgl_eagle_ext.common import http

    with pytest.raises(UserError) as e:
        http.check_url("--url", "http://user:S3CRETPW@127.0.0.1:30000")
    assert "S3CRETPW" not in str(e.value) and "credentials" in str(e.value)


def test_every_http_failure_is_a_reply_not_an_exception():
    import socket
    import threading

    from sgl_eagle_ext.common import http

    with socket.socket() as s:  # answers with something that is not HTTP
        s.bind(("127.0.0.1", 0))
        s.listen()

        def answer():
            c, _ = s.accept()
            c.recv(1000)
            c.sendall(b"GARBAGE\r\n\r\n")
            c.close()

        threading.Thread(target=answer, daemon=True).start()
        reply = http.request(f"http://127.0.0.1:{s.getsockname()[1]}/x", timeout=10)
    assert reply.status == 0 and "BadStatusLine" in reply.error
    assert http.request("http://a b:30000/health").status == 0  # InvalidURL


# ------------------------------------------------------------------ timeouts worded


def test_a_timeout_says_timed_out_not_no_answer_within(tmp_path):
    import socket

    from sgl_eagle_ext.common import http

    with socket.socket() as s:  # accepts, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        reply = http.request(f"http://127.0.0.1:{s.getsockname()[1]}/x", timeout=0.5)
    assert reply.status == 0 and "timed out after 0.5 s" in reply.error


# ------------------------------------------------------------------ report streams


def test_the_report_streams_its_log(tmp_path):
    """A 60 MB log: read line by line, the report's peak memory grows far less than
    the file's size (a whole-file read holds it about three times over)."""
    import subprocess

    from tests.test_report import profile_line

    log = tmp_path / "big.log"
    noise = "[2026-11-29 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 12, #queue-req: 0\n"
    block = noise * 999 + profile_line(1, 30.0, 28.5, [2] * 19 + [3]) + "\n"
    with open(log, "w") as f:
        while f.tell() < 60 * 2**20:
            f.write(block)
    code = (
        "import contextlib, io, resource, sys\n"
        "from sgl_eagle_ext.profiling import report\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = report.main([{str(log)!r}, '--json'])\n"
        "grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print('RESULT', rc, grew // 1024)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    result = [line for line in p.stdout.splitlines() if line.startswith("RESULT")]
    assert result, p.stdout[-2000:] + p.stderr[-2000:]
    rc, grew_mb = map(int, result[-1].split()[1:])
    assert rc == 0, p.stderr
    assert grew_mb < 30, f"the peak grew by {grew_mb} MB reading a 60 MB log"
