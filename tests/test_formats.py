"""The file formats' writers and readers, each module round-tripped: what a writer
writes, its reader gives back: the profile record, the adaptive config, SGLang's
accept length, the bench CSV."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter

import pytest

from sgl_eagle_ext.common import adaptive_config, releases
from sgl_eagle_ext.common import figures as accept_length
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.profiling import record
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.cycles import Resolved


# -- profile record (profiling/record.py) ------------------------------------------
def summarized(steps: int | None = 2, accepted=((3, 1), (2, 2), (1, 1))) -> dict:
    cycles = [
        Resolved(
            "decode",
            2,
            (steps or 0) + 1,
            {"cycle": 20.0 + i, "draft": 2.0, "verify_fwd": 15.0, "accept": 0.5},
            list(acc),
            0,
            steps,
        )
        for i, acc in enumerate(accepted)
    ]
    cycles.append(Resolved("prefill", 1, 3, {"cycle": 40.0}, [], 0, steps))
    rec = window.summarize(cycles, rank=3, clock="cuda", dropped=1)
    rec.sync_counted = "device-syncs"
    return rec


def close(a: dict, b: dict) -> None:
    """Equal up to the log line's decimals (two; one for shares)."""
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            close(a[k], b[k])
        elif isinstance(a[k], float):
            assert b[k] == pytest.approx(a[k], abs=0.051 if k == "share" else 0.006), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("steps", [2, 0, None])
def test_profile_log_line_round_trips(steps):
    rec = summarized(steps)
    back = record.record_from_line("[2026-12-01 10:00:00 TP3] " + record.log_line(rec))
    close({k: v for k, v in rec.to_json().items() if k != "ts"}, back.to_json())
    assert record.log_line(back) == record.log_line(rec)  # a fixed point


def test_profile_json_line_round_trips_with_int_keys():
    rec = summarized()
    rec.ts = 1.5
    text = record.json_line(rec)
    assert text.endswith("\n") and text.count("\n") == 1
    assert record.record_from_line(text) == rec  # JSON's string keys back to ints


def test_a_window_without_decode_cycles_round_trips():
    rec = window.summarize([Resolved("prefill", 1, 3, {"cycle": 40.0}, [], 0, 2)], 0, "host")
    back = record.record_from_line(record.log_line(rec))
    assert back.cycles == 0 and (back.prefill_n, back.prefill_ms) == (1, 40.0)
    assert not back.phases and back.clock == "host"


def test_find_record_tells_other_lines_from_bad_records():
    line = record.log_line(summarized())
    assert record.find_record("EAGLE3_PROFILE: on (SGLang 0.5.23, ...)") is None
    assert record.find_record("Decode batch, #running-req: 1") is None
    assert record.find_record('{"other": 1}') is None
    assert record.find_record(line).rank == 3
    for bad in (line[: len(line) // 2], "EAGLE3_PROFILE v=1 rank=x", '{"cycles": 3'):
        with pytest.raises(record.BAD_LINE):
            record.find_record(bad)
    with pytest.raises(ValueError, match="out of range"):
        record.find_record(re.sub(r"prefill=(\d+)/[\d.]+", r"prefill=\1/nan", line))


def test_iter_records_streams_a_file_and_counts_bad_lines(tmp_path):
    good = summarized()
    lines = [
        "noise",
        "[2026] " + record.log_line(good),
        record.log_line(good)[:50],
        record.json_line(good).strip(),
        '{"cycles": 1, "v": 1}',  # a record's marker, not a record
        "EAGLE3_PROFILE: disabled, serving unprofiled: ...",
    ]
    path = tmp_path / "server.log"
    path.write_text("\r\n".join(lines) + "\r\n")
    counts = record.Counts()
    recs = list(record.iter_records(path, counts))
    assert [r.rank for r in recs] == [3, 3]
    assert (counts.records, counts.skipped) == (2, 2)
    assert list(record.iter_records(lines)) == recs


def test_reading_a_directory_or_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        list(record.iter_records(tmp_path))
    with pytest.raises(UserError, match="cannot be read"):
        list(record.iter_records(tmp_path / "nope.log"))


# -- adaptive config (common/adaptive_config.py) -------------------------------------
R0523, R0513 = releases.BY_VERSION["0.5.23"], releases.BY_VERSION["0.5.13.post1"]


def test_adaptive_config_round_trips(tmp_path):
    table = {"1": [0, 1, 3], "4": [0, 1], "16": [0]}
    path = adaptive_config.write(tmp_path / "sub" / "a.json", table, about='tuned "here"')
    assert path.read_text() == adaptive_config.text(table, 'tuned "here"')
    assert json.loads(path.read_text())["_about"] == 'tuned "here"'
    buckets, problems = adaptive_config.load(path, R0523)
    assert buckets == {int(k): v for k, v in table.items()} and problems == []
    assert adaptive_config.validate(json.loads(path.read_text()), R0523) == (buckets, [])


def test_adaptive_config_refusals_name_the_field_and_fix(tmp_path):
    zero = adaptive_config.write(tmp_path / "z.json", {"1": [0, 2]}, "x")
    buckets, (problem,) = adaptive_config.load(zero, R0513)  # no 0 steps before 0.5.16
    assert buckets is None and problem.severity == adaptive_config.ERROR
    assert problem.field == "1.candidate_steps" and "0.5.16" in problem.fix
    (tmp_path / "bad.json").write_bytes(b"\xff{")
    buckets, (problem,) = adaptive_config.load(tmp_path / "bad.json", R0523)
    assert buckets is None and "not UTF-8 text" in problem.message
    (tmp_path / "bad2.json").write_text("{1: 2}")
    buckets, (problem,) = adaptive_config.load(tmp_path / "bad2.json", R0523)
    assert buckets is None and "invalid JSON" in problem.message
    buckets, (problem,) = adaptive_config.load(tmp_path / "missing.json", R0523)
    assert buckets is None and adaptive_config.FLAG in problem.fix


def test_preflight_reads_the_config_through_the_format_module(tmp_path):
    from sgl_eagle_ext.launcher.preflight import adaptive

    path = adaptive_config.write(tmp_path / "a.json", {"2": [1, 3]}, "x")
    buckets, (finding,) = adaptive.load(path, R0523)
    assert buckets == {2: [1, 3]} and finding.id == "adaptive.config-key"
    assert finding.file == str(path) and finding.severity == "warning"


# -- SGLang's accept length (common/figures.py) ---------------------------------
def test_accept_length_guards():
    assert accept_length.per_cycle(0) == 1 and accept_length.per_cycle(3) == 4
    assert accept_length.from_counts(30, 12) == 2.5
    for tokens, cycles in ((30, 0), (0, 5), (None, 5), (30, None), (True, 1), (float("nan"), 2)):
        assert accept_length.from_counts(tokens, cycles) is None, (tokens, cycles)
    assert accept_length.of_request(2.25, 30, 12) == 2.25  # SGLang's own figure first
    assert accept_length.of_request(0.0, 30, 12) == 2.5  # OpenAI details: 0.0 means none
    assert accept_length.of_meta({"completion_tokens": 8}) is None  # no speculation
    assert accept_length.of_meta({"completion_tokens": 9, "spec_verify_ct": 3}) == 3.0
    assert accept_length.from_histogram({0: 2, 2: 2}) == 2.0
    assert accept_length.from_histogram({}) is None


def test_every_user_computes_the_same_accept_length():
    from sgl_eagle_ext.common import http
    from sgl_eagle_ext.tools.bench import client, request_log, spec_view

    meta = {"completion_tokens": 10, "spec_verify_ct": 4}
    assert http.accept_length(meta) == accept_length.of_meta(meta) == 2.5
    r = client.RequestResult(index=0, prompt_id="p")
    r.completion_tokens, r.spec_verify_ct = 10, 4
    assert request_log.accept_length(r) == 2.5
    r.spec_details = {"spec_accept_length": 0.0}  # streamed details without the figure
    assert request_log.accept_length(r) == 2.5
    rows = [{"ok": True, "prompt_tokens": 5, "completion_tokens": 10, "verify_ct": 4}]
    assert spec_view.by_input_bucket(rows)[0].accept_length == 2.5
    assert accept_length.from_histogram(Counter({1: 2, 0: 2})) == 1.5


# -- bench CSV (tools/bench/records.py) -------------------------------------------------
def test_bench_csv_round_trips_through_its_one_column_table(tmp_path):
    from sgl_eagle_ext.tools.bench import records

    rec = {
        "kind": "sweep",
        "concurrency": 4,
        "errors": {"timeout": 2, "http": 1},
        "ttft_ms": {"p50": 12.5, "p99": 40.0},
        "tok_s": {"mean": 81.5, "n": 3},
        "accept_length": 2.5,
        "provenance": {"server": {"preset": "eagle3-2step"}, "host": {"date": "2026-12-01"}},
    }
    path = tmp_path / "r.csv"
    records.append_csv(path, records.csv_row(rec))
    records.append_csv(path, records.csv_row({"kind": "single"}))
    records.check_csv(path)  # our own header
    with open(path, newline="") as f:
        header, row, second = csv.reader(f)
    assert tuple(header) == records.CSV_COLUMNS == tuple(n for n, _ in records.COLUMNS)
    got = dict(zip(header, row, strict=True))
    assert got["preset"] == "eagle3-2step" and got["errors"] == "3" and got["runs"] == "3"
    assert got["ttft_p50_ms"] == "12.5" and got["ttft_p90_ms"] == "" and got["gpus"] == "none"
    assert got["tok_s_mean"] == "81.5" and got["accept_length"] == "2.5"
    assert second[header.index("kind")] == "single"
