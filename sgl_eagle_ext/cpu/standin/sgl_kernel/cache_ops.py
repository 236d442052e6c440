"""KV-slot bookkeeping ops: req_to_token <-> out_cache_loc, and KV row moves."""

from __future__ import annotations

import ctypes

import torch


def _ragged(req_pool_indices, start_offset, end_offset):
    """(rows, cols) of every req_to_token cell in [start, end) per request,
    in request order, i.e. the packed order of out_cache_loc."""
    start = start_offset.long()
    lens = end_offset.long() - start
    total = int(lens.sum())
    first = torch.cumsum(lens, 0) - lens
    within = torch.arange(total, device=lens.device) - first.repeat_interleave(lens)
    rows = req_pool_indices.long().repeat_interleave(lens)
    cols = start.repeat_interleave(lens) + within
    return rows, cols, total


def assign_req_to_token_pool_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """req_to_token[req, start:end] = next (end - start) slots of out_cache_loc."""
    rows, cols, total = _ragged(req_pool_indices, start_offset, end_offset)
    req_to_token[rows, cols] = out_cache_loc[:total].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    """The inverse gather: out_cache_loc (packed) = req_to_token[req, start:end]."""
    rows, cols, total = _ragged(req_pool_indices, start_offset, end_offset)
    out_cache_loc[:total] = req_to_token[rows, cols].to(out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For every KV buffer (given by address and row stride in bytes, as SGLang
    passes them): row[tgt] = row[src]. Sources are read before any write, so
    overlapping moves are safe, as in the GPU kernel."""
    if tgt_loc.numel() == 0:
        return
    rows_needed = int(torch.maximum(tgt_loc.max(), src_loc.max())) + 1
    tgt, src = tgt_loc.long(), src_loc.long()
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        # SGLang hands only addresses; view the buffer's first rows as bytes.
        raw = (ctypes.c_uint8 * (rows_needed * stride)).from_address(ptr)
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(rows_needed, stride)
        rows[tgt] = rows[src]
