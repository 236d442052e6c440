"""Driver (run in the harness's interpreter, TRITON_INTERPRET=1): SGLang's split-KV
verify kernels against its extend kernel on one topk-1 verify shape.

    python tests/chain_kernels.py '[{"kernel": "splitkv", "bs": 2, ...}, ...]'

Prints one JSON line per case: the largest absolute difference, the bound it must stay under,
and whether the verify kernel served the shape (its own can_handle). The chain's mask is
the one SGLang builds for topk 1 (every prefix key, causal among the chain), so the
extend kernel computes exactly what a verify computes.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")


DEFAULTS: dict[str, dict] = {}


def project_wrap(module, fixed: bool, garbage: bool = False) -> None:
    """The project's wrapper over the kernel's scratch allocation (in_sglang/chain_verify.py,
    through the patching base) when `fixed`, else SGLang's own: the per-head kernel's
    scratch zeroed, the grouped-head kernel's partials in fp32. With `garbage` the per-head
    kernel's scratch starts as torch.empty may leave it (NaN: on a GPU, and now and then on
    a CPU too)."""
    import math

    from sgl_eagle_ext.in_sglang import chain_verify
    from sgl_eagle_ext.in_sglang_base import patching

    per_head = hasattr(module, "VerifySplitKV")
    cls = module.VerifySplitKV if per_head else module.VerifyMLA
    chain_verify.PATCHES.uninstall()
    if "_stock_alloc" not in vars(cls):
        cls._stock_alloc = cls._alloc
    stock = cls._stock_alloc

    def nan_filled(self, max_bs):
        stock(self, max_bs)
        self.att_out.fill_(math.nan)

    cls._alloc = nan_filled if garbage else stock
    if fixed:
        wrapper = chain_verify.zero_partials if per_head else chain_verify.fp32_partials
        anchor = f"{module.__name__}:{cls.__name__}._alloc"
        chain_verify.PATCHES.install([patching.Wrap(anchor, wrapper)])


def run(case: dict) -> dict:
    import torch
    from sglang.kernels.ops.attention import verify_mla, verify_splitkv
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    gen = torch.Generator().manual_seed(case.get("seed", 0))
    bs, h_q, h_kv, L = case["bs"], case["h_q"], case["h_kv"], case["chain"]
    dk, dv = case["dk"], case["dv"]
    prefixes = case["prefixes"]  # one per request: a ragged batch
    mla = case["kernel"] == "shared_kv"
    module = verify_mla if mla else verify_splitkv
    defaults = DEFAULTS.setdefault(module.__name__, dict(vars(module)))
    for name in ("MAX_N_SPLITS", "MIN_N_SPLITS", "DEFAULT_BLOCK_N"):
        if name in defaults:  # SGLang's own launch parameters unless the case sets them
            setattr(module, name, case.get("params", {}).get(name, defaults[name]))
    getattr(module, "_VMLA_CACHE" if mla else "_VK_CACHE").clear()
    fixed = case.get("fixed", True)
    project_wrap(module, fixed, garbage=case.get("poison", False))

    slots = sum(prefixes) + bs * L
    k_buffer = torch.randn(slots, h_kv, dk, generator=gen)
    # absorbed MLA: V is the latent part of the one cached row (its first dv dims)
    latent = dv < dk
    v_buffer = k_buffer[..., :dv].clone() if latent else torch.randn(slots, h_kv, dv, generator=gen)
    q = torch.randn(bs * L, h_q, dk, generator=gen)
    perm = torch.randperm(slots, generator=gen)
    kv_indices = perm[: sum(prefixes)].to(torch.int64)  # the prefix, scattered in the pool
    chain_slots = perm[sum(prefixes) :]
    k = k_buffer[chain_slots]
    v = v_buffer[chain_slots]
    kv_indptr = torch.tensor([0, *torch.tensor(prefixes).cumsum(0).tolist()], dtype=torch.int32)
    qo_indptr = torch.arange(0, (bs + 1) * L, L, dtype=torch.int32)
    mask, mask_indptr = [], [0]
    for p in prefixes:
        for i in range(L):
            mask += [True] * p + [j <= i for j in range(L)]
        mask_indptr.append(mask_indptr[-1] + L * (p + L))
    mask = torch.tensor(mask)
    mask_indptr = torch.tensor(mask_indptr, dtype=torch.int32)
    scale = dk**-0.5
    ref = torch.empty(bs * L, h_q, dv)
    out = torch.empty(bs * L, h_q, dv)
    args = (kv_indptr, kv_indices, mask, True, mask_indptr, L, 1.0, 1.0)
    extend_attention_fwd(q, k, v, ref, k_buffer, v_buffer, qo_indptr, *args, scale)
    kernel = verify_mla.verify_shared_kv_fwd if mla else verify_splitkv.verify_splitkv_fwd
    served = kernel(q, k, v, out, k_buffer, v_buffer, qo_indptr, *args, scale, max_bs=bs)
    # fp32 partials: reassociation only. SGLang's grouped-head kernel keeps its split
    # partials in bf16 ("halves scratch traffic"): one bf16 rounding (unit roundoff 2^-8) of
    # a convex combination of V rows, so the error is bounded by 2^-8 x max |V|.
    bf16 = mla and (latent or not fixed)  # the project keeps SGLang's bf16 for MLA
    bound = 2**-8 * float(v_buffer.abs().max()) + 1e-5 if bf16 else 2e-5
    return {
        "served": bool(served),
        "max_diff": float((out - ref).abs().max()) if served else None,
        "finite": bool(out.isfinite().all()) if served else None,
        "bound": bound,
    }


if __name__ == "__main__":
    from sgl_eagle_ext.cpu import interpreter_patching

    interpreter_patching.install()  # what the kernels compute unchanged; less interpreter time
    for case in json.loads(sys.argv[1]):
        sys.stdout.write(json.dumps(run(case)) + "\n")
