"""Type checks for the project's own records as they are read back (results files,
--save-requests files): a record edited by hand, cut by a full disk or written by
another tool must be skipped and counted, never crash a reader half-way. Each kind
names the fields its readers compute with and what each must hold; a field that is
absent is left to the reader (it uses .get), one of the wrong type skips the record."""

from __future__ import annotations

import math


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def number(v) -> str | None:
    return None if v is None or _number(v) else "a finite number (or null)"


def count(v) -> str | None:
    ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)
    return None if ok else "a whole number >= 0 (or null)"


def text(v) -> str | None:
    return None if v is None or isinstance(v, str) else "a string (or null)"


def flag(v) -> str | None:
    return None if v is None or isinstance(v, bool) else "true or false"


def numbers(v) -> str | None:
    ok = v is None or (isinstance(v, list) and all(_number(x) for x in v))
    return None if ok else "a list of numbers (or null)"


def counts(v) -> str | None:
    ok = v is None or (
        isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    )
    return None if ok and not any(x < 0 for x in v or []) else "a list of whole numbers >= 0"


def percentiles(v) -> str | None:
    ok = v is None or (isinstance(v, dict) and all(x is None or _number(x) for x in v.values()))
    return None if ok else "an object of percentiles (numbers)"


def mapping(v) -> str | None:
    return None if v is None or isinstance(v, dict) else "an object (or null)"


def error_counts(v) -> str | None:
    ok = v is None or (isinstance(v, dict) and all(count(x) is None for x in v.values()))
    return None if ok else "an object of counts"


_COMMON = {"run_id": text, "arm": text, "label": text, "url": text, "status": text}
_LEVEL = {"concurrency": count, "request_rate": number}

REQUEST = {
    **_COMMON,
    **_LEVEL,
    "ok": flag,
    "id": text,
    "index": count,
    "level_duration_s": number,
    "start_s": number,
    "ttft_ms": number,
    "e2e_ms": number,
    "tpot_ms": number,
    "itl_ms": numbers,
    "prompt_tokens": count,
    "completion_tokens": count,
    "verify_ct": count,
    "accept_length": number,
    "correct_drafts_histogram": counts,
    "input_len_target": count,
    "output_len_target": count,
}

# Every results record (single, sweep, lossless, compare).
RESULT = {
    **_COMMON,
    "kind": text,
    "accept_length": number,
    "max_tokens": count,
    "provenance": mapping,
}
# A load level (sweep, compare, ab): what plot, report and the tables compute with.
LEVEL = {
    **RESULT,
    **_LEVEL,
    "requests": count,
    "completed": count,
    "short": count,
    "duration_s": number,
    "output_tokens": count,
    "prompt_tokens": count,
    "output_tok_s": number,
    "request_s": number,
    "goodput_tok_s": number,
    "errors": error_counts,
    "ttft_ms": percentiles,
    "tpot_ms": percentiles,
    "itl_ms": percentiles,
    "e2e_ms": percentiles,
}
SINGLE = {**RESULT, "tok_s": percentiles, "decode_tok_s": percentiles, "ttft_ms": percentiles}


def result_fields(obj: dict) -> dict:
    if obj.get("kind") == "single":
        return SINGLE
    if obj.get("kind") == "sweep" or "concurrency" in obj or "request_rate" in obj:
        return LEVEL
    return RESULT


def problem(obj: dict, fields: dict) -> str | None:
    """Why `obj` cannot be used (its first field of the wrong type), or None."""
    for name, check in fields.items():
        if name in obj:
            try:
                why = check(obj[name])
            except TypeError:  # e.g. a list holding a list
                why = "another type"
            if why:
                return f"field '{name}' must be {why}, not {type(obj[name]).__name__}"
    return None


SHOWN = 10


def summarized(problems: list[str], path) -> list[str]:
    """The first SHOWN skip messages and one line with the count of all."""
    if len(problems) <= SHOWN:
        return problems
    return [*problems[:SHOWN], f"{path}: {len(problems)} line(s) skipped in all"]
