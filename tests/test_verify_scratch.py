"""The memory plan's verify-kernel scratch (launcher/preflight/verify_scratch.py) against
the bytes SGLang's own kernel classes allocate (VerifyMLA, VerifySplitKV built on the
CPU at small pools), over the shapes the presets run: Kimi-K2.5's MLA target at TP 8, its
MHA EAGLE-3 draft, a GQA target (the grouped-head kernel, fp32 partials as the project
allocates them), chains of 1 to 6 tokens."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.launcher.preflight import verify_scratch

pytestmark = pytest.mark.harness  # SGLang's kernels


def _bytes(kernel) -> int:
    return kernel.att_out.nbytes + kernel.att_lse.nbytes


@pytest.mark.parametrize("chain", [1, 2, 4, 6])
@pytest.mark.parametrize(
    "heads, kv_heads, dk, dv, fp32",
    [(8, 1, 576, 512, False), (8, 2, 128, 128, True), (4, 2, 16, 16, True), (2, 1, 64, 64, True)],
)
def test_grouped_head_scratch_is_what_sglang_allocates(heads, kv_heads, dk, dv, fp32, chain):
    import torch
    from sglang.kernels.ops.attention import verify_mla

    from sgl_eagle_ext.in_sglang import chain_verify

    vk = verify_mla._get_vmla(3, heads, dk, dv, chain, "cpu", heads // kv_heads)
    if fp32:  # the project's wrapper over _alloc, applied by hand
        chain_verify.fp32_partials(lambda *a: None, vk, (), {})
        assert vk.att_out.dtype == torch.float32
    n = verify_mla.MAX_N_SPLITS
    want = verify_scratch.grouped_bytes(3, heads, kv_heads, dv, chain, n, 4 if fp32 else 2)
    assert _bytes(vk) == want
    verify_mla._VMLA_CACHE.clear()


@pytest.mark.parametrize("chain", [1, 3, 6])
@pytest.mark.parametrize("n", verify_scratch.PER_HEAD_SPLITS)
def test_per_head_scratch_is_what_sglang_allocates(chain, n):
    from sglang.kernels.ops.attention import verify_splitkv

    vk = verify_splitkv.VerifySplitKV(5, 8, 8, 128, 128, chain, device="cpu", n_splits=n)
    assert _bytes(vk) == verify_scratch.per_head_bytes(5, 8, 128, chain, n)


def test_the_splits_the_plan_assumes_are_sglangs():
    from sglang.kernels.ops.attention import verify_mla, verify_splitkv

    assert verify_scratch.SPLITS == verify_mla.MAX_N_SPLITS
    assert verify_scratch.BLOCK_H == verify_mla.DEFAULT_BLOCK_H
    lo, hi = verify_splitkv.MIN_N_SPLITS, verify_splitkv.MAX_N_SPLITS
    assert (
        tuple(2**i for i in range(lo.bit_length() - 1, hi.bit_length()))
        == verify_scratch.PER_HEAD_SPLITS
    )


def test_off_a_tree_or_no_chain_is_no_scratch():
    model = {"heads": 8, "kv_heads": 1, "v_dim": 512, "mla": True}
    on = {"EAGLE_EXT_CHAIN_VERIFY": "1"}
    assert verify_scratch.estimate(on, 1, [4], 128, model, None)[0] > 0
    assert verify_scratch.estimate({}, 1, [4], 128, model, None)[0] == 0
    assert (
        verify_scratch.estimate({"EAGLE_EXT_CHAIN_VERIFY": "0"}, 1, [4], 128, model, None)[0] == 0
    )
    assert verify_scratch.estimate(on, 4, [4], 128, model, None)[0] == 0  # a tree
    refused = {"EAGLE_EXT_CHAIN_VERIFY": "splits=3"}  # the server refuses it: off
    assert verify_scratch.estimate(refused, 1, [4], 128, model, None)[0] == 0
    one = verify_scratch.estimate({"EAGLE_EXT_CHAIN_VERIFY": "splits=1"}, 1, [4], 128, model, None)
    assert one[0] * 32 == verify_scratch.estimate(on, 1, [4], 128, model, None)[0]
