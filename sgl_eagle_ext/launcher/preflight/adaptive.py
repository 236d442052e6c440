"""Adaptive speculation (`--speculative-adaptive`): the config file and the settings
under which SGLang would quietly serve static speculation instead.

SGLang's rules (speculative/adaptive_spec_params.py, every release that has it):
the config is a JSON object; keys made of digits are batch-size buckets (others
are ignored, or read as knobs shared by every bucket); each bucket needs a
non-empty `candidate_steps` list of integers >= the release's smallest step (0
from 0.5.16, 1 on 0.5.13.post1); at least one bucket; `--speculative-num-steps`
must be one of the candidates. A bad file stops SGLang only after it parsed
its arguments (a ValueError traceback); a setting in the release table's
`turned_off_by` makes SGLang log one warning and drop adaptive altogether.

    from sgl_eagle_ext.launcher.preflight import adaptive
    cfg, findings = adaptive.load(path, release)      # the file, by SGLang's rules
    findings = adaptive.check(server_args, release)    # file + turned-off settings
"""

from __future__ import annotations

import json
from pathlib import Path

from sgl_eagle_ext.common import safe_files
from sgl_eagle_ext.common.cli_args import last_value
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.releases import Release
from sgl_eagle_ext.launcher.preflight.findings import ERROR, WARNING, Finding

FLAG = "--speculative-adaptive"
CONFIG_FLAG = "--speculative-adaptive-config"
# Knobs SGLang reads per bucket (or from the top level) with their valid ranges.
KNOBS = {
    "ema_alpha": (float, 0.0, 1.0),  # EMA weight of the newest batch, (0, 1]
    "update_interval": (int, 1, None),  # batches between decisions (0: division by zero)
    "warmup_batches": (int, 0, None),
    "up_hysteresis": (float, None, None),
    "down_hysteresis": (float, None, None),
    "ceiling_coeff": (float, 0.0, None),
}


def enabled(server_args: list[str]) -> bool:
    return FLAG in server_args


def _bad(path, field, message, fix, fid="adaptive.config") -> Finding:
    return Finding(fid, ERROR, message, fix, file=str(path), field=field)


def _step_ok(s, min_step: int) -> bool:
    return isinstance(s, int) and s >= min_step  # bool is an int to SGLang too


def load(path: str | Path, release: Release) -> tuple[dict[int, list[int]] | None, list[Finding]]:
    """Bucket -> candidate steps, by the loader rules of `release`; None when SGLang
    would refuse the file (the findings say why, naming field and fix)."""
    min_step = release.adaptive.min_step if release.adaptive else 0
    try:
        text = safe_files.read_text("", path)
    except UserError as e:
        return None, [_bad(path, None, e.message.split(": ", 1)[-1], e.fix)]
    except OSError as e:
        return None, [
            _bad(
                path,
                None,
                f"cannot be read: {e.strerror}.",
                f"pass an existing file to {CONFIG_FLAG}",
            )
        ]
    try:
        cfg = json.loads(text)
    except RecursionError:
        return None, [_bad(path, None, "nested too deeply.", "write the flat table tune writes")]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, [_bad(path, None, f"invalid JSON: {e}.", "correct the JSON at that position")]
    if not isinstance(cfg, dict):
        return None, [
            _bad(
                path,
                None,
                f"the top level is a JSON {type(cfg).__name__}, not an object.",
                'write {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}',
            )
        ]
    found: list[Finding] = []
    buckets: dict[int, list[int]] = {}
    lowest = "0" if min_step == 0 else "1"
    example = "[0, 1, 3]" if min_step == 0 else "[1, 3] (0 steps need SGLang 0.5.16 or newer)"
    for key, entry in cfg.items():
        if not key.isdigit():
            if key.lstrip("+-").replace(".", "", 1).isdigit():
                found.append(
                    Finding(
                        "adaptive.config-key",
                        WARNING,
                        f"key '{key}' looks like a batch size but SGLang ignores it (bucket "
                        "keys are non-negative integers written as strings).",
                        f'write it as "{abs(int(float(key)))}" or remove it',
                        file=str(path),
                        field=key,
                    )
                )
            elif key in KNOBS:
                found += _knob(path, key, entry)
            continue
        if not isinstance(entry, dict):
            found.append(
                _bad(
                    path,
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
                    path,
                    f"{key}.candidate_steps",
                    f"must be a non-empty list of integers >= {min_step} for SGLang "
                    f"{release.version}, got {json.dumps(steps)}.",
                    f"list whole step counts, e.g. {example}",
                )
            )
            continue
        if int(key) in buckets:
            found.append(
                Finding(
                    "adaptive.config-key",
                    WARNING,
                    f"bucket '{key}' is batch size {int(key)} again; SGLang keeps the last one.",
                    "keep one key per batch size",
                    file=str(path),
                    field=key,
                )
            )
        buckets[int(key)] = sorted(set(steps))
        for knob in KNOBS.keys() & entry.keys():
            found += _knob(path, f"{key}.{knob}", entry[knob])
    if not buckets and not any(f.severity == ERROR for f in found):
        found.append(
            _bad(
                path,
                None,
                f"no batch-size bucket (keys: {', '.join(map(repr, cfg)) or 'none'}).",
                'add at least one integer-string key, e.g. "1": {"candidate_steps": [1, 3]}',
            )
        )
    if any(f.severity == ERROR for f in found):
        return None, found
    if min(buckets) > 1:
        found.append(
            Finding(
                "adaptive.config-key",
                WARNING,
                f"no bucket for batch size 1: batches below {min(buckets)} use bucket "
                f"'{min(buckets)}'.",
                'add "1" if one stream should be tuned apart',
                file=str(path),
            )
        )
    return buckets, found


def _knob(path, field: str, value) -> list[Finding]:
    """A knob SGLang cannot compute with (not a number, an update interval of 0) fails
    while serving: an error. A number outside its sensible range: a warning."""
    name = field.rsplit(".", 1)[-1]
    kind, low, high = KNOBS[name]
    rng = {
        "ema_alpha": "a number in (0, 1]",
        "update_interval": "an integer >= 1",
        "warmup_batches": "an integer >= 0",
        "ceiling_coeff": "a number >= 0",
    }.get(name, "a number")
    fix = f"set it to {rng} (or remove it: SGLang's default applies)"
    if not isinstance(value, (int, float)) or (name == "update_interval" and value == 0):
        return [
            _bad(path, field, f"{json.dumps(value)} is not {rng}: SGLang fails while serving.", fix)
        ]
    ok = not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if ok and low is not None:
        ok = value > low if name == "ema_alpha" else value >= low
    if ok and high is not None:
        ok = value <= high
    if ok:
        return []
    return [
        Finding(
            "adaptive.config-knob",
            WARNING,
            f"{json.dumps(value)} is not {rng}: SGLang runs with it, but the step choice "
            "will not behave as intended.",
            fix,
            file=str(path),
            field=field,
        )
    ]


def _flag_value(server_args: list[str], flag: str) -> str | None:
    if flag in server_args and last_value(server_args, flag) is None:
        return ""
    value = last_value(server_args, flag)
    if value is not None and value.startswith("--"):
        return ""  # a bare boolean flag followed by the next flag
    return value


def turned_off(server_args: list[str], release: Release) -> list[Finding]:
    """Every setting under which `release` would turn adaptive off (one warning line
    in SGLang's log, static speculation served)."""
    found = []
    algo = (last_value(server_args, "--speculative-algorithm") or "").upper()
    if algo and algo not in ("EAGLE", "EAGLE3"):
        found.append((f"--speculative-algorithm {algo}", "only EAGLE and EAGLE3 adapt"))
    for what, flag, trigger in release.adaptive.turned_off_by:
        value = _flag_value(server_args, f"--{release.flag(flag)}")
        if value is None:
            continue
        if trigger is None:
            if value == "" or value.lower() in ("true", "1"):
                found.append((f"--{flag}", what))
            continue
        try:
            number = int(value)
        except ValueError:
            continue
        if (trigger == "!=1" and number != 1) or (trigger == ">1" and number > 1):
            found.append((f"--{flag} {value}", what))
    return [
        Finding(
            "adaptive.off",
            ERROR,
            f"{setting}: SGLang {release.version} turns {FLAG} off ({why}) and serves "
            "static speculation, with one warning line in its log.",
            (
                "pass --speculative-eagle-topk 1"
                if setting.startswith("--speculative-eagle-topk")
                else f"drop {setting.split()[0]}"
            )
            + f", or drop {FLAG} (a fixed preset) knowingly (--skip adaptive.off)",
            field=setting.split()[0],
        )
        for setting, why in found
    ]


def check(server_args: list[str], release: Release) -> list[Finding]:
    """All adaptive findings for a launch; [] when it does not ask for adaptive."""
    server_args = list(server_args)
    if not enabled(server_args):
        return []
    if release.adaptive is None:
        return [
            Finding(
                "adaptive.unsupported",
                ERROR,
                f"SGLang {release.version} has no {FLAG}.",
                "use a fixed preset (eagle3-3step), or SGLang 0.5.13.post1 or newer",
            )
        ]
    found = turned_off(server_args, release)
    path = last_value(server_args, CONFIG_FLAG)
    if path is None:
        found.append(
            Finding(
                "adaptive.default-table",
                WARNING,
                f"no {CONFIG_FLAG}: SGLang's generic default table applies, not one "
                "tuned on this host.",
                "pass the preset's file or one written by python -m sgl_eagle_ext.tune",
            )
        )
        return found
    buckets, problems = load(path, release)
    found += problems
    steps = last_value(server_args, "--speculative-num-steps")
    if buckets is not None and steps is not None:
        union = sorted({s for c in buckets.values() for s in c})
        if not steps.isdigit() or int(steps) not in union:
            found.append(
                _bad(
                    path,
                    "candidate_steps",
                    f"--speculative-num-steps {steps} is not a candidate step of any "
                    f"bucket ({union}); SGLang refuses to start.",
                    f"pass --speculative-num-steps {union[len(union) // 2]} (or add "
                    f"{steps} to a bucket)",
                    fid="adaptive.initial-steps",
                )
            )
    return found
