"""Context length: the draft must allow the target's context (a hard ValueError in every
TP worker otherwise), and rope differences between the two (an acceptance risk).

SGLang gives the draft the target's effective context length (--context-length, else
the target's derived one) and refuses to start when it exceeds the draft's derived
length, unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set (then it raises the
draft's max_position_embeddings at runtime, as --fix does in an overlay).
"""

from __future__ import annotations

import re
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import context_rule, overlay
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding
from sgl_eagle_ext.launcher.preflight.model_dirs import ModelDir, is_number

ALLOW_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def parse_length(text: str) -> int | None:
    """An int, or SGLang's human-readable form (0.5.16+): 128k, 1M, 128Ki."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G)?\s*", text or "")
    if not m or ("." in m.group(1) and not m.group(2)):
        return None
    return int(float(m.group(1)) * _SUFFIX.get(m.group(2) or "", 1))


def env_true(env, name: str) -> bool:
    return str(env.get(name, "")).lower() in ("true", "1", "yes", "y")


def _validate(md: ModelDir) -> Finding | None:
    """The fields the rule reads must be numbers, or SGLang itself would crash."""
    for key in context_rule.KEYS:
        _, bad = md.number(key)
        if bad:
            return bad
    rope = context_rule.rope_view(md.text)
    if (
        rope
        and not context_rule.per_layer(rope)
        and "factor" in rope
        and not is_number(rope["factor"])
    ):
        where = (
            "rope_parameters"
            if isinstance(md.text.get("rope_parameters"), dict)
            else "rope_scaling"
        )
        return md.finding(
            "config.bad-field",
            ERROR,
            f"rope factor is {rope['factor']!r}, not a finite number.",
            "set the factor to a number",
            f"{where}.factor",
        )
    return None


def check(
    target: ModelDir,
    draft: ModelDir | None,
    pkg: Path | None,
    user_len: str | None,
    env,
    fix: bool,
    overlay_root: Path | None,
    release: releases.Release = releases.PRIMARY,
    sglang=None,
) -> tuple[list[Finding], Path | None]:
    """sglang: ask_sglang.Answer (the release's own verdicts), else the rules decide."""
    found: list[Finding] = []
    dirs = [md for md in (target, draft) if md is not None and md.config is not None]
    bad = [b for b in map(_validate, dirs) if b]
    if bad or target.config is None:
        return bad, None
    asked = (sglang.context if sglang is not None else None) or {}
    own = asked.get("target_own", {})
    if "len" not in own:
        asked = {}  # SGLang could not load the target: the rules decide, said so
    split = release.rope_per_layer_types
    t_how = context_rule.loaded_as(target.config, target.text, split)
    t_why = context_rule.derive(context_rule.sglang_text(target.config, target.text), t_how)
    if asked:
        t_len = own["len"]
        verdict = sglang.label
        how = f"{verdict}: its ModelConfig derived the lengths ({sglang.seconds:.1f} s)"
        t_explain = (
            t_why.explain()
            if t_why.value == t_len
            else f"SGLang {sglang.version}'s ModelConfig derives {t_len}"
        )
    else:
        t_len, verdict = t_why.value, "predicted from the release table"
        how = f"{verdict} (sgl-eagle-ext's rule for SGLang {release.version})"
        t_explain = t_why.explain()
    found.append(
        target.finding(
            "context.rule",
            INFO,
            f"context-length rule: {how}.",
            target_limit=t_len,
            verdict=verdict,
        )
    )
    allow = env_true(env, ALLOW_ENV)

    effective = t_len
    if user_len is not None:
        wanted = parse_length(user_len)
        if wanted is None:
            return found + [
                Finding(
                    "context.bad-value",
                    ERROR,
                    f"--context-length {user_len!r} is not a length.",
                    "pass an integer number of tokens, e.g. 131072",
                )
            ], None
        over = "error" in asked["target"] if asked else wanted > t_len
        if over and not allow:
            found.append(
                target.finding(
                    "context.over-target",
                    ERROR,
                    f"--context-length {wanted} exceeds the target's limit {t_len} "
                    f"({t_explain}): SGLang refuses to start ({verdict}).",
                    f"pass --context-length {t_len} or less",
                    t_why.key or "max_position_embeddings",
                )
            )
        effective = wanted

    if draft is None or draft.config is None:
        return found, None
    d_how = context_rule.loaded_as(draft.config, draft.text, split)
    d_why = context_rule.derive(context_rule.sglang_text(draft.config, draft.text), d_how)
    d_key = context_rule.field_for(draft.text)
    d_own = asked.get("draft_own", {})
    if asked and "len" in d_own and "draft" in asked:
        d_len = d_own["len"]
        refused = "error" in asked["draft"]
        d_explain = (
            d_why.explain()
            if d_why.value == d_len
            else f"SGLang {sglang.version}'s ModelConfig derives {d_len}"
        )
    else:
        d_len, d_explain = d_why.value, d_why.explain()
        refused = effective > d_len
        verdict = "predicted from the release table"
    if not refused:
        found.append(
            draft.finding(
                "context.ok",
                INFO,
                f"the draft allows {d_len} tokens ({d_explain}); the "
                f"target runs at {effective} ({verdict}).",
                key=d_key,
                draft_limit=d_len,
                target_context=effective,
                verdict=verdict,
            )
        )
        return found, None

    source = (
        "--context-length"
        if user_len is not None
        else f"the target's own limit, {target.config_file}: {target.text_prefix}{t_explain}"
    )
    msg = (
        f"the draft's context limit is {d_len} ({d_explain}), below the {effective} "
        f"tokens the target runs at ({source}); SGLang refuses to start (ValueError in every "
        f"TP worker; {verdict})."
    )
    fixes = (
        f"(1) pass --context-length {d_len} (or less) to serve at most {d_len} tokens; "
        f"or (2) rerun with --fix: it writes an overlay of the draft directory whose "
        f"config.json sets {d_key} to allow {effective} tokens, and launches with it "
        f"(the original directory is not modified; the draft was trained up to {d_len} "
        f"positions, so acceptance may drop on longer prompts)"
    )
    data = {"draft_limit": d_len, "target_context": effective, "verdict": verdict}
    if allow:
        allowed = msg.replace(
            "SGLang refuses to start (ValueError in every TP worker)",
            f"{ALLOW_ENV} is set, so SGLang raises the draft's "
            f"max_position_embeddings to {effective} at runtime",
        )
        found.append(draft.finding("context.draft-shorter", WARNING, allowed, None, d_key, **data))
        return found, None
    if not fix:
        found.append(draft.finding("context.draft-shorter", ERROR, msg, fixes, d_key, **data))
        return found, None

    corrected = dict(draft.config)
    new_text = context_rule.raised(draft.text, effective, d_how)
    if draft.text_prefix:  # a nested text config: replace that sub-dict
        parent = corrected
        parts = draft.text_prefix.rstrip(".").split(".")
        for p in parts[:-1]:
            parent[p] = dict(parent[p])
            parent = parent[p]
        parent[parts[-1]] = new_text
    else:
        corrected = new_text
    try:
        path = overlay.write(
            draft.path,
            corrected,
            {draft.text_prefix + d_key: [draft.text.get(d_key), new_text[d_key]]},
            overlay_root,
        )
    except OSError as e:
        found.append(
            draft.finding(
                "context.draft-shorter",
                ERROR,
                msg + f" --fix could not write the overlay: {e}.",
                fixes,
                d_key,
                **data,
            )
        )
        return found, None
    check_len = context_rule.derive(new_text, d_how).value
    if check_len < effective:  # only if SGLang's own rule disagrees with ours
        found.append(
            draft.finding(
                "context.draft-shorter",
                ERROR,
                msg + f" --fix wrote {path} but it still derives {check_len}.",
                fixes,
                d_key,
                **data,
            )
        )
        return found, None
    found.append(
        draft.finding(
            "context.draft-shorter",
            INFO,
            f"fixed by --fix: overlay {path} sets {draft.text_prefix}{d_key} "
            f"{draft.text.get(d_key)} -> {new_text[d_key]} (draft limit {d_len} -> {check_len}); "
            f"the original directory is unchanged. The draft was trained up to {d_len} positions: "
            f"acceptance may drop beyond them.",
            None,
            d_key,
            overlay=str(path),
            **data,
        )
    )
    return found, path


def _rope(md: ModelDir) -> tuple[float | None, tuple]:
    rope = context_rule.rope_view(md.text) or {}
    theta = md.text.get("rope_theta", rope.get("rope_theta"))
    kind = rope.get("rope_type", "default")
    scaling = (
        ()
        if kind == "default"
        else (kind, rope.get("factor"), rope.get("original_max_position_embeddings"))
    )
    return theta, scaling


def check_rope(target: ModelDir, draft: ModelDir | None) -> list[Finding]:
    """Different rope settings do not crash anything but make drafts guess worse, unless
    the draft was trained that way on purpose."""
    if draft is None or target.config is None or draft.config is None:
        return []
    (t_theta, t_scale), (d_theta, d_scale) = _rope(target), _rope(draft)
    found = []
    if t_theta is not None and d_theta is not None and t_theta != d_theta:
        found.append(
            draft.finding(
                "rope.theta-differs",
                WARNING,
                f"rope_theta {d_theta} differs from the target's {t_theta} "
                f"({target.config_file}): an acceptance risk, not a crash risk.",
                "fine if the draft was trained with this theta; otherwise use a draft trained for "
                "this target (--skip rope.theta-differs to silence)",
                "rope_theta",
            )
        )
    if t_scale != d_scale:
        show = lambda s: "none" if not s else f"{s[0]} factor {s[1]} (original {s[2]})"  # noqa: E731
        found.append(
            draft.finding(
                "rope.scaling-differs",
                WARNING,
                f"rope scaling {show(d_scale)} differs from the target's {show(t_scale)}: "
                f"positions far into long prompts are encoded differently (acceptance risk).",
                "fine if the draft was trained this way (--skip rope.scaling-differs)",
                "rope_scaling",
            )
        )
    return found
