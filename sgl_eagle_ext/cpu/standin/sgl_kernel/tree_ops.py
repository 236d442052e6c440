"""EAGLE tree build and greedy tree verify, delegated to SGLang's own Triton
kernels (run on CPU by Triton's interpreter, TRITON_INTERPRET=1).

Imports are inside the functions: on CPU, SGLang's spec_tree module itself
imports sgl_kernel when it loads.
"""

from __future__ import annotations


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
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    sgl_build_tree_kernel_triton(
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
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    verify_tree_greedy_triton(
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
