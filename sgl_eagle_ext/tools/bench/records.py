"""Result records: one JSON line per result (and one CSV row), appended atomically.

Each append is a single write() of a complete line to a file opened with
O_APPEND, under an exclusive lock, then fsync'ed: a crash or Ctrl-C never leaves
half a line, and concurrent writers never interleave. Should a file end without
a newline anyway (written by something else), the next append starts a new line
so its own record stays intact; readers skip and report such debris.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import io
import json
import math
import os
import secrets
import stat
import sys
import tempfile
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Annotated, get_type_hints

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.paths import check_writable_file
from sgl_eagle_ext.common.redaction import known, redact_values

SCHEMA = 1
# latency blocks of a sweep record: itl per token (as sglang.bench_serving), chunk_gap
# between streamed chunks
LATENCIES = ("ttft", "tpot", "itl", "chunk_gap", "e2e")
DEFAULT_RESULTS = Path("bench-results/results.jsonl")

# What shaped the load of a record (session.load_shape + the level's own value): one
# list, in the CSV as in the report's subtitle. request_rate is blank in closed loop
# and "inf" for a burst (its JSON record: request_rate null, arrival "burst").
LOAD_COLUMNS = (
    "request_rate",
    "max_concurrency",
    "arrival",
    "burstiness",
    "duration_target_s",
    "trace_speed",
    "dataset",
    "input_len",
    "output_len",
    "stream",
)


# The typed records: one dataclass per kind, its fields' types the checks a record read
# back must pass (one edited by hand, cut by a full disk or written by another tool is
# skipped and counted, never crashes a reader half-way). A field absent is None; one of
# the wrong type skips the record. decode() gives the typed view readers compute with.
def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check(what: str, ok):
    return lambda v: None if v is None or ok(v) else what


Number = Annotated["float | None", _check("a finite number (or null)", _finite)]
Count = Annotated["int | None", _check("a whole number >= 0 (or null)", _whole)]
Text = Annotated["str | None", _check("a string (or null)", lambda v: isinstance(v, str))]
Flag = Annotated["bool | None", _check("true or false", lambda v: isinstance(v, bool))]
Numbers = Annotated[
    "list[float] | None",
    _check("a list of numbers (or null)", lambda v: isinstance(v, list) and all(map(_finite, v))),
]
Counts = Annotated[
    "list[int] | None",
    _check("a list of whole numbers >= 0", lambda v: isinstance(v, list) and all(map(_whole, v))),
]
Percentiles = Annotated[
    "dict[str, float | None] | None",
    _check(
        "an object of percentiles (numbers)",
        lambda v: isinstance(v, dict) and all(x is None or _finite(x) for x in v.values()),
    ),
]
# a length asked for: tokens, or a spelling ("dataset", "32:64" uniform)
Length = Annotated[
    "int | str | None",
    _check("a whole number or a string", lambda v: _whole(v) or isinstance(v, str)),
]
Texts = Annotated[
    "list[str] | None",
    _check(
        "a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
    ),
]
Mapping = Annotated["dict | None", _check("an object (or null)", lambda v: isinstance(v, dict))]
ErrorCounts = Annotated[
    "dict[str, int] | None",
    _check("an object of counts", lambda v: isinstance(v, dict) and all(map(_whole, v.values()))),
]


@dataclass(frozen=True)
class _Record:
    run_id: Text = None
    arm: Text = None
    label: Text = None
    url: Text = None
    status: Text = None


@dataclass(frozen=True)
class _Load:
    concurrency: Count = None
    request_rate: Number = None


@dataclass(frozen=True)
class Request(_Load, _Record):
    """A --save-requests line: one request of a level."""

    ok: Flag = None
    id: Text = None
    index: Count = None
    level_duration_s: Number = None
    start_s: Number = None
    ttft_ms: Number = None
    e2e_ms: Number = None
    tpot_ms: Number = None
    itl_ms: Numbers = None
    prompt_tokens: Count = None
    completion_tokens: Count = None
    verify_ct: Count = None
    accept_length: Number = None
    correct_drafts_histogram: Counts = None
    input_len_target: Count = None
    output_len_target: Count = None


@dataclass(frozen=True)
class Result(_Record):
    """Every results record (single, sweep, lossless, compare)."""

    kind: Text = None
    accept_length: Number = None
    max_tokens: Count = None
    provenance: Mapping = None

    def at(self, block: str, key: str):
        """One figure of a block of figures (a latency's percentiles, a single run's
        tok/s summary), or None."""
        return (getattr(self, block) or {}).get(key)


@dataclass(frozen=True)
class Level(_Load, Result):
    """A load level (sweep, compare, ab): what plot, report and the tables compute with."""

    requests: Count = None
    completed: Count = None
    short: Count = None
    duration_s: Number = None
    output_tokens: Count = None
    prompt_tokens: Count = None
    output_tok_s: Number = None
    request_s: Number = None
    goodput_tok_s: Number = None
    errors: ErrorCounts = None
    ttft_ms: Percentiles = None
    tpot_ms: Percentiles = None
    itl_ms: Percentiles = None
    e2e_ms: Percentiles = None
    error_examples: Texts = None
    short_examples: Texts = None
    malformed_chunks: Count = None
    tokens_estimated: Count = None  # requests without a usage chunk
    tokens_per_chunk: Number = None
    client_busy: Number = None  # the load generator's share of a core
    send_lag_ms: Percentiles = None
    arrivals: Count = None
    not_sent: Count = None  # a level cut short by a dead server
    steady_state_note: Text = None
    other_traffic: Text = None
    peak_output_tok_s: Number = None
    peak_concurrency: Count = None
    slo_attainment: Number = None
    slo_attainment_by_metric: Mapping = None
    metric_percentiles: Mapping = None
    # what shaped the load (LOAD_COLUMNS)
    arrival: Text = None
    burstiness: Number = None
    max_concurrency: Count = None
    duration_target_s: Number = None
    trace_speed: Number = None
    dataset: Text = None
    input_len: Length = None
    output_len: Length = None
    stream: Flag = None
    # a one-stream level's requests as repeated runs (level_metrics.one_stream; bench single)
    accept_length_source: Text = None  # "metrics delta" or "per-request sum"
    shape: Text = None  # "single": written by bench single
    tok_s: Percentiles = None
    overall_tok_s: Number = None
    steady: Flag = None
    steady_warnings: Texts = None

    @property
    def error_count(self) -> int:
        return sum((self.errors or {}).values())

    @property
    def level(self) -> tuple[str, float]:
        """(x key, value): the request rate (open loop) or the concurrency."""
        if self.request_rate is not None:
            return "request_rate", float(self.request_rate)
        return "concurrency", float(self.concurrency or 0)

    @property
    def level_text(self) -> str:
        if self.request_rate is not None:
            return f"{self.request_rate:g} req/s"
        return f"c={self.concurrency}" + (" (burst)" if self.arrival == "burst" else "")


@dataclass(frozen=True)
class Single(Result):  # written before `bench single` was a one-level sweep: still read
    tok_s: Percentiles = None
    decode_tok_s: Percentiles = None
    ttft_ms: Percentiles = None


@dataclass(frozen=True)
class Lossless(Result):
    verdict: Text = None
    identical: Count = None
    compared: Count = None


@dataclass(frozen=True)
class AB(Result):  # written before `bench ab` was compare of two arms: still read
    preset_a: Text = None
    preset_b: Text = None
    verdict: Text = None
    lossless: Text = None
    recommendation: Text = None
    crossover_throughput: Mapping = None


@dataclass(frozen=True)
class Compare(Result):
    arms: Texts = None
    reference: Text = None
    crossover_throughput: Mapping = None  # arm -> its crossover against the reference
    crossover_goodput: Mapping = None
    lossless: Mapping = None  # arm -> verdict
    recommendation: Mapping = None  # arm -> what to serve
    failed_arms: Mapping = None  # arm -> why


KINDS = {"single": Single, "lossless": Lossless, "ab": AB, "compare": Compare}


@cache
def _checks(cls) -> dict:
    hints = get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name].__metadata__[0] for f in fields(cls)}


def kind_of(obj: dict) -> type:
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in KINDS:
        return KINDS[kind]
    if kind == "sweep" or "concurrency" in obj or "request_rate" in obj:
        return Level
    return Result


def problem(obj: dict, cls: type) -> str | None:
    """Why `obj` cannot be read as `cls` (its first field of the wrong type), or None."""
    for name, check in _checks(cls).items():
        if name in obj:
            try:
                why = check(obj[name])
            except TypeError:  # e.g. a list holding a list
                why = "another type"
            if why:
                return f"field '{name}' must be {why}, not {type(obj[name]).__name__}"
    return None


def decode(obj, cls: type | None = None):
    """The typed view of a record read back (checked by read_jsonl / request_log.read):
    its kind's fields, None where absent; fields of no kind's are left out. A view of
    `cls` already is returned as it is, so a reader can take either."""
    if cls is not None and isinstance(obj, cls):
        return obj
    cls = cls or kind_of(obj)
    return cls(**{name: obj.get(name) for name in _checks(cls)})


SHOWN = 10


def summarized(problems: list[str], path) -> list[str]:
    """The first SHOWN skip messages and one line with the count of all."""
    if len(problems) <= SHOWN:
        return problems
    return [*problems[:SHOWN], f"{path}: {len(problems)} line(s) skipped in all"]


# The flat CSV view: one fixed column set for every record kind (blank when n/a),
# each column with where its value comes from in a record. csv_row() and the header
# both come from this one table.
def _at(*path: str):
    def get(rec: dict):
        for key in path:
            rec = rec.get(key) if isinstance(rec, dict) else None
        return rec

    return get


def _gpus(rec: dict) -> str:
    gpus = _at("provenance", "host", "gpu", "gpus")(rec) or []
    return "; ".join(f"{g['name']} (driver {g['driver']})" for g in gpus) or "none"


def _errors(rec: dict):
    errors = rec.get("errors")
    return sum(errors.values()) if isinstance(errors, dict) else None


def _request_rate(rec: dict):
    # JSON cannot hold infinity: a burst is recorded as arrival "burst", rate null
    return "inf" if rec.get("arrival") == "burst" else rec.get("request_rate")


_SERVER = ("provenance", "server")
COLUMNS = (
    ("date", _at("provenance", "host", "date")),
    ("run_id", _at("run_id")),
    ("kind", _at("kind")),
    ("arm", _at("arm")),
    ("status", _at("status")),
    ("url", _at(*_SERVER, "url")),
    ("preset", _at(*_SERVER, "preset")),
    ("sglang_version", _at(*_SERVER, "sglang_version")),
    ("project_version", _at("provenance", "host", "project", "version")),
    ("model", _at(*_SERVER, "model_path")),
    ("draft_model", _at(*_SERVER, "draft_model_path")),
    ("gpus", _gpus),
    ("prompt_set", _at("provenance", "prompts", "set")),
    ("prompt_sha256", _at("provenance", "prompts", "sha256")),
    *((k, _at(k)) for k in ("max_tokens", "temperature", "concurrency")),
    ("request_rate", _request_rate),
    *((k, _at(k)) for k in LOAD_COLUMNS[1:]),
    # concurrency_mean: sglang.bench_serving's "Concurrency" (request time / duration)
    *((k, _at(k)) for k in ("requests", "completed", "concurrency_mean")),
    ("errors", _errors),
    *(
        (k, _at(k))
        for k in (
            "short",
            "malformed_chunks",
            "duration_s",
            "output_tokens",
            "input_tokens",  # the prompts as sent (sglang.bench_serving's input lengths)
            "prompt_tokens",  # the server's count: the chat template included
            "input_tok_s",
            "prompt_tok_s",
            "output_tok_s",
            "total_tok_s",
            "request_s",
            "goodput_tok_s",
        )
    ),
    *((f"{m}_{p}_ms", _at(f"{m}_ms", p)) for m in LATENCIES for p in ("mean", "p50", "p90", "p99")),
    *(
        (k, _at(k))
        for k in (
            "tokens_per_chunk",
            "accept_length",  # decode-only: SGLang's /server_info avg_spec_accept_length
            "accept_length_with_prefill",
            "accept_length_source",
        )
    ),
    *(
        (f"tok_s_{k}", _at("tok_s", k))
        for k in ("mean", "median", "min", "max", "stdev", "ci95_low", "ci95_high")
    ),
    ("overall_tok_s", _at("overall_tok_s")),
    ("runs", _at("tok_s", "n")),
    *((k, _at(k)) for k in ("steady", "compared", "identical", "verdict")),
)
CSV_COLUMNS = tuple(name for name, _ in COLUMNS)


def new_run_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def append_bytes(path: Path, data: bytes, header: bytes = b"") -> None:
    """Append `data` whole, or nothing: a failed write is cut back to the file's size
    before it. `header` first when the file is empty, decided under the lock so that
    parallel writers to one file never write it twice. Not a regular file (a FIFO,
    a device: no lock, no fsync, no truncation): refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a torn line left by someone else: keep ours whole
        elif not size:
            data = header + data
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError:
            # a full disk or a file-size limit mid-write: back to the last whole line,
            # so no reader meets a torn one; the caller rescues what was not written
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
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
    append_bytes(path, encode_line(record))


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
    append_bytes(path, _csv_line(values).encode("utf-8", "surrogateescape"), header)


def read_lines(path: Path, fix: str, not_json: str, check) -> tuple[list[dict], list[str]]:
    """The JSON objects of a JSON-lines file that `check(obj)` accepts (it returns why
    not, or None), and one warning per line skipped: the one reader of results and
    per-request files. A missing file, a FIFO or a device: one UserError, at once."""
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a results file.", fix=fix)
    try:
        f = safe_files.open_regular("", path, text=True, errors="replace")
    except UserError as e:
        raise UserError(e.message, fix=fix) from None
    objs, problems = [], []
    with f:
        for i, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = nesting.json_loads(line)
            except (ValueError, RecursionError) as e:
                why = getattr(e, "msg", None) or str(e) or type(e).__name__
                problems.append(f"{path}:{i}: skipped: {not_json} ({why})")
                continue
            why = check(obj)
            if why:
                problems.append(f"{path}:{i}: skipped: {why}")
                continue
            objs.append(obj)
    return objs, problems


def _result_problem(obj) -> str | None:
    if not isinstance(obj, dict) or "kind" not in obj:
        return "not a bench record (no 'kind')"
    return problem(obj, kind_of(obj))


def read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    """Records and, separately, one warning per line that is not a record."""
    fix = "give the JSONL file `bench` wrote (default bench-results/results.jsonl)"
    recs, problems = read_lines(path, fix, "not a JSON record", _result_problem)
    return recs, summarized(problems, path)


def csv_row(record: dict) -> dict:
    """The flat view of a record for the CSV file (every column; None when n/a)."""
    return {name: get(record) for name, get in COLUMNS}


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
            self.secrets + known(),
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
        shown = "here it is:\n" + json.dumps(clean(record), default=str)
        name = f"bench-rescued-{self.run_id}.jsonl"
        self.rescued, where = rescue(encode_line(record), name, shown)
        warn_unwritten(self.jsonl, error, f"the record is {where}")


def rescue(data: bytes, name: str, otherwise: str) -> tuple[Path | None, str]:
    """Lines a file did not take go to NAME in the temporary folder: (that file, or None
    and `otherwise`; where they went, for the warning)."""
    path = Path(tempfile.gettempdir()) / name
    try:
        append_bytes(path, data)
        return path, f"written to {path} instead"
    except OSError:
        return None, otherwise


def warn_unwritten(path: Path, error: OSError, what: str) -> None:
    print(
        f"warning: cannot write {path} ({error.strerror or error}); {what}",
        file=sys.stderr,
        flush=True,
    )
