"""The stand-in's PyTorch tree build / greedy verify (tree_ref.py, used for SGLang
0.5.10.post1) against SGLang's own Triton kernels (0.5.16+, run by Triton's
interpreter) on random draft trees: every output buffer must be identical.

The comparison runs in a child interpreter: TRITON_INTERPRET must be set before
SGLang's kernels are defined, and the stand-in must be the `sgl_kernel` there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[1] / "sgl_eagle_ext" / "cpu" / "standin"
SPEC_TREE = "sglang.kernels.ops.speculative.spec_tree"
# (steps, topk, draft tokens, batch size): chains, trees, a one-step draft,
# more draft tokens than a chain has, a batch of several requests.
CASES = [
    (1, 1, 2, 1),
    (3, 1, 4, 3),
    (5, 1, 6, 2),
    (2, 4, 16, 3),
    (2, 2, 6, 4),
    (3, 2, 8, 2),
    (4, 3, 10, 1),
    (1, 4, 5, 2),
    (3, 4, 12, 5),
]
TRIES = 6  # random trees per case and mask mode


def draft_tree(torch, gen, bs, steps, topk, n):
    """parent_list / top_scores_index / draft tokens the way SGLang's draft
    loop builds them (beams of topk, the n - 1 best nodes kept), random scores."""

    def probs(rows):
        return torch.rand(rows, topk, generator=gen).sort(-1, descending=True).values

    vocab = 7  # few token ids: siblings often share a token, verify must pick the first
    scores = probs(bs)
    score_list = [scores[:, None, :]]
    token_list = [torch.randint(0, vocab, (bs, topk), generator=gen)]
    parents_list = [torch.arange(-1, topk).repeat(bs, 1)]
    for i in range(1, steps):
        expanded = scores[:, :, None] * probs(bs * topk).reshape(bs, topk, topk)
        scores, index = expanded.flatten(1).topk(topk, dim=-1)
        score_list.append(expanded)
        token_list.append(torch.randint(0, vocab, (bs, topk * topk), generator=gen))
        parents_list.append(index + (topk * topk * (i - 1) + topk))
    flat_scores = torch.cat(score_list, dim=1).flatten(1)
    top = torch.topk(flat_scores, n - 1, dim=-1).indices.sort().values
    tokens = torch.gather(torch.cat(token_list, dim=1), 1, top)
    parent_list = (
        torch.cat(parents_list[:-1], dim=1) if steps > 1 else torch.empty(bs, 0, dtype=torch.long)
    )
    return parent_list, top, tokens


def compare() -> int:
    import torch
    from sgl_kernel import tree_ref
    from sglang.kernels.ops.speculative import spec_tree

    gen = torch.Generator().manual_seed(1234)
    checked = 0
    for steps, topk, n, bs in CASES:
        for mode in (tree_ref.FULL_MASK, tree_ref.QLEN_ONLY):
            for _ in range(TRIES):
                parent_list, top, tokens = draft_tree(torch, gen, bs, steps, topk, n)
                seq_lens = torch.randint(1, 9, (bs,), generator=gen)
                size = (int(seq_lens.sum()) * n + n * n * bs) if mode == 0 else n * n * bs
                out = {}
                for name, build in (
                    ("ref", tree_ref.build_tree),
                    ("triton", spec_tree.sgl_build_tree_kernel_triton),
                ):
                    mask = torch.rand(size, generator=torch.Generator().manual_seed(checked)) > 0.5
                    positions = torch.full((bs * n,), -7, dtype=torch.long)
                    links = torch.full((3, bs, n), -1, dtype=torch.long)
                    build(parent_list, top, seq_lens, mask, positions, *links, topk, steps, n, mode)
                    out[name] = (mask, positions, links)
                for a, b in zip(out["ref"], out["triton"]):
                    assert torch.equal(a, b), (steps, topk, n, bs, mode, a, b)

                # Verify on that tree: draft tokens with the verified token in front;
                # the target agrees with the draft often, but not always.
                _, _, links = out["ref"]
                candidates = torch.cat([torch.randint(0, 7, (bs, 1), generator=gen), tokens], 1)
                noise = torch.randint(0, 7, (bs, n), generator=gen)
                agree = torch.rand(bs, n, generator=gen) < 0.7
                target = torch.where(agree, candidates.roll(-1, 1), noise)
                results = {}
                for name, verify in (
                    ("ref", tree_ref.verify_greedy),
                    ("triton", spec_tree.verify_tree_greedy_triton),
                ):
                    predicts = torch.full((bs * n,), -5, dtype=torch.int32)
                    accept_index = torch.full((bs, steps + 1), -1, dtype=torch.int32)
                    accept_num = torch.full((bs,), -3, dtype=torch.int32)
                    verify(
                        predicts=predicts,
                        accept_index=accept_index,
                        accept_token_num=accept_num,
                        candidates=candidates,
                        retrieve_index=links[0],
                        retrieve_next_token=links[1],
                        retrieve_next_sibling=links[2],
                        target_predict=target,
                    )
                    results[name] = (predicts, accept_index, accept_num)
                for a, b in zip(results["ref"], results["triton"]):
                    assert torch.equal(a, b), (steps, topk, n, bs, a, b)
                checked += 1
    return checked


@pytest.mark.harness
def test_reference_matches_sglang_triton_kernels():
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("SGLANG_USE_CPU_ENGINE", None)  # spec_tree then needs no sgl_kernel at import
    probe = subprocess.run(
        [sys.executable, "-c", f"import {SPEC_TREE}"], env=env, capture_output=True, text=True
    )
    # the primary release (the test venv's) ships them: their absence is a failure
    assert probe.returncode == 0, f"no Triton tree kernels to compare with: {probe.stderr[-500:]}"
    run = subprocess.run(
        [sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"checked {len(CASES) * 2 * TRIES} trees" in run.stdout, run.stdout


if __name__ == "__main__":
    from sgl_eagle_ext.cpu import interpreter_patching

    interpreter_patching.install()  # what the kernels compute unchanged; less interpreter time
    print(f"checked {compare()} trees")
