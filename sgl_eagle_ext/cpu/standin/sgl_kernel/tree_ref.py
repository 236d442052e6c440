"""EAGLE tree build and greedy tree verify in plain PyTorch (reference versions).

Used for releases that ship no Triton version of these kernels (0.5.10.post1).
They compute what SGLang's kernels compute, element for element, including the
buffers' untouched parts; tests/test_tree_reference.py compares them with
SGLang 0.5.23's Triton kernels on random trees. Sizes are tiny (a batch of a
few requests, at most a few dozen draft tokens), so the work is done on Python
lists and written back with one tensor write per buffer row.

The draft tree (per request): node 0 is the last verified token, node p + 1 is
the p-th selected draft token. `selected_index[b, p] // topk` is a column of
`parent_list[b]` holding the top-scores index of the node's parent (column 0:
the root); that index is looked up among the selected ones.
"""

from __future__ import annotations

import torch

FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2


def _parent_node(selected: list[int], parents: list[int], p: int, topk: int) -> int | None:
    """Tree node of the parent of node p + 1; None when its parent was not selected."""
    column = selected[p] // topk
    if column == 0:
        return 0
    parent_top_index = parents[column]
    for q, sel in enumerate(selected):
        if sel == parent_top_index:
            return q + 1
    return None


def build_tree(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode,
) -> None:
    """Fill tree_mask, positions and the retrieve_* links in place."""
    mode = int(tree_mask_mode)
    if mode == QLEN_ONLY_BITPACKING:
        raise NotImplementedError("tree mask mode QLEN_ONLY_BITPACKING: not in the CPU harness")
    n = draft_token_num
    seq_lens = verified_seq_len.tolist()
    selected_rows = selected_index.tolist()
    parent_rows = (
        parent_list.reshape(len(seq_lens), -1).tolist()
        if parent_list.numel()
        else [[]] * len(seq_lens)
    )  # no parents: one draft step
    next_rows = retrieve_next_token.tolist()
    sibling_rows = retrieve_next_sibling.tolist()
    prefix = 0  # sum of the verified lengths of the earlier requests
    for b, seq_len in enumerate(seq_lens):
        selected, parents = selected_rows[b][: n - 1], parent_rows[b]
        nxt, sib = next_rows[b], sibling_rows[b]
        parent_of = [_parent_node(selected, parents, p, topk) for p in range(n - 1)]

        # Children lists: walking i downwards and pushing in front leaves each
        # parent's first child = its lowest-numbered one, siblings ascending.
        for i in range(n - 1, 0, -1):
            parent = parent_of[i - 1]
            if parent is not None:
                if nxt[parent] != -1:
                    sib[i] = nxt[parent]
                nxt[parent] = i
        retrieve_index[b] = torch.arange(b * n, (b + 1) * n, dtype=retrieve_index.dtype)
        retrieve_next_token[b] = torch.tensor(nxt, dtype=retrieve_next_token.dtype)
        retrieve_next_sibling[b] = torch.tensor(sib, dtype=retrieve_next_sibling.dtype)

        # Mask row of node x: the root column (seq_len) and the columns of the
        # n - 1 draft nodes; only x's ancestors (and x) are visible. In
        # FULL_MASK the rows also span the prefix, which is left as it is.
        depths = [0] * n
        for x in range(n):
            if mode == FULL_MASK:
                start = n * n * b + prefix * n + (seq_len + n) * x + seq_len
            else:
                start = n * n * b + n * x
            row = [True] + [False] * (n - 1)
            if x > 0:
                node, level = x, 0
                for _ in range(depth):
                    level += 1
                    row[node] = True
                    node = parent_of[node - 1]
                    if node is None or node == 0:
                        break
                depths[x] = level
            tree_mask[start : start + n] = torch.tensor(row, dtype=tree_mask.dtype)
        positions[b * n : (b + 1) * n] = torch.tensor(
            [seq_len + d for d in depths], dtype=positions.dtype
        )
        prefix += seq_len


def verify_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    target_predict,
) -> None:
    """Walk each request's tree from the root, following at every level the child
    whose token is the target's greedy token; write what was accepted in place."""
    bs, n = candidates.shape
    width = accept_index.shape[1]
    cand = candidates.tolist()
    index, nxt, sib = (
        t.tolist() for t in (retrieve_index, retrieve_next_token, retrieve_next_sibling)
    )
    target = target_predict.reshape(-1).tolist()
    slots, tokens = [], []  # predicts writes, in order
    for b in range(bs):
        last = index[b][0]  # flat index of the last accepted token
        accepted = [last]
        node = 0
        for _ in range(1, width):
            node = nxt[b][node]
            want = target[last]
            for _ in range(n):  # the children of the current node
                if node == -1 or cand[b][node] == want:
                    break
                node = sib[b][node]
            else:
                node = -1
            if node == -1:
                break
            slots.append(last)
            tokens.append(want)
            last = index[b][node]
            accepted.append(last)
        slots.append(last)
        tokens.append(target[last])  # the bonus token
        accept_index[b, : len(accepted)] = torch.tensor(accepted, dtype=accept_index.dtype)
        accept_token_num[b] = len(accepted) - 1
    if slots:
        predicts.view(-1)[torch.tensor(slots, dtype=torch.long)] = torch.tensor(
            tokens, dtype=predicts.dtype
        )
