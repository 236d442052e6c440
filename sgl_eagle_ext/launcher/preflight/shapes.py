"""Shape compatibility of target and draft, from configs and safetensors headers only."""

from __future__ import annotations

from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import registry, weights
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding
from sgl_eagle_ext.launcher.preflight.model_dirs import ModelDir


def architectures(
    target: ModelDir,
    draft: ModelDir | None,
    release: releases.Release,
    pkg: Path | None,
    eagle3: bool,
    sglang=None,
) -> list[Finding]:
    """sglang: ask_sglang.Answer; where SGLang's model loader picked the target's class,
    that answer replaces the registry read from source."""
    found: list[Finding] = []
    if target.config is not None and target.text_prefix:
        found.append(
            target.finding(
                "arch.text-config",
                INFO,
                f"{target.architecture} is multimodal: layers, hidden "
                f"size, vocabulary and context come from {target.text_prefix.rstrip('.')}.",
                key=target.text_prefix.rstrip("."),
                text=False,
            )
        )
    picked = (sglang.target_class or {}) if sglang is not None else {}
    if pkg is not None:
        # where SGLang's own loader picked the target's class, the registry read is moot
        known = None if picked.get("arch") else registry.architectures(pkg)
        drafts = registry.draft_architectures(pkg)
        origin = f"SGLang {release.version}'s model registry ({pkg}/srt/models)"
    else:
        known, drafts = None, frozenset(release.eagle3_drafts)
        origin = f"the release table (SGLang {release.version}'s source is not at hand)"
        found.append(
            Finding(
                "arch.no-source",
                INFO,
                f"target architecture not checked: SGLang {release.version} is not "
                f"installed here and its wheel is not cached.",
                f"python -m sgl_eagle_ext.wheels {release.version} caches it",
            )
        )
    t_arch = target.architecture
    # where SGLang's own loader answered, `known` is None (the registry was not read)
    arch = picked.get("arch")
    if arch and arch != t_arch and str(arch).startswith("Transformers"):
        found.append(
            target.finding(
                "arch.target-unknown",
                ERROR if eagle3 else WARNING,
                f"SGLang {sglang.version} has no model class {t_arch}: its loader falls "
                f"back to {arch} ({sglang.label}), which cannot capture EAGLE-3 "
                f"aux states.",
                "use a release that supports this model",
                "architectures",
                text=False,
            )
        )
    if known is not None and t_arch and t_arch not in known:
        found.append(
            target.finding(
                "arch.target-unknown",
                ERROR if eagle3 else WARNING,
                f"SGLang {release.version} has no model class {t_arch} ({origin}): it would fall "
                f"back to the Transformers backend, which cannot capture EAGLE-3 aux states.",
                "use a release that supports this model",
                "architectures",
                text=False,
            )
        )
    if (
        eagle3
        and known is not None
        and t_arch in known
        and t_arch not in registry.capturing(pkg)
        and t_arch not in release.eagle3_drafts
    ):
        found.append(
            target.finding(
                "aux.no-capture",
                ERROR,
                f"SGLang {release.version}'s {t_arch} has no {registry.METHOD} ({origin}; "
                f"predicted): EAGLE-3 startup refuses this target (it cannot hand the draft "
                f"its aux hidden states).",
                "use a target family whose SGLang class captures EAGLE-3 aux states, or a "
                "speculative algorithm without aux states",
                "architectures",
                text=False,
            )
        )
    d_arch = draft.architecture if draft is not None else None
    if eagle3 and d_arch and d_arch not in drafts:
        newer = [r.version for r in releases.RELEASES if d_arch in r.eagle3_drafts]
        hint = (
            f"it needs SGLang >= {newer[0]}"
            if newer
            else f"EAGLE-3 draft classes here: {', '.join(sorted(drafts))}"
        )
        found.append(
            draft.finding(
                "arch.draft-unknown",
                ERROR,
                f"{d_arch} is not an EAGLE-3 draft class of SGLang {release.version} ({origin}).",
                hint,
                "architectures",
                text=False,
            )
        )
    return found


def fc_aux_count(draft: ModelDir, tensors: dict) -> int | None:
    """How many aux states the checkpoint's fc takes (in_features / target hidden)."""
    fc = weights.find(tensors, "fc.weight")
    hidden_in = draft.config.get("target_hidden_size") or draft.config.get("hidden_size")
    if not fc or len(fc[1]) != 2 or not isinstance(hidden_in, int) or hidden_in <= 0:
        return None
    return fc[1][1] // hidden_in if fc[1][1] % hidden_in == 0 else None


def _size(md: ModelDir, key: str, loaded: dict, name: str):
    """A size field, as SGLang's ModelConfig loaded it where SGLang answered (class
    defaults included: Gemma-3's text_config relies on its vocab_size default), else
    as the file says. A vocab_size absent from the file is a class default the rules
    do not know (Gemma-3's text_config): that comparison is left out with a note, never
    a refusal SGLang would not make; every other size is required."""
    if md.text.get(key) is None:
        if isinstance(loaded.get(name), int):
            return loaded[name], None
        if key != "vocab_size":
            return md.number(key, required=True)
        return None, md.finding(
            "shape.unchecked",
            INFO,
            f"the {md.role} config has no '{key}' (its class default applies): the "
            f"{key} comparison is not made without SGLang to load it (predicted).",
            None,
            key,
        )
    return md.number(key, required=True)


def check(target: ModelDir, draft: ModelDir, sglang=None) -> tuple[list[Finding], int | None]:
    """Findings, and the checkpoint's fc aux-state count (None when unknown)."""
    found: list[Finding] = []
    t_seen = sglang.target if sglang is not None else {}
    d_seen = sglang.draft if sglang is not None else {}
    t_hidden, bad1 = _size(target, "hidden_size", t_seen, "hidden")
    t_vocab, bad2 = _size(target, "vocab_size", t_seen, "vocab")
    d_hidden, bad3 = _size(draft, "hidden_size", d_seen, "hidden")
    d_vocab, bad4 = _size(draft, "vocab_size", d_seen, "vocab")
    d_target_hidden, bad5 = draft.number("target_hidden_size")
    draft_vocab, bad6 = draft.number("draft_vocab_size")
    found += [b for b in (bad1, bad2, bad3, bad4, bad5, bad6) if b]

    hidden_in = d_target_hidden or d_hidden
    key_in = "target_hidden_size" if d_target_hidden else "hidden_size"
    if t_hidden and hidden_in and hidden_in != t_hidden:
        found.append(
            draft.finding(
                "shape.hidden",
                ERROR,
                f"{key_in} {hidden_in} differs from the target's hidden size "
                f"{t_hidden} ({target.config_file}: {target.text_prefix}hidden_size): the draft's fc "
                f"cannot take the target's hidden states.",
                "use a draft trained for this target"
                + (
                    ""
                    if d_target_hidden
                    else " (or set target_hidden_size if the draft's own width differs)"
                ),
                key_in,
            )
        )
    if t_vocab and d_vocab and t_vocab != d_vocab:
        found.append(
            draft.finding(
                "shape.vocab",
                ERROR,
                f"vocab_size {d_vocab} differs from the target's {t_vocab}: "
                f"the draft was made for another tokenizer.",
                "use a draft trained for this target (--skip shape.vocab if you know the token ids "
                "agree)",
                "vocab_size",
            )
        )

    tensors, why = weights.shapes(draft.path)
    if why:
        found.append(
            Finding(
                "weights.unread", INFO, f"draft weights not checked: {why}.", file=str(draft.path)
            )
        )
        return found, None
    d2t = weights.find(tensors, "d2t")
    head_rows = draft_vocab or d_vocab
    if draft_vocab and d_vocab and draft_vocab != d_vocab:
        if d2t is None:
            found.append(
                draft.finding(
                    "shape.d2t",
                    ERROR,
                    f"draft_vocab_size {draft_vocab} differs from vocab_size "
                    f"{d_vocab} but the weights have no d2t mapping: draft token ids would be read "
                    f"as target ids (near-zero acceptance).",
                    "use the draft's complete checkpoint (with d2t), or a full-vocabulary draft",
                    "draft_vocab_size",
                )
            )
        elif d2t[1] != [draft_vocab]:
            found.append(
                draft.finding(
                    "shape.d2t",
                    ERROR,
                    f"d2t has shape {d2t[1]}, not [{draft_vocab}] (draft_vocab_size).",
                    "make draft_vocab_size match the checkpoint",
                    "draft_vocab_size",
                )
            )
    head = weights.find(tensors, "lm_head.weight")
    if (
        head
        and head_rows
        and not draft.config.get("tie_word_embeddings")
        and head[1][:1] != [head_rows]
    ):
        found.append(
            draft.finding(
                "shape.lm-head",
                ERROR,
                f"the checkpoint's {head[0]} has {head[1][0]} rows but the "
                f"config asks for {head_rows} ({'draft_vocab_size' if draft_vocab else 'vocab_size'}): "
                f"loading the draft fails.",
                "set draft_vocab_size to the checkpoint's head size",
                "draft_vocab_size" if draft_vocab else "vocab_size",
            )
        )
    fc = weights.find(tensors, "fc.weight")
    if fc and hidden_in and len(fc[1]) == 2 and fc[1][1] % int(hidden_in):
        found.append(
            draft.finding(
                "shape.fc",
                ERROR,
                f"{fc[0]} takes {fc[1][1]} inputs, not a multiple of {key_in} {hidden_in}.",
                "use a draft trained for this target",
                key_in,
            )
        )
    elif fc is None:
        found.append(
            Finding(
                "shape.fc",
                WARNING,
                "the draft weights have no fc.weight: not an EAGLE-3 checkpoint?",
                "check the draft directory",
                file=str(draft.path),
            )
        )
    return found, fc_aux_count(draft, tensors)
