"""EAGLE-3 aux hidden-state layers: which target layers feed the draft, per release.

The target reads the ids from the DRAFT's config.json, eagle_config.
eagle_aux_hidden_state_layer_ids (a top-level key is ignored by the target in
every release); absent ids mean the defaults [2, N//2, N-3]. In SGLang's decoder
loop, capture index i is the hidden state entering layer i (= output of layer
i-1). How explicit ids become capture indices depends on the target family and
the release (Release.aux_offset); this module computes the EFFECTIVE indices so
they can be compared with how the draft was trained.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding
from sgl_eagle_ext.launcher.preflight.model_dirs import ModelDir

DEEPSEEK = releases.DEEPSEEK_FAMILY  # deepseek_v2.py's capture rule (release table)
GPT_OSS = frozenset({"GptOssForCausalLM"})
# Targets whose capture the rules cannot mirror: MindSpore hands the ids to a model of
# another framework. Without the release to ask, the dry run says so.
UNMIRRORED = frozenset({"MindSporeForCausalLM"})
MLA_DRAFT = "Eagle3DeepseekV2ForCausalLM"
IDS_KEY = "eagle_aux_hidden_state_layer_ids"
# Patch ids (patches/manifest.toml) that change the rules computed here.
PATCH_OFFSET, PATCH_GRAPHS = "deepseek-aux-offset", "cuda-graph-aux-layers"
# The first releases that fixed what the messages below warn about (release table).
FC_FOLLOWS_IDS = releases.first_release(lambda r: r.draft_fc_follows_ids).version
DEEPSEEK_FIXED = releases.first_release(
    lambda r: r.aux_offset["deepseek"] != releases.AUX_PLUS_ONE
).version
GRAPHS_FIXED = releases.first_release(lambda r: not r.graph_resets_aux_layers).version


# What id -1 does when the release cannot capture the embedding output.
_EMBEDDING = {
    releases.AUX_PLUS_ONE: "it becomes index 0, the embedding output, whose capture adds None "
    "as the residual: a TypeError at the first forward",
    releases.AUX_FIRST_IS_1: "used as is, it matches no layer: the state is silently missing, "
    "then a shape error or 'captured 2 of 3 aux hidden states'",
    releases.AUX_UNLESS_MAX_IS_N: "it becomes index 0, the embedding output, which the "
    "capture loop does not support",
    releases.AUX_DEFAULTS_TOO: "it becomes index 0, the embedding output, which the "
    "capture loop does not support",
}


def family(arch: str | None) -> str:
    """The Release.aux_offset key for a target architecture (Llama, Qwen and the
    rest of the EAGLE-3 targets always add 1)."""
    if arch in DEEPSEEK:
        return "deepseek"
    if arch == "MiniMaxM3SparseForConditionalGeneration":
        return "minimax-m3-vl"
    return "gpt-oss" if arch in GPT_OSS else "llama"


def defaults(n_layers: int) -> list[int]:
    return [2, n_layers // 2, n_layers - 3]


def effective(ids: list[int] | None, n_layers: int, rule: str) -> list[int]:
    """Capture indices (inputs of these layers) for the ids under an offset rule."""
    if rule == releases.AUX_DEFAULTS_TOO:
        return [i + 1 for i in (defaults(n_layers) if ids is None else ids)]
    if ids is None:
        return defaults(n_layers)  # no +1 on the defaults, elsewhere
    plus_one = [i + 1 for i in ids]
    if rule == releases.AUX_FIRST_IS_1:
        return plus_one if ids and ids[0] == 1 else list(ids)
    if rule == releases.AUX_UNLESS_MAX_IS_N:
        return list(ids) if ids and max(ids) == n_layers else plus_one
    return plus_one


def rules(release: releases.Release, applied: set[str] | None) -> dict[str, str]:
    out = dict(release.aux_offset)
    if applied and PATCH_OFFSET in applied:
        out["deepseek"] = releases.AUX_FIRST_IS_1  # the patch ports the 0.5.13 rule
    return out


@dataclass
class AuxIds:
    ids: list[int] | None  # what the target uses (None: defaults)
    where: str  # how it got them, for messages
    use_aux: bool = True
    top_level: object = None  # the top-level key, if any (ignored by the target)


def read_ids(draft: ModelDir) -> tuple[AuxIds, list[Finding]]:
    cfg = draft.config or {}
    eagle = cfg.get("eagle_config")
    top = cfg.get(IDS_KEY)
    found: list[Finding] = []
    if isinstance(eagle, dict) and eagle.get(IDS_KEY) is not None:
        ids, where = eagle[IDS_KEY], f"eagle_config.{IDS_KEY}"
    else:
        ids, where = None, "absent: SGLang's defaults"
        if eagle is not None and not isinstance(eagle, dict):
            found.append(
                draft.finding(
                    "aux.eagle-config",
                    WARNING,
                    f"eagle_config is a {type(eagle).__name__}, not an "
                    f"object: the target ignores it and captures the default layers.",
                    f'make it an object: "eagle_config": {{"{IDS_KEY}": [...]}}',
                    "eagle_config",
                    text=False,
                )
            )
    use_aux = eagle.get("use_aux_hidden_state", True) if isinstance(eagle, dict) else True
    ints = isinstance(ids, list) and all(type(i) is int for i in ids)  # bool is no layer
    if ids is not None and not ints:
        found.append(
            draft.finding(
                "config.bad-field",
                ERROR,
                f"{ids!r} is not a list of layer numbers.",
                "write a list of integers, e.g. [2, 30, 58]",
                f"eagle_config.{IDS_KEY}",
                text=False,
            )
        )
        return AuxIds(None, where, use_aux, top), found
    if top is not None:
        if ids is None:
            found.append(
                draft.finding(
                    "aux.top-level-ignored",
                    WARNING,
                    f"{IDS_KEY} {top!r} is at the top level, where the target never reads it: it "
                    f"captures the default layers instead.",
                    f'move it under eagle_config: "eagle_config": {{"{IDS_KEY}": {top!r}}}',
                    IDS_KEY,
                    text=False,
                )
            )
        elif top != ids:
            found.append(
                draft.finding(
                    "aux.top-level-ignored",
                    WARNING,
                    f"top-level {IDS_KEY} {top!r} differs from eagle_config's {ids!r}; the target "
                    f"uses eagle_config's.",
                    "remove the top-level key or make them equal",
                    IDS_KEY,
                    text=False,
                )
            )
    if not use_aux:
        found.append(
            draft.finding(
                "aux.disabled",
                WARNING,
                "eagle_config.use_aux_hidden_state is false: the target "
                "passes only its last hidden state, not the aux layers an EAGLE-3 draft is trained "
                "on.",
                "set it to true unless the draft was trained without aux states",
                "eagle_config.use_aux_hidden_state",
                text=False,
            )
        )
    return AuxIds(ids, where, use_aux, top), found


def fc_inputs_built(draft: ModelDir, aux: AuxIds, release: releases.Release) -> int:
    """How many aux states the draft's fc layer is built for in this release."""
    cfg = draft.config or {}
    if draft.architecture == MLA_DRAFT:  # nested ids, else top-level ids, else 3
        ids = aux.ids if aux.ids is not None else aux.top_level
        return len(ids) if isinstance(ids, list) else 3
    if not release.draft_fc_follows_ids:
        return 3
    n = cfg.get("num_aux_hidden_states")
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    return len(aux.ids) if aux.ids else 3


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]}..{versions[-1]}"


def per_release(ids: list[int] | None, n: int, fam: str) -> str:
    """Effective indices on every supported release (pristine), grouped."""
    groups: dict[tuple, list[str]] = {}
    for r in releases.RELEASES:
        groups.setdefault(tuple(effective(ids, n, r.aux_offset[fam])), []).append(r.version)
    return "; ".join(f"{_span(v)}: {list(k)}" for k, v in groups.items())


def check(
    target: ModelDir,
    draft: ModelDir,
    release: releases.Release,
    applied: set[str] | None,
    graphs_on: bool,
    fc_in_checkpoint: int | None,
    sglang=None,
) -> list[Finding]:
    """sglang: ask_sglang.Answer whose .aux holds the release's own capture indices
    (its set_eagle3_layers_to_capture, run) and, where its decoder loop ran on stand-in
    layers, which boundaries arrive; else the rules of the release table decide."""
    aux, found = read_ids(draft)
    asked = (sglang.aux if sglang is not None else None) or {}
    if "refused" in asked:  # SGLang refuses the target class at startup: reported as such
        return found
    loaded = sglang.target.get("layers") if sglang is not None else None
    if isinstance(loaded, int) and not isinstance(loaded, bool):
        n = loaded  # SGLang's ModelConfig: e.g. LongCat-Flash's num_layers
    else:
        key_n = "num_hidden_layers"
        if target.text.get(key_n) is None and target.text.get("num_layers") is not None:
            key_n = "num_layers"  # LongCat-Flash names it so; its config class maps it
        n, bad = target.number(key_n, required=True, why=" (needed to place the aux layers)")
        if bad:
            return found + [bad]
    n = int(n)
    arch = target.architecture
    fam = family(arch)
    rule = rules(release, applied)[fam]
    ids = aux.ids
    key = f"eagle_config.{IDS_KEY}"

    eff = effective(ids, n, rule)
    if applied:  # our patches change the release's rule: SGLang's pristine answer is moot
        asked = {}
    verdict = "predicted from the release table"
    if "raised" in asked:
        found.append(
            draft.finding(
                "aux.sglang-raised",
                ERROR,
                f"SGLang {sglang.version}'s own {arch}.set_eagle3_layers_to_capture raises on "
                f"ids {ids}: {asked['raised']}.",
                "use ids of the target's decoder layers (0..N-1)",
                key,
                text=False,
            )
        )
        return found
    if isinstance(asked.get("layers_to_capture"), list):
        eff, verdict = asked["layers_to_capture"], sglang.label
    elif arch in UNMIRRORED:
        found.append(
            draft.finding(
                "aux.unpredictable",
                WARNING,
                f"which layers a {arch} target captures for ids {ids} cannot be predicted "
                f"without SGLang {release.version} (it hands them to its own backend).",
                "run preflight where that release is installed (it then asks SGLang)",
                key,
                text=False,
            )
        )
        return found
    # The capture boundaries this release's loop reaches for this architecture.
    ran = asked.get("boundaries") or {}
    low = 0 if arch in release.aux_capture_embedding else 1
    top = n if arch in release.aux_capture_final else n - 1
    if ran.get("embedding") is not None:
        low = 0 if ran["embedding"] else 1
    if ran.get("final") is not None:
        top = n if ran["final"] else n - 1
    bounds = (
        f"its decoder loop ran on stand-in layers ({sglang.label})"
        if ran.get("embedding") is not None or ran.get("final") is not None
        else "predicted from the release table"
    )
    reachable = lambda e: low <= e <= top  # noqa: E731
    if ids is not None:
        embedding = [e for raw, e in zip(ids, eff, strict=False) if raw == -1]
        if embedding and not all(map(reachable, embedding)):
            found.append(
                draft.finding(
                    "aux.embedding",
                    ERROR,
                    f"layer id -1 (the embedding output) in {ids}: SGLang cannot capture it for a "
                    f"{arch} target on {release.version} ({_EMBEDDING[rule]}).",
                    "use ids of decoder layers (0..N-1); retrain or pick the draft made for this "
                    "target",
                    key,
                    text=False,
                )
            )
        if len(set(ids)) != len(ids):
            found.append(
                draft.finding(
                    "aux.duplicates",
                    ERROR,
                    f"duplicate layer ids in {ids}: each layer is captured "
                    f"once, so the draft gets fewer aux states than its fc expects.",
                    "list each layer once",
                    key,
                    text=False,
                )
            )
        if ids != sorted(ids):
            found.append(
                draft.finding(
                    "aux.unsorted",
                    WARNING,
                    f"ids {ids} are not ascending: SGLang concatenates the "
                    f"states in layer order, not in list order.",
                    "sort them if the draft was trained in this list order",
                    key,
                    text=False,
                )
            )
        if len(ids) != 3:
            found.append(
                draft.finding(
                    "aux.count",
                    WARNING,
                    f"{len(ids)} aux layers (EAGLE-3 drafts use 3).",
                    "check it matches the draft's training",
                    key,
                    text=False,
                )
            )

    # (raw id, capture index); a raw -1 is reported once, as aux.embedding, above.
    pairs = list(zip(ids, eff, strict=False)) if ids is not None else [(None, e) for e in eff]
    outside = [e for raw, e in pairs if raw != -1 and not reachable(e)]
    if outside:
        found.append(
            draft.finding(
                "aux.out-of-range",
                ERROR,
                f"ids {ids} give capture indices {eff} on SGLang {release.version}; {outside} lie "
                f"outside {low}..{top} for a {n}-layer {arch} target, so they are never captured "
                f"(0 is the embedding output, {n} the last layer's).",
                f"use ids in the target's range ({target.config_file}: "
                f"{target.text_prefix}num_hidden_layers = {n})",
                key,
                text=False,
            )
        )

    captured = len({e for raw, e in pairs if raw == -1 or reachable(e)})
    built = fc_inputs_built(draft, aux, release)
    if aux.use_aux and captured != built:
        found.append(
            draft.finding(
                "aux.fc-mismatch",
                ERROR,
                f"the target captures {captured} aux states but SGLang {release.version} builds the "
                f"draft's fc ({draft.architecture}) for {built}: the first draft step fails.",
                "make the ids match the draft (3 layers unless num_aux_hidden_states says "
                "otherwise)",
                key,
                text=False,
            )
        )
    if fc_in_checkpoint is not None and fc_in_checkpoint != built:
        found.append(
            draft.finding(
                "aux.fc-mismatch",
                ERROR,
                f"the checkpoint's fc.weight takes {fc_in_checkpoint} aux states but SGLang "
                f"{release.version} builds it for {built}: loading the draft fails.",
                f"set num_aux_hidden_states / the id list to {fc_in_checkpoint} entries"
                if release.draft_fc_follows_ids
                else "this release always builds 3 inputs: use a "
                f"3-layer draft or SGLang >= {FC_FOLLOWS_IDS}",
                key,
                text=False,
            )
        )

    inputs = ", ".join(map(str, eff))
    outputs = ", ".join("embedding" if e == 0 else str(e - 1) for e in eff)
    how = (
        {
            releases.AUX_PLUS_ONE: "+1 to each id",
            releases.AUX_FIRST_IS_1: (
                "+1 (first id is 1)" if ids and ids[0] == 1 else "used as is (first id is not 1)"
            ),
            releases.AUX_UNLESS_MAX_IS_N: "as is (max is N)"
            if ids and max(ids) == n
            else "+1 to each id",
            releases.AUX_DEFAULTS_TOO: "+1 to each id",
        }[rule]
        if ids is not None
        else "defaults [2, N//2, N-3], no +1"
    )
    if verdict != "predicted from the release table" and eff != effective(ids, n, rule):
        how = f"SGLang's own set_eagle3_layers_to_capture ({asked.get('via')})"
    found.append(
        draft.finding(
            "aux.effective",
            INFO,
            f"{arch} target ({n} layers, {fam} convention) on SGLang {release.version}: ids "
            f"{ids if ids is not None else '(none)'} from {aux.where}, {how} -> captures the hidden "
            f"state entering layers [{inputs}] (= outputs of layers [{outputs}]) ({verdict}; "
            f"which boundaries can be captured: {bounds}). Compare with the draft's training. "
            f"Per release: {per_release(ids, n, fam)}.",
            key=key,
            text=False,
            effective=eff,
            ids=ids,
            rule=rule,
            verdict=verdict,
        )
    )

    if ids and fam == "deepseek" and rule == releases.AUX_PLUS_ONE and ids[0] != 1:
        unknown = " (patch state unknown here)" if applied is None else ""
        found.append(
            draft.finding(
                "aux.deepseek-offset",
                WARNING,
                f"SGLang {release.version} adds 1 to every id for {arch}: captures [{inputs}], "
                f"while {DEEPSEEK_FIXED}+ use ids whose first is not 1 as is ({ids}). A draft trained "
                f"with the input-of-layer convention (first id 2, e.g. [2, 30, 58] for Kimi-K2.5) "
                f"is fed one layer late (about -0.1 accept length){unknown}.",
                f"python -m sgl_eagle_ext.patches apply (patch {PATCH_OFFSET}), or SGLang >= "
                f"{DEEPSEEK_FIXED}; if the draft was trained for these +1 layers, --skip "
                f"aux.deepseek-offset",
                key,
                text=False,
            )
        )

    graph_bug = release.graph_resets_aux_layers and not (applied and PATCH_GRAPHS in applied)
    if graph_bug and graphs_on and eff != defaults(n):
        unknown = " (patch state unknown here)" if applied is None else ""
        found.append(
            draft.finding(
                "aux.cuda-graph-reset",
                WARNING,
                f"SGLang {release.version} captures its CUDA graphs with the default layers "
                f"{defaults(n)}: decode and verify feed the draft those, while prefill feeds "
                f"[{inputs}]{unknown}. Acceptance drops well below the draft's.",
                f"python -m sgl_eagle_ext.patches apply (patch {PATCH_GRAPHS}), or SGLang >= "
                f"{GRAPHS_FIXED}, or --disable-cuda-graph (slow)",
                key,
                text=False,
            )
        )
    return found
