"""The schedule files of `tune --live`: the tuner's request and rank 0's grants.

Two files, both JSON, both replaced atomically (os.replace: a reader never sees half):

- the REQUEST (EAGLE_EXT_SCHEDULE_FILE), written by the tuner (tools/tune/live.py):

      {"seq": 7, "pin": 3}                  every bucket holds 3 steps
      {"seq": 8, "table": "/x/tuned.json", "initial_steps": 2}
                                            SGLang's own controller on that table
      {"seq": 9}                            the launch table, SGLang's controller

- the GRANTS (`grant_path(request, group)`), written by TP rank 0 only:

      {"grants": [{"seq": 8, "apply_at": 412, "control": {"seq": 8, "pin": 3}}, ...]}

  Each grant names the verify (the n-th call of the router's per-verify entry,
  counted alike on every rank: TP ranks run the same batches) at which its control
  takes effect on every rank. Only rank 0 reads the request; the other ranks read
  only the grants, so a request written between two ranks' reads cannot give them
  different controls (in_sglang/schedule_control.py says why `apply_at` is always
  still ahead of every rank when the grant becomes visible).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

# Verifies between rank 0 reading a request under load and the verify at which it
# applies. TP ranks run in lockstep to within SKEW verifies (SGLang's scheduler
# broadcasts its input from rank 0 over the CPU group once per loop iteration and
# processes at most one batch result per iteration; a batch's result needs every
# rank's share of its forward), and a rank reads the grants at each of its verifies,
# so a grant written at rank 0's verify k is read by every rank by verify k+SKEW+1.
SKEW = 2
MARGIN = SKEW + 2  # one verify to spare
HISTORY = 8  # grants kept in the file: a rank that skipped a rewrite still sees each


@dataclass(frozen=True)
class Control:
    seq: int
    pin: int | None = None
    table: str | None = None
    initial_steps: int | None = None

    def fields(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Grant:
    apply_at: int  # the verify number (1 = the first) at which `control` takes effect
    control: Control


def _whole(value, name: str, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f'"{name}" must be a whole number, got {value!r}')
    if minimum is not None and value < minimum:
        raise ValueError(f'"{name}" must be a whole number >= {minimum}, got {value!r}')
    return value


def parse(data) -> Control:
    """A request's content; ValueError names what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
        raise ValueError('not a JSON object with an integer "seq"')
    pin = _whole(data.get("pin"), "pin", 0)
    table = data.get("table")
    if table is not None and not isinstance(table, str):
        raise ValueError(f'"table" must be a path, got {table!r}')
    if pin is not None and table is not None:
        raise ValueError('"pin" and "table" together')
    initial = _whole(data.get("initial_steps"), "initial_steps")
    return Control(data["seq"], pin, table, initial)


def parse_grants(data) -> list[Grant]:
    """The grants file's content, oldest first; ValueError names what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("grants"), list):
        raise ValueError('not a JSON object with a "grants" list')
    out = []
    for g in data["grants"]:
        if not isinstance(g, dict):
            raise ValueError("a grant is not a JSON object")
        out.append(Grant(_whole(g.get("apply_at"), "apply_at", 1), parse(g.get("control"))))
    return out


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader sees the old or the new file, never half


def write_request(path, seq: int, **fields) -> Control:
    """The tuner's write: one request (validated as the ranks will read it)."""
    control = parse({"seq": seq, **fields})
    _replace(Path(path), json.dumps(control.fields()))
    return control


def write_grants(path, grants: list[Grant]) -> None:
    """Rank 0's write: the newest HISTORY grants."""
    body = [{"apply_at": g.apply_at, "control": g.control.fields()} for g in grants[-HISTORY:]]
    _replace(Path(path), json.dumps({"grants": body}))


def grant_path(request, group: str) -> Path:
    """Where rank 0 of one TP group (`group`: the server process and DP replica, so a
    stale file of an earlier server or another replica's grants are never read)
    writes its grants."""
    request = Path(request)
    return request.with_name(f"{request.name}.grants-{group}")


class Cached:
    """The latest good content of a JSON file, re-read only when it changed on disk
    (a stat per call: a few microseconds on the host)."""

    def __init__(self, path, parser, on_error=None):
        self.path = str(path)
        self._parse = parser
        self._on_error = on_error
        self._key: tuple | None = None
        self.value = None

    def current(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return self.value  # not written yet, or being replaced: keep the last
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._key:
            return self.value
        self._key = key
        try:
            with open(self.path, encoding="utf-8") as f:
                self.value = self._parse(json.load(f))
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            if self._on_error is not None:
                self._on_error(f"{self.path}: {e}; keeping the last")
        return self.value
