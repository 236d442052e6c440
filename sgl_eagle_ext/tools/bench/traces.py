"""Request traces for timestamped replay (`--dataset trace:FILE`): when each request
arrived and how many tokens it had and asked for. Two public layouts:

    Mooncake (.jsonl)  one JSON object per line:
                       {"timestamp": MS, "input_length": N, "output_length": M,
                        "hash_ids": [h1, h2, ...]}
                       timestamp in milliseconds; hash_ids name the 512-token blocks
                       of the prompt (requests sharing a leading id share that prefix)
    BurstGPT (.csv)    a header with "Timestamp" (seconds), "Request tokens",
                       "Response tokens" (other columns, e.g. Model, Log Type, ignored)

Rows are sorted by time and made relative to the first. A bad file is one UserError
naming file, line and field.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting
from sgl_eagle_ext.common.errors import UserError

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces
MOONCAKE_SHAPE = '{"timestamp": 0, "input_length": 512, "output_length": 64, "hash_ids": [0]}'
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


@dataclass(frozen=True)
class TraceRow:
    at: float  # seconds from the trace's first request
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


def _count(value, where: str, name: str, fix: str) -> int:
    if isinstance(value, bool):
        value = None
    try:
        n = int(float(value))
    except (TypeError, ValueError):
        raise UserError(f"{where}: {name} is {value!r}, not a token count.", fix=fix) from None
    if n < 0 or n != float(value):
        raise UserError(f"{where}: {name} is {value!r}, not a token count.", fix=fix)
    return n


def _time(value, where: str, name: str, fix: str) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(value, bool) or not math.isfinite(t) or t < 0:
        raise UserError(f"{where}: {name} is {value!r}, not a time.", fix=fix)
    return t


def load_mooncake(path: Path) -> list[TraceRow]:
    rows = []
    fix = f"one request per line: {MOONCAKE_SHAPE}"
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            obj = nesting.json_loads(line)
        except ValueError as e:
            raise UserError(f"{where}: not valid JSON ({e}).", fix=fix) from None
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object.", fix=fix)
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise UserError(f"{where}: no '{key}'.", fix=fix)
        ids = obj.get("hash_ids") or []
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in ids
        ):
            raise UserError(f"{where}: hash_ids must be a list of integers.", fix=fix)
        rows.append(
            TraceRow(
                _time(obj["timestamp"], where, "timestamp", fix) / 1000.0,
                _count(obj["input_length"], where, "input_length", fix),
                _count(obj["output_length"], where, "output_length", fix),
                tuple(ids),
            )
        )
    return rows


def load_burstgpt(path: Path) -> list[TraceRow]:
    fix = f"a CSV with the columns {', '.join(BURSTGPT_COLUMNS)} (BurstGPT's layout)"
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in BURSTGPT_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise UserError(f"{path}: no column {missing[0]!r}.", fix=fix)
        rows = []
        for i, rec in enumerate(reader, start=2):
            where = f"{path}:{i}"
            rows.append(
                TraceRow(
                    _time(rec["Timestamp"], where, "Timestamp", fix),
                    _count(rec["Request tokens"], where, "Request tokens", fix),
                    _count(rec["Response tokens"], where, "Response tokens", fix),
                )
            )
    return rows


def load(path_text: str) -> list[TraceRow]:
    """The rows of a trace file, sorted by time, times relative to the first."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise UserError(
            f"--dataset trace:{path_text}: no such file.",
            fix="give a Mooncake .jsonl or a BurstGPT .csv trace",
        )
    try:
        rows = load_burstgpt(path) if path.suffix.lower() == ".csv" else load_mooncake(path)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}).", fix="save as UTF-8") from None
    # a request of 0 tokens either way cannot be sent: dropped (BurstGPT logs failures so)
    rows = [r for r in rows if r.input_len > 0 and r.output_len > 0]
    if not rows:
        raise UserError(f"{path}: no request with input and output tokens.", fix="check the file")
    rows.sort(key=lambda r: r.at)
    t0 = rows[0].at
    return [TraceRow(r.at - t0, r.input_len, r.output_len, r.hash_ids) for r in rows]
