"""Weight bytes per tensor-parallel rank, before any weight loads.

Two sources, labelled:
  "from the safetensors headers": the checkpoint's tensor sizes (headers only, no
      data), each tensor either sharded over the TP ranks or replicated on each;
  "estimated": no weights here: the parameter count from the configuration (the
      DeepSeek-V3 MLA + MoE layout, Kimi-K2.5's text model among them; Llama-style
      GQA; the EAGLE-3 draft) times the bytes per parameter its quantization fields
      give (compressed-tensors int-N with group scales, fp8 with block scales, else
      the dtype), split as SGLang's layers split them over TP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# SGLang keeps these whole on every TP rank (ReplicatedLinear, norms, the MoE router,
# the vision tower); everything else is split over the ranks.
_REPLICATED = re.compile(
    r"(q_a_proj|kv_a_proj|fused_qkv_a|norm|layernorm|\.gate\.weight$|e_score_correction"
    r"|vision_tower|vision_model|mm_projector|multi_modal_projector|\bfc\.)"
)
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}


@dataclass
class Weights:
    bytes_per_rank: int
    source: str  # "from the safetensors headers" | "estimated from config.json"
    parts: dict[str, int] = field(default_factory=dict)  # bytes per rank by part

    @property
    def estimated(self) -> bool:
        return self.source.startswith("estimated")


def from_headers(sizes: dict[str, int], tp: int) -> Weights:
    parts = {"sharded": 0, "replicated": 0}
    for name, n in sizes.items():
        parts["replicated" if _REPLICATED.search(name) else "sharded"] += n
    per_rank = parts["replicated"] + parts["sharded"] // max(1, tp)
    return Weights(
        per_rank,
        "from the safetensors headers",
        {"replicated": parts["replicated"], "sharded / tp": parts["sharded"] // max(1, tp)},
    )


# -- bytes per parameter from the quantization fields -----------------------------------
def _ignored(name: str, ignore: list) -> bool:
    for pat in ignore or ():
        if not isinstance(pat, str):
            continue
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif name == pat or name.endswith("." + pat):
            return True
    return False


def linear_bytes(quant: dict | None, name: str, dtype_bytes: float) -> float:
    """Bytes per parameter of the Linear layer `name` under `quant` (a config's
    quantization_config): int-N groups carry one bf16 scale per group (and a zero
    point when asymmetric); fp8 blocks one fp32 scale per block."""
    if not quant:
        return dtype_bytes
    method = str(quant.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        if _ignored(name, quant.get("ignore") or []):
            return dtype_bytes
        for group in (quant.get("config_groups") or {}).values():
            w = (group or {}).get("weights") or {}
            bits = w.get("num_bits")
            if not isinstance(bits, int):
                continue
            size = w.get("group_size") or 0
            per = bits / 8
            if isinstance(size, int) and size > 0:
                per += 2 / size * (1 if w.get("symmetric", True) else 2)
            return per
        return dtype_bytes
    if method == "fp8":
        if "lm_head" in name or name.endswith(".gate"):
            return dtype_bytes
        block = quant.get("weight_block_size") or [128, 128]
        return 1 + 4 / (block[0] * block[1])
    return dtype_bytes


def _dtype_bytes(cfg: dict) -> float:
    return _DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), 2)


def _text(cfg: dict) -> dict:
    return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def _quant(cfg: dict) -> dict | None:
    return cfg.get("quantization_config") or _text(cfg).get("quantization_config")


class _Count:
    def __init__(self, quant, dtype_bytes, tp):
        self.quant, self.db, self.tp, self.parts = quant, dtype_bytes, max(1, tp), {}

    def add(self, part: str, name: str, params: float, sharded: bool, linear: bool = True):
        per = linear_bytes(self.quant, name, self.db) if linear else self.db
        n = params * per / (self.tp if sharded else 1)
        self.parts[part] = self.parts.get(part, 0) + int(n)


def _vision(c: _Count, cfg: dict) -> None:
    v = cfg.get("vision_config")
    if not isinstance(v, dict):
        return
    h = v.get("hidden_size") or v.get("vt_hidden_size") or 1024
    inter = v.get("intermediate_size") or v.get("vt_intermediate_size") or 4 * h
    layers = v.get("num_hidden_layers") or v.get("vt_num_hidden_layers") or 24
    text_h = _text(cfg).get("hidden_size", h)
    merge = 1
    for k in v.get("merge_kernel_size") or ():
        merge *= k
    vit = layers * (4 * h * h + 2 * h * inter)
    projector = (h * merge) ** 2 + h * merge * text_h
    c.add("vision tower + projector (replicated)", "vision_tower", vit + projector, False, False)


def estimate(cfg: dict, tp: int) -> Weights:
    """The target's weight bytes per TP rank from its configuration."""
    t = _text(cfg)
    c = _Count(_quant(cfg), _dtype_bytes(t), tp)
    h, vocab, n = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    heads = t["num_attention_heads"]
    c.add("embedding", "embed_tokens", vocab * h, True, False)
    c.add("lm_head", "lm_head", vocab * h, True)
    pre = "model.layers.1"
    if t.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3, Kimi-K2/K2.5)
        rope, nope = t["qk_rope_head_dim"], t["qk_nope_head_dim"]
        v_dim, kv_rank, q_rank = t["v_head_dim"], t["kv_lora_rank"], t.get("q_lora_rank")
        if q_rank:
            c.add("attention", f"{pre}.self_attn.q_a_proj", n * h * q_rank, False)
            c.add(
                "attention", f"{pre}.self_attn.q_b_proj", n * q_rank * heads * (nope + rope), True
            )
        else:
            c.add("attention", f"{pre}.self_attn.q_proj", n * h * heads * (nope + rope), True)
        c.add("attention", f"{pre}.self_attn.kv_a_proj_with_mqa", n * h * (kv_rank + rope), False)
        c.add("attention", f"{pre}.self_attn.kv_b_proj", n * kv_rank * heads * (nope + v_dim), True)
        c.add("attention", f"{pre}.self_attn.o_proj", n * heads * v_dim * h, True)
    else:  # MHA / GQA
        hd = t.get("head_dim") or h // heads
        kv = t.get("num_key_value_heads") or heads
        kv_rank_share = max(kv, tp)  # fewer KV heads than ranks: each rank keeps a copy
        c.add("attention", f"{pre}.self_attn.q_proj", n * h * heads * hd, True)
        c.add("attention", f"{pre}.self_attn.k_proj", 2 * n * h * kv_rank_share * hd, True)
        c.add("attention", f"{pre}.self_attn.o_proj", n * heads * hd * h, True)
    experts = t.get("n_routed_experts") or t.get("num_local_experts") or 0
    dense_layers = t.get("first_k_dense_replace", 0) if experts else n
    if dense_layers:
        c.add(
            "dense MLP",
            "model.layers.0.mlp.gate_proj",
            dense_layers * 3 * h * t["intermediate_size"],
            True,
        )
    if experts:
        moe_layers, inter = n - dense_layers, t["moe_intermediate_size"]
        c.add(
            "routed experts",
            f"{pre}.mlp.experts.0.gate_proj",
            moe_layers * experts * 3 * h * inter,
            True,
        )
        shared = t.get("n_shared_experts") or 0
        if shared:
            c.add(
                "shared experts",
                f"{pre}.mlp.shared_experts.gate_proj",
                moe_layers * shared * 3 * h * inter,
                True,
            )
        c.add("router", f"{pre}.mlp.gate", moe_layers * experts * h, False, False)
    _vision(c, cfg)
    return Weights(sum(c.parts.values()), "estimated from config.json", c.parts)


def estimate_draft(cfg: dict, tp: int) -> Weights:
    """An EAGLE-3 draft (one Llama-style decoder layer over 2 x hidden, an fc over the
    aux states, its own lm_head over draft_vocab_size): the embedding is the target's
    (SGLang hands the draft the target's embedding), so it is not counted here."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    kv = cfg.get("num_key_value_heads") or heads
    n = cfg.get("num_hidden_layers", 1)
    aux = len((cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    c = _Count(_quant(cfg), _dtype_bytes(cfg), tp)
    c.add("fc", "fc", aux * h * h, False)
    c.add("attention", "q_proj", n * 2 * h * heads * hd, True)
    c.add("attention", "k_proj", n * 2 * 2 * h * max(kv, tp) * hd, True)
    c.add("attention", "o_proj", n * heads * hd * h, True)
    c.add("MLP", "mlp", n * 3 * h * cfg["intermediate_size"], True)
    c.add("lm_head", "lm_head", (cfg.get("draft_vocab_size") or cfg["vocab_size"]) * h, True)
    return Weights(sum(c.parts.values()), "estimated from config.json", c.parts)
