"""The scratch SGLang's split-KV verify kernels allocate when chain verify is on
(in_sglang/chain_verify.py), per rank, for the memory plan: estimated from the kernels'
source (sglang/kernels/ops/attention/verify_mla.py), not measured.

The grouped-head kernel (absorbed MLA, GQA) keeps, per distinct chain length (and heads,
head dims), split partials of max_bs x query heads x MAX_N_SPLITS x l_pad x v head dim
and an fp32 LSE of the same shape without the head dim, sized by the request pool and
allocated at its first call: during CUDA-graph capture, after SGLang has sized the KV
pool, so it comes out of what --mem-fraction-static leaves. l_pad is the chain length, or
16 / the head block, rounded up to a power of two. The partials are bf16 for absorbed
MLA (SGLang's) and fp32 for GQA (the project's, for exactness). The per-head kernel
(MHA, such as Kimi-K2.5's EAGLE-3 draft) keeps fp32 partials of max_bs x heads x splits x
chain (a power of two) x head dim, one instance per split count in use. A tree (topk > 1)
never runs these kernels.
"""

from __future__ import annotations

from sgl_eagle_ext.common.contract import CHAIN_VERIFY_ENV, parse_chain_verify

SPLITS = 32  # verify_mla.MAX_N_SPLITS: the scratch's split dimension
BLOCK_H = 4  # verify_mla's head block for every tuned and untuned head dim
# verify_splitkv's split counts (MIN_N_SPLITS..MAX_N_SPLITS by prefix length): one
# instance each, its scratch sized by its own count
PER_HEAD_SPLITS = (4, 8, 16)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def splits(env) -> int | None:
    """The split dimension the kernels allocate with under `env`, or None: off (also
    for a value the server refuses, by the same parser)."""
    try:
        params = parse_chain_verify(str((env or {}).get(CHAIN_VERIFY_ENV, "")))
    except ValueError:
        return None
    return None if params is None else params.get("splits", SPLITS)


def grouped_bytes(max_bs: int, heads: int, kv_heads: int, v_dim: int, chain: int, n: int,
                  part_bytes: int) -> int:  # fmt: skip
    """One grouped-head kernel instance's scratch (partials and LSE)."""
    group = heads // max(kv_heads, 1)
    block_h = BLOCK_H if kv_heads <= 1 or group % BLOCK_H == 0 else group
    l_pad = max(_pow2(-(-16 // block_h)), _pow2(chain))
    return max_bs * heads * n * l_pad * (v_dim * part_bytes + 4)


def per_head_bytes(max_bs: int, heads: int, v_dim: int, chain: int, n: int) -> int:
    """One per-head kernel instance's scratch (fp32 partials and LSE): MHA runs it."""
    return max_bs * heads * n * _pow2(chain) * (v_dim + 1) * 4


def estimate(env, topk, chains, max_bs, target: dict, draft: dict | None) -> tuple[int, str]:
    """(bytes, what) per rank. `target`/`draft`: heads, kv_heads, v_dim, mla (per rank);
    `chains`: the chain lengths (tokens per request) of every runtime state."""
    n = splits(env)
    if n is None or topk != 1 or not chains or not max_bs:
        return 0, ""
    total = 0
    per_head = (n,) if n != SPLITS else PER_HEAD_SPLITS  # "splits=N" sets both kernels'
    for model in (target, draft):
        if not model:
            continue
        part = 2 if model["mla"] else 4
        grouped = model["mla"] or model["heads"] > model["kv_heads"]  # as chain_verify orders
        for chain in sorted(set(chains)):
            if grouped:
                total += grouped_bytes(
                    max_bs, model["heads"], model["kv_heads"], model["v_dim"], chain, n, part
                )
            else:
                total += sum(
                    per_head_bytes(max_bs, model["heads"], model["v_dim"], chain, k)
                    for k in per_head
                )
    lengths = ",".join(str(c) for c in sorted(set(chains)))
    return total, f"{max_bs} request slots, chain lengths {lengths}"
