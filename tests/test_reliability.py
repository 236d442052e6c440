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


# ------------------------------------------------------------------ round three (issue 26)
import contextlib  # noqa: E402
import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import urllib.parse  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from sgl_eagle_ext.common import proctree, secret_flags  # noqa: E402

KEY = "sk-CANARY-round3-0123456789"


def _in_process(main, argv) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue() + err.getvalue()


@contextlib.contextmanager
def tiny_server(handle):
    """An in-process HTTP server; `handle(handler)` answers each request."""

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            handle(self)

        do_POST = do_GET

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _json(h, status: int, obj) -> None:
    body = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_every_spelling_of_a_secret_flag_is_taken_or_refused():
    # argparse (SGLang's parser) takes any unambiguous prefix: each is refused, naming
    # the full flag; the full flags travel; a real flag that prefixes one is kept
    for tok in ("--api-k", "--api", "--admin-api", "--admin-api-k=X", "--ssl-keyfile-pass"):
        with pytest.raises(UserError) as e:
            secret_flags.take([tok, "X"])
        assert "abbreviation of the secret flag --" in str(e.value) and "X" not in e.value.message
    args, found = secret_flags.take(["--ssl-keyfile", "k.pem", "--api-key", "A" * 9])
    assert args == ["--ssl-keyfile", "k.pem"] and found == {"api-key": "A" * 9}
    # the recorded command line hides an abbreviated flag's value too
    assert redaction.redact_args(["--api-k", "V", "--ssl-keyfile", "f"]) == [
        "--api-k",
        "***",
        "--ssl-keyfile",
        "f",
    ]
    # keys SGLang cannot compare (secrets.compare_digest: ASCII only) or HTTP cannot carry
    for bad, why in (("clé-123456", "non-ASCII"), ("a\r\nb", "control character")):
        with pytest.raises(UserError, match=why):
            secret_flags.check_value("api-key", bad)
    assert secret_flags.check_value("ssl-keyfile-password", "clé-ok") == "clé-ok"


def test_a_known_secret_is_masked_in_every_encoding():
    key = "sk-clé-0123456789"
    raw = key.encode()
    forms = {
        "utf-8": key,
        "latin-1 mojibake": raw.decode("latin-1"),
        "cp1252 mojibake": raw.decode("cp1252", "replace"),
        "json": json.dumps(key),
        "json ascii": json.dumps(key, ensure_ascii=True),
        "json of mojibake": json.dumps(raw.decode("latin-1")),
        "url": urllib.parse.quote(key),
        "url plus": urllib.parse.quote_plus(key),
        "repr": repr(key),
        "cut short": "error: bad key " + key[:10],
    }
    for name, form in forms.items():
        text = form if name == "cut short" else f"<{form}>"  # a cut reply ends there
        masked = redaction.redact_text(text, [key])
        assert "0123" not in masked and "sk-cl" not in masked, (name, masked)
    # a remembered key is masked in whatever the CLI prints, whoever printed it
    redaction.remember(KEY)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), redaction.masked_output():
        print(f"server said: invalid key {KEY!r} / {urllib.parse.quote(KEY)}")
    assert KEY not in buf.getvalue() and "***" in buf.getvalue()


def test_a_key_echoed_by_the_server_is_in_no_output_or_record(tmp_path, monkeypatch):
    """The server's error body repeats the Authorization header (URL-encoded and raw):
    neither the printed errors, the results record nor --save-requests holds it."""
    from sgl_eagle_ext.tools.bench import cli as bench

    def handle(h):
        path = h.path.split("?")[0]
        auth = h.headers.get("Authorization", "")
        if path == "/v1/models":
            return _json(h, 200, {"data": [{"id": "m"}]})
        if path in ("/server_info", "/get_server_info"):
            return _json(h, 200, {"version": "0.5.23"})
        if path == "/v1/chat/completions":
            n = int(h.headers.get("Content-Length") or 0)
            h.rfile.read(n)
            return _json(h, 401, {"error": f"bad {auth} {urllib.parse.quote(auth)}"})
        return _json(h, 404, {"error": f"no {path}; you sent {auth}"})

    res, reqs = tmp_path / "r.jsonl", tmp_path / "req.jsonl"
    monkeypatch.setenv("EAGLE_EXT_API_KEY", "")
    with tiny_server(handle) as url:
        code, text = _in_process(
            bench.main,
            [
                "sweep",
                "--url",
                url,
                "--api-key",
                KEY,
                "--concurrency",
                "1",
                "--num-prompts",
                "1",
                "--prompts-per-concurrency",
                "1",
                "--warmup",
                "0",
                "--max-tokens",
                "4",
                "--results",
                str(res),
                "--save-requests",
                str(reqs),
            ],
        )
    assert "Traceback" not in text
    written = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    assert written, text  # something was recorded
    for where, content in (("output", text), ("files", written)):
        assert KEY not in content and urllib.parse.quote(KEY) not in content, where


def test_a_slow_peer_cannot_hang_a_request_or_the_health_check():
    """Headers or body trickled a byte every 0.2 s: each read is quick, so only an
    overall deadline ends it."""
    from sgl_eagle_ext.common import http
    from sgl_eagle_ext.tools import healthcheck
    from sgl_eagle_ext.tools.bench import cli as bench

    def trickle(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n")
        try:
            for _ in range(1000):
                h.wfile.write(b"X-Slow: 1\r\n" if _ % 2 else b"")
                h.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    with tiny_server(trickle) as url:
        t0 = time.monotonic()
        reply = http.request(url + "/x", timeout=1)
        took = time.monotonic() - t0
        assert reply.status == 0 and "timed out after 1 s" in reply.error, reply
        code, text = _in_process(healthcheck.main, ["--url", url, "--timeout", "1"])
        assert code == 1 and "timed out" in text and "Traceback" not in text, text
        code, text = _in_process(bench.main, ["single", "--url", url, "--max-tokens", "2"])
        assert code == 2 and "timed out" in text and "Traceback" not in text, text
    print(f"a trickling peer: request ended after {took:.1f} s (timeout 1 s)")
    # a timeout too large for the OS's timers: refused by the one number parser (at most
    # 30 days, common/cli_args.py) with one line, not a traceback
    code, text = _in_process(
        healthcheck.main, ["--url", "http://127.0.0.1:9", "--timeout", "1e300"]
    )
    assert code == 2 and "must be at most" in text and "Traceback" not in text


def test_odd_server_answers_are_not_said_rather_than_a_traceback():
    from sgl_eagle_ext.tools.bench import probe

    for models, version in (({"data": {"id": "m"}}, ["0.5.23"]), ([1, 2], "9" * 5000)):

        def handle(h, models=models, version=version):
            if h.path == "/v1/models":
                return _json(h, 200, models)
            return _json(h, 200, {"version": version})

        with tiny_server(handle) as url:
            server = probe.Server(url).connect()
        assert server.model_id == "default" and server.version is None


def test_a_failed_append_is_cut_back_and_the_lines_rescued(tmp_path, monkeypatch, capsys):
    from sgl_eagle_ext.tools.bench import client as cl
    from sgl_eagle_ext.tools.bench import request_log

    path = tmp_path / "req.jsonl"
    path.write_bytes(b'{"kind":"request"}\n')
    real_write = os.write

    def half_then_full(fd, data):  # half a line lands, then the disk is full
        if len(data) > 10 and os.path.realpath(f"/proc/self/fd/{fd}") == str(path):
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.EFBIG, "File too large")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", half_then_full)
    log = request_log.RequestLog(path)
    r = cl.RequestResult(index=0, prompt_id="p", max_tokens=4)
    log.write_level([r, r], 0.0, 1.0, {"run_id": "t-run"})
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"kind":"request"}\n'  # back to the last whole line
    err = capsys.readouterr().err
    assert log.rescued is not None and str(log.rescued) in err and "File too large" in err
    assert len(log.rescued.read_text().splitlines()) == 2
    log.rescued.unlink()
    # the results file likewise: cut back, and the record rescued
    with pytest.raises(OSError):
        monkeypatch.setattr(os, "write", half_then_full)
        records.append_jsonl(path, {"kind": "x", "pad": "y" * 100})
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == b'{"kind":"request"}\n'


def test_every_levels_rescued_lines_go_to_one_file(tmp_path, monkeypatch, capsys):
    """Without a run id, each level's rescue names a file of its own run id: the lines of
    every level still go to the first rescue file, the one the log names."""
    from sgl_eagle_ext.tools.bench import client as cl
    from sgl_eagle_ext.tools.bench import request_log

    monkeypatch.setattr(records.tempfile, "gettempdir", lambda: str(tmp_path / "rescue"))
    (tmp_path / "rescue").mkdir()
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "req.jsonl").mkdir()  # a write there fails (even as root)
    log = request_log.RequestLog(tmp_path / "gone" / "req.jsonl")
    r = cl.RequestResult(index=0, prompt_id="p", max_tokens=4)
    for _ in range(2):
        log.write_level([r], 0.0, 1.0, {})
    assert len(list((tmp_path / "rescue").iterdir())) == 1
    assert len(log.rescued.read_text().splitlines()) == 2
    assert capsys.readouterr().err.count(str(log.rescued)) == 2


def test_children_die_with_their_group():
    """A wrapper that does not `exec` (a shell left waiting on python): on timeout
    and on a normal exit, whatever it started in its group is killed too."""
    for script, timeout in (
        ("sleep 300 & echo $!; wait", 1),
        ("sleep 300 >/dev/null 2>&1 & echo $!", 30),
    ):
        start = time.monotonic()
        grandchild = None
        try:
            done = proctree.run_in_group(["sh", "-c", script], timeout)
            grandchild = int(done.stdout.split()[0])
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
            grandchild = int((out or "0").split()[0]) if out else None
        assert time.monotonic() - start < 60
        if grandchild:
            import psutil

            def gone(pid=grandchild):
                try:
                    return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    return True

            from tests.conftest import wait_until

            wait_until(gone, 10, f"grandchild {grandchild} of {script!r}")


# a model folder beside the results (tune live checks the paths before it writes)
MODEL_DIR = r"""
import os
MODEL = os.path.join(os.path.dirname(sys.argv[1]), "model")
os.makedirs(MODEL, exist_ok=True)
open(os.path.join(MODEL, "config.json"), "w").write("{}")
"""

LIVE_STUB = (
    r"""
import asyncio, sys, time
from sgl_eagle_ext.tools.tune import cli, live
"""
    + MODEL_DIR
    + r"""

class Proc:
    url = "http://127.0.0.1:9"
    api_key = None
    tls = None  # plain http (LauncherProcess.tls)
    class proc:
        pid = 1
    def stop(self):
        print("server stopped", flush=True)

class Server:
    def __init__(self, *a, **k): pass
    def connect(self): return self

async def cells(*a, **k):
    if sys.argv[2:] == ["thread"]:  # the kernel may hand `kill`'s signal to any thread
        import signal, threading
        def own_kill():
            time.sleep(0.3)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        threading.Thread(target=own_kill).start()
    print("MEASURING", flush=True)
    await asyncio.sleep(600)

live.start_server = lambda *a, **k: Proc()
live.probe.Server = Server
live.ProfileTail = lambda *a, **k: None
live.Driver = lambda *a, **k: None
live._cells = cells
sys.exit(cli.main(["--live", "--model-path", MODEL, "--draft-model-path", MODEL, "--cpu",
                   "--levels", "1", "--steps", "0,1", "--max-steps", "1",
                   "--results", sys.argv[1]]))
"""
)


@pytest.mark.parametrize(
    "sig, ignore_int",
    [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGHUP, False), (None, False)],
    ids=[
        "SIGTERM mid-level",
        "Ctrl-C when started with it ignored",
        "SIGHUP",
        "SIGTERM received by another thread",
    ],
)
def test_tune_live_stops_on_a_signal_without_a_traceback(tmp_path, sig, ignore_int):
    """None: a thread of the run's own takes SIGTERM (pthread_kill) while the main thread's
    event loop sleeps in epoll; with plain asyncio.run nothing woke it for 600 s (a CI
    run's SIGHUP went that way: the kernel gives a process-wide signal to any thread)."""

    def preexec():
        hangup_default()
        if ignore_int:  # a script's `tune --live ... &`
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE_STUB, str(tmp_path / "r.jsonl")]
        + (["thread"] if sig is None else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        cwd=tmp_path,
    )
    try:
        for line in proc.stdout:
            if "MEASURING" in line:
                break
        if sig is not None:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted; the server is stopped" in err + out and "Traceback" not in err, err
    assert "server stopped" in out


STARTING_STUB = (
    r"""
import signal, sys, threading, time
from sgl_eagle_ext.tools.bench import arms
from sgl_eagle_ext.tools.tune import cli
"""
    + MODEL_DIR
    + r"""

class Starting(arms.LauncherProcess):  # the real wait_ready, on a start never ready
    def __init__(self, plan):
        self.plan, self._done = plan, threading.Event()
        def own_kill():  # the kernel may hand `kill`'s signal to the starting thread
            time.sleep(0.3)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        threading.Thread(target=own_kill).start()
        print("STARTING", flush=True)
    def stop(self):
        print("server stopped", flush=True)

arms.LauncherProcess = Starting
sys.exit(cli.main(["live", "--model-path", MODEL, "--draft-model-path", MODEL, "--cpu",
                   "--levels", "1", "--steps", "0,1", "--max-steps", "1",
                   "--startup-timeout", "0", "--results", sys.argv[1]]))
"""
)


def test_a_signal_to_another_thread_stops_tune_live_while_its_server_starts(tmp_path):
    """The main thread waits for READY in a lock wait, which no signal taken by another
    thread interrupts: tune live went on waiting until READY (or, with no startup limit,
    for ever). common/interrupts.wait wakes it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTING_STUB, str(tmp_path / "r.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=hangup_default,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        cwd=tmp_path,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "STARTING" in out, (out, err)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err + out and "Traceback" not in err, err


def hangup_default() -> None:
    """In the child: SIGHUP at its default, as under a terminal. A suite run under
    `nohup` hands its children SIGHUP ignored, and the tools keep it ignored on purpose
    (common/interrupts.py), which is not what these tests are about."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_sighup_and_sigusr1_record_the_level_as_interrupted(tmp_path):
    from tests.fakes.fake_sglang import Background, FakeSGLang, Faults

    for sig in (signal.SIGHUP, signal.SIGUSR1):
        res = tmp_path / f"r-{sig.name}.jsonl"
        with Background(FakeSGLang(delay_ms=5, faults=Faults(hang_every=2))) as bg:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sgl_eagle_ext.bench",
                    "sweep",
                    "--url",
                    bg.url,
                    "--concurrency",
                    "1",
                    "--num-prompts",
                    "3",
                    "--max-tokens",
                    "8",
                    "--warmup",
                    "0",
                    "--results",
                    str(res),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(Path.cwd())},
                preexec_fn=hangup_default,
            )
            from tests.conftest import wait_until

            wait_until(lambda bg=bg: bg.fake.requests >= 2, 120, "the hung request")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in err, (sig, err)
        (rec,) = [json.loads(line) for line in res.read_text().splitlines()]
        assert rec["status"] == "interrupted", (sig, rec)


def test_a_closed_stdout_is_not_a_traceback(tmp_path):
    """`cmd >&-`: Python starts with sys.stdout None; every entry point goes through
    the one wrapper, which gives it /dev/null."""
    script = (
        "import sys\n"
        "from sgl_eagle_ext.tools import healthcheck\n"
        "from sgl_eagle_ext.tools.bench import cli as bench\n"
        "from sgl_eagle_ext.launcher import cli as launch\n"
        "codes = [healthcheck.main(['--url', 'http://127.0.0.1:9', '--timeout', '2']),\n"
        "         launch.main(['--list-presets']), bench.main(['plot', '/nonexistent'])]\n"
        "open(sys.argv[1], 'w').write(repr(codes))\n"
    )
    codes = tmp_path / "codes"
    for closed in ("1", "2"):
        p = subprocess.run(
            ["bash", "-c", f'"$0" -c "$1" "$2" {closed}>&-', sys.executable, script, str(codes)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        )
        assert p.returncode == 0 and "Traceback" not in p.stderr, (closed, p.stderr)
        assert codes.read_text() == "[1, 0, 2]", (closed, codes.read_text())


def test_a_crafted_journal_leaves_nothing_beside_the_package(tmp_path):
    """A journal naming the package folder itself, or a FIFO where a saved copy should
    be: refused (never a temp file in site-packages, never a hang)."""
    from sgl_eagle_ext.tools.patches import transaction

    site = tmp_path / "site-packages"
    pkg = site / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "srt" / "x.py").write_text("x = 1\n")
    backup = pkg / ".backup"
    saved = backup / transaction.SAVED
    for rel, make in (
        ("sglang", lambda p: p.write_text("not a folder")),
        ("sglang/srt/x.py", os.mkfifo),
    ):
        saved.mkdir(parents=True, exist_ok=True)
        (saved / rel).parent.mkdir(parents=True, exist_ok=True)
        make(saved / rel)
        entry = {"op": "apply", "stage": "changing", "files": [rel], "patches": []}
        (backup / transaction.JOURNAL).write_text(json.dumps(entry))
        signal.alarm(20)  # a FIFO read would block forever
        try:
            with pytest.raises(UserError):
                transaction.Transaction(pkg, backup).roll_back()
        finally:
            signal.alarm(0)
        assert sorted(p.name for p in site.iterdir()) == ["sglang"]
        assert (pkg / "srt" / "x.py").read_text() == "x = 1\n"
        (saved / rel).unlink()


def test_a_key_with_a_line_break_is_never_sent_or_echoed(monkeypatch):
    from sgl_eagle_ext.common import http
    from sgl_eagle_ext.tools import healthcheck

    reply = http.request("http://127.0.0.1:9/x", api_key="CANARY-CR\r\nX-Evil: 1")
    assert reply.status == 0 and "control character" in reply.error
    assert "CANARY" not in reply.error
    monkeypatch.setenv(healthcheck.API_KEY_ENV, "CANARY-CR\r")
    code, text = _in_process(healthcheck.main, ["--url", "http://127.0.0.1:9"])
    assert code == 2 and "control character" in text and "CANARY" not in text, text


def test_the_preflight_probe_leaves_no_orphan_behind_a_wrapper(tmp_path, monkeypatch):
    """--sglang-python naming a wrapper that does not `exec` its python: on the
    probe's timeout the wrapper's whole group goes, not the wrapper alone."""
    import psutil

    from sgl_eagle_ext.launcher.preflight import ask_sglang, probe_server
    from tests.conftest import wait_until

    monkeypatch.delenv(probe_server.VAR, raising=False)  # the one-off subprocess's group

    pidfile = tmp_path / "child.pid"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    wrapper.chmod(0o755)
    answer, why, _cacheable = ask_sglang._probe(str(wrapper), {"launches": []}, None, 2)
    assert answer is None and "timed out after 2 s" in why
    child = int(pidfile.read_text())

    def gone():
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(gone, 10, f"the wrapper's child {child}")
