"""EAGLE bookkeeping ops: draft/verify cache slots and accepted-token gathers."""

from __future__ import annotations

import torch


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_cols
):
    """Per request, the topk * num_cols slots from seq_lens on, packed by request."""
    width = topk * num_cols
    bs = seq_lens.numel()
    cols = seq_lens.long()[:, None] + torch.arange(width, device=seq_lens.device)
    slots = req_to_token[req_pool_indices.long()[:, None], cols]
    out_cache_loc[: bs * width] = slots.reshape(-1).to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """bonus[i] = the last accepted token of request i (accept_lens includes it)."""
    bs = accept_lens.numel()
    idx = torch.arange(bs, device=accept_lens.device) * accept_stride + accept_lens.long() - 1
    bonus_tokens[:bs] = accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """Pack out_cache_loc[i] for every accepted index i (entries -1 are skipped)."""
    flat = accept_index.reshape(-1)
    picked = out_cache_loc[flat[flat != -1].long()]
    accept_out_cache_loc[: picked.numel()] = picked.to(accept_out_cache_loc.dtype)
