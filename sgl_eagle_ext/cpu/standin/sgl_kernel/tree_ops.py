"""EAGLE tree build and greedy tree verify for CPU.

Where the installed SGLang ships Triton versions of these kernels (0.5.16+:
`sglang.kernels.ops.speculative.spec_tree`), they are called (run on CPU by
Triton's interpreter, TRITON_INTERPRET=1); older releases (0.5.10.post1) get
the plain PyTorch reference in tree_ref.py, which computes the same.

Imports are inside the functions: on CPU, SGLang's spec_tree module itself
imports sgl_kernel when it loads.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger("sgl_eagle_ext.cpu.standin")
SPEC_TREE = "sglang.kernels.ops.speculative.spec_tree"


@functools.cache
def sglang_tree_kernels():
    """SGLang's (build, verify) Triton functions, or None if the release has none."""
    import importlib

    try:
        spec_tree = importlib.import_module(SPEC_TREE)
        found = (spec_tree.sgl_build_tree_kernel_triton, spec_tree.verify_tree_greedy_triton)
    except (ImportError, AttributeError) as exc:
        logger.warning(
            "sgl_kernel stand-in: no SGLang Triton tree kernels (%s); using the "
            "PyTorch reference (tree_ref.py)",
            exc,
        )
        return None
    return found


def build_tree_kernel_efficient_cpu(
    parent_list,
    top_scores_index,
    seq_lens,
    tree_mask,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    topk,
    spec_steps,
    num_verify_tokens,
    tree_mask_mode,
):
    kernels = sglang_tree_kernels()
    if kernels is None:
        from sgl_kernel.tree_ref import build_tree as build
    else:
        build = kernels[0]
    build(
        parent_list,
        top_scores_index,
        seq_lens,
        tree_mask,
        positions,
        retrieve_index,
        retrieve_next_token,
        retrieve_next_sibling,
        topk,
        spec_steps,
        num_verify_tokens,
        tree_mask_mode,
    )


def verify_tree_greedy_cpu(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,  # SGLang's CPU call site keeps sgl-kernel's spelling
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    kernels = sglang_tree_kernels()
    if kernels is None:
        from sgl_kernel.tree_ref import verify_greedy as verify
    else:
        verify = kernels[1]
    verify(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_token_num,
        candidates=candidates,
        retrieve_index=retrive_index,
        retrieve_next_token=retrive_next_token,
        retrieve_next_sibling=retrive_next_sibling,
        target_predict=target_predict,
    )
    return predicts, accept_index, accept_token_num
