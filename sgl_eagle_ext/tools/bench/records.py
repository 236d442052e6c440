"""Result records: one JSON line per result (and one CSV row), appended atomically.

Each append is a single write() of a complete line to a file opened with
O_APPEND, under an exclusive lock, then fsync'ed: a crash or Ctrl-C never leaves
half a line, and concurrent writers never interleave. Should a file end without
a newline anyway (written by something else), the next append starts a new line
so its own record stays intact; readers skip and report such debris.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import secrets
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from sgl_eagle_ext.common import safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.paths import check_writable_file
from sgl_eagle_ext.common.redaction import redact_values
from sgl_eagle_ext.tools.bench import record_check

SCHEMA = 1
DEFAULT_RESULTS = Path("bench-results/results.jsonl")

# The flat CSV view: one fixed column set for every record kind (blank when n/a).
CSV_COLUMNS = (
    "date",
    "run_id",
    "kind",
    "arm",
    "status",
    "url",
    "preset",
    "sglang_version",
    "project_version",
    "model",
    "draft_model",
    "gpus",
    "prompt_set",
    "prompt_sha256",
    "max_tokens",
    "temperature",
    "concurrency",
    "requests",
    "completed",
    "errors",
    "short",
    "malformed_chunks",
    "duration_s",
    "output_tokens",
    "output_tok_s",
    "request_s",
    "goodput_tok_s",
    *(f"{m}_{p}_ms" for m in ("ttft", "tpot", "itl", "e2e") for p in ("p50", "p90", "p99")),
    "tokens_per_chunk",
    "accept_length",
    "accept_length_source",
    "tok_s_mean",
    "tok_s_median",
    "tok_s_min",
    "tok_s_max",
    "tok_s_stdev",
    "tok_s_ci95_low",
    "tok_s_ci95_high",
    "overall_tok_s",
    "runs",
    "steady",
    "compared",
    "identical",
    "verdict",
)


def new_run_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _append_bytes(path: Path, data: bytes, header: bytes = b"") -> None:
    """Append `data` whole; `header` first when the file is empty, decided under the
    lock so that parallel writers to one file never write it twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a torn line left by someone else: keep ours whole
        elif not size:
            data = header + data
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def clean(obj):
    """JSON-safe copy: NaN and infinities become null (JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def encode_line(record: dict) -> bytes:
    """One JSON line, UTF-8. A path or label holding bytes that are not UTF-8 (Python's
    surrogate escapes of a Latin-1 file name) is written as \\udcXX escapes: valid
    JSON and lossless (os.fsencode of the value read back gives the bytes)."""
    rec = clean(record)
    try:
        text = json.dumps(rec, ensure_ascii=False, default=str, allow_nan=False)
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(rec, default=str, allow_nan=False) + "\n").encode("ascii")


def append_jsonl(path: Path, record: dict) -> None:
    _append_bytes(path, encode_line(record))


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def check_csv(path: Path) -> None:
    """Refuse (before a run, not after it) a CSV whose header is not ours."""
    if path.is_file() and path.stat().st_size:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            header = next(csv.reader(f), [])
        if tuple(header) != CSV_COLUMNS:
            raise UserError(
                f"{path}: its header is not this tool's CSV layout (written by "
                f"another tool or an older version).",
                fix="pass --results with another file name, or move the old files",
            )


def append_csv(path: Path, row: dict) -> None:
    row = clean(row)
    values = ["" if row.get(c) is None else row.get(c) for c in CSV_COLUMNS]
    header = _csv_line(list(CSV_COLUMNS)).encode("utf-8")
    # surrogateescape: a non-UTF-8 path goes back to its own bytes, never an exception
    _append_bytes(path, _csv_line(values).encode("utf-8", "surrogateescape"), header)


def read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    """Records and, separately, one warning per line that is not a record."""
    fix = "give the JSONL file `bench` wrote (default bench-results/results.jsonl)"
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a results file.", fix=fix)
    records, problems = [], []
    try:
        f = safe_files.open_regular("", path, text=True, errors="replace")
    except UserError as e:  # missing, a FIFO, a device: one line, at once
        raise UserError(e.message, fix=fix) from None
    with f:
        for i, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError) as e:
                why = getattr(e, "msg", None) or type(e).__name__
                problems.append(f"{path}:{i}: skipped: not a JSON record ({why})")
                continue
            if not isinstance(obj, dict) or "kind" not in obj:
                problems.append(f"{path}:{i}: skipped: not a bench record (no 'kind')")
                continue
            why = record_check.problem(obj, record_check.result_fields(obj))
            if why:
                problems.append(f"{path}:{i}: skipped: {why}")
                continue
            records.append(obj)
    return records, record_check.summarized(problems, path)


def _pct(block: dict | None, p: str):
    return None if not block else block.get(p)


def csv_row(record: dict) -> dict:
    """The flat view of a record for the CSV file."""
    prov = record.get("provenance", {})
    server = prov.get("server", {})
    host = prov.get("host", {})
    gpu = host.get("gpu", {})
    row = {
        "date": host.get("date"),
        "run_id": record.get("run_id"),
        "kind": record.get("kind"),
        "arm": record.get("arm"),
        "status": record.get("status"),
        "url": server.get("url"),
        "preset": server.get("preset"),
        "sglang_version": server.get("sglang_version"),
        "project_version": host.get("project", {}).get("version"),
        "model": server.get("model_path"),
        "draft_model": server.get("draft_model_path"),
        "gpus": "; ".join(f"{g['name']} (driver {g['driver']})" for g in gpu.get("gpus", []))
        or "none",
        "prompt_set": prov.get("prompts", {}).get("set"),
        "prompt_sha256": prov.get("prompts", {}).get("sha256"),
    }
    for key in (
        "max_tokens",
        "temperature",
        "concurrency",
        "requests",
        "completed",
        "short",
        "malformed_chunks",
        "duration_s",
        "output_tokens",
        "output_tok_s",
        "request_s",
        "goodput_tok_s",
        "tokens_per_chunk",
        "accept_length",
        "accept_length_source",
        "overall_tok_s",
        "compared",
        "identical",
        "verdict",
    ):
        if key in record:
            row[key] = record[key]
    if isinstance(record.get("errors"), dict):
        row["errors"] = sum(record["errors"].values())
    for m in ("ttft", "tpot", "itl", "e2e"):
        for p in ("p50", "p90", "p99"):
            row[f"{m}_{p}_ms"] = _pct(record.get(f"{m}_ms"), p)
    tok = record.get("tok_s")
    if isinstance(tok, dict):
        for k in ("mean", "median", "min", "max", "stdev", "ci95_low", "ci95_high"):
            row[f"tok_s_{k}"] = tok.get(k)
        row["runs"] = tok.get("n")
    if "steady" in record:
        row["steady"] = record["steady"]
    return row


def results_paths(results: Path) -> tuple[Path, Path]:
    """(JSONL, CSV) for --results: the CSV sits next to the JSONL; a name given
    as .csv means that CSV, and its JSONL gets the .jsonl suffix (never one file
    for both)."""
    if results.suffix.lower() == ".csv":
        return results.with_suffix(".jsonl"), results
    return results, results.with_suffix(".csv")


class Recorder:
    """Appends records of one invocation (shared run id and provenance).

    Both paths are checked here, before the first request; should a write still
    fail at the end (disk full, folder removed meanwhile), the record goes to a
    rescue file in the temporary folder instead of being lost."""

    def __init__(
        self, results: Path | None, run_id: str | None = None, secrets: tuple[str, ...] = ()
    ):
        self.jsonl, self.csv = results_paths(results) if results is not None else (None, None)
        self.run_id = run_id or new_run_id()
        self.written = 0
        self.secrets = tuple(s for s in secrets if s)
        self.rescued: Path | None = None
        if self.jsonl is not None:
            check_writable_file("--results", self.jsonl)
            check_writable_file("--results (its CSV)", self.csv)
            check_csv(self.csv)

    def write(self, kind: str, fields: dict, provenance: dict) -> dict:
        record = redact_values(
            {
                "schema": SCHEMA,
                "kind": kind,
                "run_id": self.run_id,
                **fields,
                "provenance": provenance,
            },
            self.secrets,
        )
        if self.jsonl is not None:
            try:
                append_jsonl(self.jsonl, record)
                append_csv(self.csv, csv_row(record))
            except OSError as e:
                self._rescue(record, e)
            self.written += 1
        return record

    def _rescue(self, record: dict, error: OSError) -> None:
        self.rescued = Path(tempfile.gettempdir()) / f"bench-rescued-{self.run_id}.jsonl"
        try:
            append_jsonl(self.rescued, record)
            where = f"written to {self.rescued} instead"
        except OSError:
            self.rescued = None
            where = "here it is:\n" + json.dumps(clean(record), default=str)
        print(
            f"warning: cannot write {self.jsonl} ({error.strerror or error}); the record is "
            f"{where}",
            file=sys.stderr,
            flush=True,
        )
