"""Seconds of CPU training that make the tiny target speak (see tiny_models).

Two stages, both full-batch Adam on the shipped corpus, single-threaded and
deterministic (same seed -> same bytes):

1. the "bigram readout" r(x) = lm_head(final_norm(embed(x))) learns the corpus's
   next-token statistics: that is what the drafts compute, so the target's
   greedy token equals the drafts' guess wherever one token predicts the next;
2. with embeddings, final norm and lm_head frozen, the decoder layers learn the
   rest (the context a bigram cannot see), so greedy continuations of the demo
   prompts follow the corpus text.
"""

from __future__ import annotations

import contextlib

READOUT_STEPS = 300
READOUT_LR = 0.05
LAYER_STEPS = 300
LAYER_LR = 3e-3


@contextlib.contextmanager
def reproducible():
    """One thread and deterministic kernels while training, restored afterwards
    (the caller may be a test process or the launcher)."""
    import torch

    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict)


def sequences(tok, corpus: list[str]) -> list[list[int]]:
    """Training sequences: each paragraph from position 0, running on into the
    next one, so a prompt that opens a paragraph continues with it (and after
    it with the next paragraph) instead of falling off the corpus."""
    n = len(corpus)
    return [tok.encode(corpus[i] + "\n" + corpus[(i + 1) % n]).ids for i in range(n)]


def _batch(seqs, pad: int):
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = True
    return ids, mask


def _no_specials(logits, n_special: int):
    """Special tokens score exactly 0 (their lm_head rows are zero in the model)."""
    import torch

    return torch.cat([torch.zeros_like(logits[..., :n_special]), logits[..., n_special:]], -1)


def train_readout(model, seqs, n_special: int, eps: float) -> float:
    """Stage 1: embeddings, final norm and lm_head fit the corpus's bigrams."""
    import torch

    pairs = [(a, b) for s in seqs for a, b in zip(s, s[1:])]
    x = torch.tensor([a for a, _ in pairs])
    y = torch.tensor([b for _, b in pairs])
    emb = model.model.embed_tokens.weight
    norm = model.model.norm.weight
    head = model.lm_head.weight
    opt = torch.optim.Adam([emb, norm, head], lr=READOUT_LR)
    for _ in range(READOUT_STEPS):
        e = emb[x]
        h = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + eps) * norm
        loss = torch.nn.functional.cross_entropy(_no_specials(h @ head.T, n_special), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def train_layers(model, seqs, n_special: int, pad: int) -> float:
    """Stage 2: the decoder layers learn the context; the readout stays as it is."""
    import torch

    frozen = {
        id(p)
        for p in (model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight)
    }
    params = [p for p in model.parameters() if id(p) not in frozen]
    for p in model.parameters():
        p.requires_grad_(id(p) not in frozen)
    ids, mask = _batch(seqs, pad)
    labels = ids[:, 1:][mask[:, 1:]]
    opt = torch.optim.Adam(params, lr=LAYER_LR)
    model.train()
    for _ in range(LAYER_STEPS):
        logits = model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1][mask[:, 1:]]
        loss = torch.nn.functional.cross_entropy(_no_specials(logits, n_special), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return loss.item()
