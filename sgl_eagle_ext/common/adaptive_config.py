"""The adaptive config, writer and reader in one place: the JSON file SGLang's
`--speculative-adaptive-config` reads (speculative/adaptive_spec_params.py).

Written by `tune` (tools/tune/), checked before launch by the preflight
(launcher/preflight/adaptive.py), both through this module:

    text = adaptive_config.text({"1": [1, 3], "8": [0, 1]}, about="tuned on ...")
    adaptive_config.write(path, table, about)                   # the same, to a file
    buckets, problems = adaptive_config.load(path, release)    # by SGLang's rules
    buckets, problems = adaptive_config.validate(obj, release)  # an object already parsed

`buckets` is {batch size: sorted candidate steps}, None when SGLang would refuse
the file; `problems` say why (field and fix), errors and warnings.

SGLang's rules (every release that has adaptive): the config is a JSON object;
keys made of digits are batch-size buckets (others are ignored, or read as knobs
shared by every bucket); each bucket needs a non-empty `candidate_steps` list of
integers >= the release's smallest step (0 from 0.5.16, 1 on 0.5.13.post1); at
least one bucket. A bad file stops SGLang only after it parsed its arguments (a
ValueError traceback), hence the check before launch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.releases import Release

FLAG = "--speculative-adaptive-config"  # SGLang's flag that reads the file
ERROR, WARNING = "error", "warning"  # the preflight's severities (launcher/preflight/findings.py)
# Knobs SGLang reads per bucket (or from the top level) with their valid ranges.
KNOBS = {
    "ema_alpha": (float, 0.0, 1.0),  # EMA weight of the newest batch, (0, 1]
    "update_interval": (int, 1, None),  # batches between decisions (0: division by zero)
    "warmup_batches": (int, 0, None),
    "up_hysteresis": (float, None, None),
    "down_hysteresis": (float, None, None),
    "ceiling_coeff": (float, 0.0, None),
}
_RANGES = {
    "ema_alpha": "a number in (0, 1]",
    "update_interval": "an integer >= 1",
    "warmup_batches": "an integer >= 0",
    "ceiling_coeff": "a number >= 0",
}


@dataclass
class Problem:
    """What is wrong with a config (the preflight turns it into a Finding)."""

    id: str  # "adaptive.config", "adaptive.config-key", "adaptive.config-knob"
    severity: str  # ERROR: SGLang refuses or fails on it; WARNING: it runs, not as meant
    message: str
    fix: str
    field: str | None = None


# -- writing -----------------------------------------------------------------------
def text(table: dict[str | int, list[int]], about: str) -> str:
    """The JSON file: provenance first (`_about`: SGLang ignores non-digit keys), one
    bucket per line."""
    lines = [f'  "_about": {json.dumps(about)}']
    lines += [f'  "{k}": {{"candidate_steps": {json.dumps(list(v))}}}' for k, v in table.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write(path: str | Path, table: dict[str | int, list[int]], about: str) -> Path:
    from sgl_eagle_ext.common import paths

    return paths.write_text("--out", path, text(table, about))  # checked, atomic


# -- reading -----------------------------------------------------------------------
def _bad(field, message, fix, pid="adaptive.config") -> Problem:
    return Problem(pid, ERROR, message, fix, field)


def load(path: str | Path, release: Release) -> tuple[dict[int, list[int]] | None, list[Problem]]:
    """The file, by the loader rules of `release`: (buckets or None, problems)."""
    try:  # a FIFO or a device is refused at once, an oversized file too
        text = safe_files.read_text("", path, missing_raises=True)
    except UserError as e:
        return None, [_bad(None, e.message.split(": ", 1)[-1], e.fix)]
    except OSError as e:
        return None, [
            _bad(None, f"cannot be read: {e.strerror}.", f"pass an existing file to {FLAG}")
        ]
    try:
        obj = nesting.json_loads(text)
    except (nesting.TooDeep, RecursionError):
        return None, [_bad(None, "nested too deeply.", "write the flat table tune writes")]
    except json.JSONDecodeError as e:
        return None, [_bad(None, f"invalid JSON: {e}.", "correct the JSON at that position")]
    return validate(obj, release)


def _step_ok(s, min_step: int) -> bool:
    return isinstance(s, int) and s >= min_step  # bool is an int to SGLang too


def validate(cfg, release: Release) -> tuple[dict[int, list[int]] | None, list[Problem]]:
    """A parsed config by the rules of `release`: (buckets or None, problems)."""
    min_step = release.adaptive.min_step if release.adaptive else 0
    if not isinstance(cfg, dict):
        return None, [
            _bad(
                None,
                f"the top level is a JSON {type(cfg).__name__}, not an object.",
                'write {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}',
            )
        ]
    found: list[Problem] = []
    buckets: dict[int, list[int]] = {}
    lowest = "0" if min_step == 0 else "1"
    example = "[0, 1, 3]" if min_step == 0 else "[1, 3] (0 steps need SGLang 0.5.16 or newer)"
    for key, entry in cfg.items():
        if not key.isdigit():
            if key.lstrip("+-").replace(".", "", 1).isdigit():
                found.append(
                    Problem(
                        "adaptive.config-key",
                        WARNING,
                        f"key '{key}' looks like a batch size but SGLang ignores it (bucket "
                        "keys are non-negative integers written as strings).",
                        f'write it as "{abs(int(float(key)))}" or remove it',
                        key,
                    )
                )
            elif key in KNOBS:
                found += _knob(key, entry)
            continue
        if not isinstance(entry, dict):
            found.append(
                _bad(
                    key,
                    f"bucket '{key}' is a JSON {type(entry).__name__}, not an object.",
                    f'write "{key}": {{"candidate_steps": [{lowest}, 3]}}',
                )
            )
            continue
        steps = entry.get("candidate_steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(_step_ok(s, min_step) for s in steps)
        ):
            found.append(
                _bad(
                    f"{key}.candidate_steps",
                    f"must be a non-empty list of integers >= {min_step} for SGLang "
                    f"{release.version}, got {json.dumps(steps)}.",
                    f"list whole step counts, e.g. {example}",
                )
            )
            continue
        if int(key) in buckets:
            found.append(
                Problem(
                    "adaptive.config-key",
                    WARNING,
                    f"bucket '{key}' is batch size {int(key)} again; SGLang keeps the last one.",
                    "keep one key per batch size",
                    key,
                )
            )
        buckets[int(key)] = sorted(set(steps))
        for knob in KNOBS.keys() & entry.keys():
            found += _knob(f"{key}.{knob}", entry[knob])
    if not buckets and not any(f.severity == ERROR for f in found):
        found.append(
            _bad(
                None,
                f"no batch-size bucket (keys: {', '.join(map(repr, cfg)) or 'none'}).",
                'add at least one integer-string key, e.g. "1": {"candidate_steps": [1, 3]}',
            )
        )
    if any(f.severity == ERROR for f in found):
        return None, found
    if min(buckets) > 1:
        found.append(
            Problem(
                "adaptive.config-key",
                WARNING,
                f"no bucket for batch size 1: batches below {min(buckets)} use bucket "
                f"'{min(buckets)}'.",
                'add "1" if one stream should be tuned apart',
            )
        )
    return buckets, found


def _knob(field: str, value) -> list[Problem]:
    """A knob SGLang cannot compute with (not a number, an update interval of 0) fails
    while serving: an error. A number outside its sensible range: a warning."""
    name = field.rsplit(".", 1)[-1]
    kind, low, high = KNOBS[name]
    rng = _RANGES.get(name, "a number")
    fix = f"set it to {rng} (or remove it: SGLang's default applies)"
    if not isinstance(value, (int, float)) or (name == "update_interval" and value == 0):
        return [_bad(field, f"{json.dumps(value)} is not {rng}: SGLang fails while serving.", fix)]
    ok = not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if ok and low is not None:
        ok = value > low if name == "ema_alpha" else value >= low
    if ok and high is not None:
        ok = value <= high
    if ok:
        return []
    return [
        Problem(
            "adaptive.config-knob",
            WARNING,
            f"{json.dumps(value)} is not {rng}: SGLang runs with it, but the step choice "
            "will not behave as intended.",
            fix,
            field,
        )
    ]
