"""Per-request records (`--save-requests FILE`): one JSON line per request.

Enough to recompute any latency figure and goodput at any SLO afterwards
(`bench goodput FILE --slo ttft=500,tpot=50`): send time within the level, TTFT,
every inter-chunk gap, E2E, token counts (the server's `usage`), the lengths that
were asked for, and the request's own speculation figures when the server streams
them (SGLang's `sglext.spec_tokens_details`: verify cycles, accept length, and the
histogram of correct drafts per verify cycle). A level's lines are appended in one
locked write, like the results file.
"""

from __future__ import annotations

from pathlib import Path

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.common.redaction import known, redact_values
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import records

KIND = "request"


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1e3, 3)


def accept_length(r: cl.RequestResult) -> float | None:
    """Tokens per verify cycle of one request (common/accept_length.py)."""
    reported = (r.spec_details or {}).get("spec_accept_length")
    return accept.of_request(reported, r.completion_tokens, r.spec_verify_ct)


def record(r: cl.RequestResult, level_start: float, **extra) -> dict:
    spec = r.spec_details or {}
    hist = spec.get("spec_correct_drafts_histogram") or spec.get("spec_accept_histogram")
    return {
        "kind": KIND,
        **extra,
        "index": r.index,
        "id": r.prompt_id,
        "ok": r.ok,
        "error": r.error or None,
        "detail": r.detail or None,
        "start_s": round(r.start - level_start, 6) if r.start else None,
        "ttft_ms": _ms(r.ttft),
        "e2e_ms": _ms(r.e2e),
        "tpot_ms": _ms(r.tpot),
        "itl_ms": [round(g * 1e3, 3) for g in r.itls],  # per token (client.RequestResult)
        "chunk_gap_ms": [round(g * 1e3, 3) for g in r.chunk_gaps],
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "tokens_from_usage": r.tokens_from_usage,
        "finish_reason": r.finish_reason,
        "chunks": len(r.chunk_times),
        "verify_ct": r.spec_verify_ct,
        "accept_length": accept_length(r),
        "correct_drafts_histogram": hist if isinstance(hist, list) else None,
    }


def check_writable(path: Path, results: str | Path | None = None) -> None:
    """Refuse, before the first request, a --save-requests path that cannot take lines
    (nothing is created here), or that is the results file itself."""
    from sgl_eagle_ext.common.errors import UserError
    from sgl_eagle_ext.common.paths import check_writable_file

    if results is not None and path.resolve() == Path(results).resolve():
        raise UserError(
            f"--save-requests {path}: the same file as --results.",
            fix="give the per-request records their own file",
        )
    check_writable_file("--save-requests", path)


class RequestLog:
    """Appends a level's per-request lines to FILE (None: writes nothing)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None  # checked by workload.plan
        self.written = 0
        self.rescued: Path | None = None

    def write_level(
        self,
        results: list[cl.RequestResult],
        level_start: float,
        duration: float,
        common: dict,
        per_request: list[dict] | None = None,
    ) -> None:
        """`common`: run_id, arm, concurrency...; `per_request`: extra fields by position."""
        if self.path is None or not results:
            return
        lines = []
        for k, r in enumerate(results):
            extra = {**common, "level_duration_s": round(duration, 6)}
            if per_request:
                extra.update(per_request[k])
            rec = redact_values(record(r, level_start, **extra), known())
            lines.append(records.encode_line(rec))
        data = b"".join(lines)
        try:
            records.append_bytes(self.path, data)
        except OSError as e:  # full disk, file-size limit: the run goes on, its lines kept
            # every level's lines to the first rescue file (the run id may be missing)
            run_id = common.get("run_id") or records.new_run_id()
            name = self.rescued.name if self.rescued else f"bench-rescued-{run_id}-requests.jsonl"
            lost = "lost (the rescue file could not be written either)"
            rescued, where = records.rescue(data, name, lost)
            self.rescued = self.rescued or rescued
            what = f"this level's {len(lines)} per-request line(s) are {where}"
            records.warn_unwritten(self.path, e, what)
        self.written += len(lines)


def read(path: Path) -> tuple[list[dict], list[str]]:
    """The request lines of FILE and one warning per line that is not one."""
    from sgl_eagle_ext.common.errors import UserError

    def problem(obj) -> str | None:
        if not isinstance(obj, dict) or obj.get("kind") != KIND:
            return "not a per-request record"
        return records.problem(obj, records.Request)

    rows, problems = records.read_lines(
        path, "give the file --save-requests wrote", "not JSON", problem
    )
    skipped = f" ({len(problems)} line(s) skipped; first: {problems[0]})" if problems else ""
    problems = records.summarized(problems, path)
    if not rows:
        raise UserError(
            f"{path}: no per-request records{skipped}.",
            fix="write them with `bench sweep ... --save-requests FILE`",
        )
    return rows, problems
