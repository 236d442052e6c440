"""Tiny target + EAGLE-3 drafts for the CPU harness, built locally and reproducibly.

Nothing is downloaded: a byte-level BPE tokenizer is trained on the project's own
English corpus (tiny_corpus.py), the target is a 4-layer Llama (fp32) trained on
it for seconds on the CPU (tiny_training.py), so its greedy continuations of the
demo prompts are readable text, and the three drafts are written in SGLang's
`LlamaForCausalLMEagle3` checkpoint format with hand-set weights.

How the drafts get a known acceptance
-------------------------------------
Training first fits the "bigram readout" g(x) = argmax lm_head(norm(embed(x)))
of the current token x to the corpus's next-token statistics, then (readout
frozen, embeddings scaled to dominate the residual stream) trains the layers to
supply the context a bigram lacks. So the target's greedy next token is the
readout wherever one word predicts the next, and the layers overrule it
elsewhere (which keeps greedy comparisons sensitive to the KV cache). The drafts
compute that readout for their own input token:

* the draft shares the target's embeddings (SGLang's `set_embed`), its single
  attention layer attends (almost) only to the current position: q and k are a
  scaled copy of the normalised embedding, so the self score exceeds any other
  by a wide margin; v carries the embedding minus the incoming hidden state, so
  the residual stream after each draft step holds only the current token's
  normalised embedding (the previous step's is cancelled);
* `fc` is zero (target features are ignored), the MLP's down projection is
  zero, and the final norm and lm_head are the target's own.

The three drafts differ only in their draft vocabulary (`d2t`/`t2d`):
`draft-mostly` keeps every target token, `draft-partial` keeps half of the tokens
the target is seen to predict, `draft-never` keeps only tokens the target never
predicts. Acceptance is measured at build time (greedy runs with transformers
plus a replay of SGLang's chain/tree acceptance) and written to the manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.cpu.tiny_corpus import CORPUS, DEMO_PROMPTS

BUILD_VERSION = 4  # bump when anything below changes the built files (new subdir)
# Where the demo and the tests build the pair (EAGLE_EXT_MODELS_DIR moves it).
DEFAULT_DIR = Path("~/.cache/sgl-eagle-ext/tiny-models")
SEED = 20240611
EMBED_SCALE = 1.0  # RMS of the trained embeddings: they dominate the residual stream
VOCAB_SIZE = 765  # every corpus word is one token (the BPE trainer stops there)
HIDDEN = 64
LAYERS = 4
MAX_POS = 2048
AUX_LAYER_IDS = [0, 1, 2]  # Llama adds +1: captures inputs of target layers 1..3
SELF_ATTN_SCALE = 16.0  # draft q scale: self score beats any other position by far
DRAFT_ROPE_THETA = 10.0  # low theta: same token at another position scores lower
MEASURE_NEW_TOKENS = 48
# (steps, topk, num_draft_tokens) settings whose acceptance the manifest records.
SIM_SETTINGS = [(3, 1, 4), (5, 1, 6), (2, 4, 16)]
SIM_NEW_TOKENS = 16

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
PAD, BOS, EOS = 0, 1, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

DRAFTS = ("draft-never", "draft-partial", "draft-mostly")


def _log(msg: str) -> None:
    print(f"[tiny_models] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- tokenizer


def _build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)  # BPE training is deterministic
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, want {VOCAB_SIZE}")
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS],
        "eos_token": SPECIAL_TOKENS[EOS],
        "pad_token": SPECIAL_TOKENS[PAD],
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POS,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tok


# ---------------------------------------------------------------- target


def _build_target(out: Path, tok):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from sgl_eagle_ext.cpu import tiny_training

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POS,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    model = LlamaForCausalLM(config)
    seqs = tiny_training.sequences(tok, CORPUS)
    with tiny_training.reproducible():
        losses = _train(model, seqs, config.rms_norm_eps)
    _log(f"trained: readout loss {losses[0]:.3f}, model loss {losses[1]:.3f}")
    model.eval()
    model.to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    return model


def _train(model, seqs, eps: float) -> tuple[float, float]:
    import torch

    from sgl_eagle_ext.cpu import tiny_training

    with torch.no_grad():
        model.lm_head.weight[: len(SPECIAL_TOKENS)] = 0.0
    readout_loss = tiny_training.train_readout(model, seqs, len(SPECIAL_TOKENS), eps)
    with torch.no_grad():
        # Embeddings dominate the residual stream, so the target's greedy token
        # stays the readout unless the layers learned to overrule it.
        emb = model.model.embed_tokens.weight
        emb.mul_(EMBED_SCALE / emb.pow(2).mean().sqrt())
        # Special tokens get logit 0 while the best ordinary logit is positive:
        # the target never emits them, so outputs have a fixed length.
        model.lm_head.weight[: len(SPECIAL_TOKENS)] = 0.0
    layer_loss = tiny_training.train_layers(model, seqs, len(SPECIAL_TOKENS), PAD)
    return readout_loss, layer_loss


def _readout(model, x):
    """The target's 'bigram' logits: lm_head(final_norm(embed(x)))."""
    import torch

    emb = model.model.embed_tokens.weight[x]
    eps = model.config.rms_norm_eps
    normed = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * model.model.norm.weight) @ model.lm_head.weight.T


def _greedy(model, tok):
    import torch

    runs = []
    with torch.no_grad():
        for prompt in DEMO_PROMPTS:
            ids = torch.tensor([tok.encode(prompt).ids])
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=MEASURE_NEW_TOKENS,
                do_sample=False,
                pad_token_id=PAD,
                eos_token_id=None,
            )
            runs.append((ids[0].tolist(), out[0, ids.shape[1] :].tolist()))
    return runs


# ---------------------------------------------------------------- drafts


def _draft_tensors(target, keep):
    """State dict of one draft, vocabulary `keep`. The decoder layer is named
    `midlayer` as in published EAGLE-3 checkpoints: every supported release loads
    that name (0.5.23 maps it to `layers.0`), while 0.5.10.post1 silently skips
    `layers.0.*` and would run the layer with uninitialised weights."""
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    H = HIDDEN
    eye = torch.eye(H)
    keep_t = torch.tensor(sorted(keep), dtype=torch.long)
    t2d = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
    t2d[keep_t] = True
    zeros_h = torch.zeros(H, H)
    return {
        "embed_tokens.weight": target.model.embed_tokens.weight.detach().clone(),
        "fc.weight": torch.zeros(H, 3 * H),  # target features ignored (see module doc)
        # Input x = [norm(embed) | hidden_norm(h_prev)]; one head of size H.
        "midlayer.self_attn.q_proj.weight": torch.cat([SELF_ATTN_SCALE * eye, zeros_h], 1),
        "midlayer.self_attn.k_proj.weight": torch.cat([eye, zeros_h], 1),
        "midlayer.self_attn.v_proj.weight": torch.cat([eye, -eye], 1),
        "midlayer.self_attn.o_proj.weight": eye.clone(),
        "midlayer.input_layernorm.weight": torch.ones(H),
        "midlayer.hidden_norm.weight": torch.ones(H),
        "midlayer.post_attention_layernorm.weight": torch.ones(H),
        "midlayer.mlp.gate_proj.weight": 0.02 * torch.randn(2 * H, H, generator=g),
        "midlayer.mlp.up_proj.weight": 0.02 * torch.randn(2 * H, H, generator=g),
        "midlayer.mlp.down_proj.weight": torch.zeros(H, 2 * H),
        "norm.weight": target.model.norm.weight.detach().clone(),
        "lm_head.weight": target.lm_head.weight.detach()[keep_t].clone(),
        "d2t": keep_t - torch.arange(len(keep_t)),  # target id = draft id + d2t
        "t2d": t2d,
    }


def _draft_config(draft_vocab: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": HIDDEN,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": DRAFT_ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": DRAFT_ROPE_THETA},
        "max_position_embeddings": MAX_POS,
        "vocab_size": VOCAB_SIZE,
        "draft_vocab_size": draft_vocab,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "dtype": "float32",
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
            "use_aux_hidden_state": True,
        },
    }


def _write_draft(out: Path, target, keep) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in _draft_tensors(target, keep).items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(_draft_config(len(keep)), indent=2))


def _vocabularies(target, runs):
    """Draft vocabularies, from what the target is measured to predict."""
    import torch

    ordinary = range(len(SPECIAL_TOKENS), VOCAB_SIZE)
    with torch.no_grad():
        bigram = _readout(target, torch.arange(VOCAB_SIZE)).argmax(-1).tolist()
    seen = {t for _, gen in runs for t in gen}
    predicted = seen | {bigram[t] for t in ordinary}
    never = [t for t in ordinary if t not in predicted]
    # Every other seen token (by id) stays: the draft is right only when the
    # target's next token is one it kept, so about half the drafts survive.
    dropped = set(sorted(seen)[::2])
    partial = [t for t in ordinary if t not in dropped]
    return {
        "draft-mostly": list(ordinary),
        "draft-partial": partial,
        "draft-never": never,
    }


# ---------------------------------------------------------------- acceptance replay


def _draft_probs(target, keep):
    """Per input token: the draft's distribution over its own vocabulary."""
    import torch

    with torch.no_grad():
        logits = _readout(target, torch.arange(VOCAB_SIZE))[:, sorted(keep)]
    return torch.softmax(logits, -1)


def _accept_once(probs, keep, last, future, steps, topk, num_draft):
    """Tokens one verify cycle yields (accepted drafts + bonus), replaying
    SGLang's tree: beams of `topk`, top (num_draft-1) nodes kept."""
    ids = sorted(keep)
    nodes = []  # (score, token, parent node index or -1)
    beams = [(1.0, last, -1)]
    for _ in range(steps):
        cand = []
        for score, tok, node in beams:
            p, idx = probs[tok].topk(topk)
            for pi, di in zip(p.tolist(), idx.tolist()):
                cand.append((score * pi, ids[di], node))
        base = len(nodes)
        nodes.extend(cand)
        order = sorted(range(len(cand)), key=lambda i: -cand[i][0])[:topk]
        beams = [(cand[i][0], cand[i][1], base + i) for i in order]
    chosen = set(sorted(range(len(nodes)), key=lambda i: -nodes[i][0])[: num_draft - 1])
    parent, n = -1, 0
    while n < len(future):
        nxt = [i for i in chosen if nodes[i][2] == parent and nodes[i][1] == future[n]]
        if not nxt:
            break
        parent, n = nxt[0], n + 1
    return figures.per_cycle(n)  # n correct drafts and the bonus token


def _replay(probs, keep, runs, steps, topk, num_draft, new_tokens):
    """SGLang's spec_accept_length (completion tokens / verify cycles) over runs.
    Matched SGLang 0.5.23's (v2 worker) and 0.5.10.post1's (v1 worker) per-request
    values exactly on the demo prompts."""
    tokens = cycles = 0
    for _prompt, gen in runs:
        gen = gen[:new_tokens]
        pos = 1  # the first token comes from prefill
        while pos < len(gen):
            pos += _accept_once(probs, keep, gen[pos - 1], gen[pos:], steps, topk, num_draft)
            cycles += 1
        tokens += len(gen)
    return round(figures.from_counts(tokens, max(cycles, 1)) or 0.0, 3)


# ---------------------------------------------------------------- build


def _paths(out: Path) -> dict:
    return {name: str(out / name) for name in ("target", *DRAFTS)}


def _up_to_date(out: Path) -> bool:
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("build_version") == BUILD_VERSION and all(
        (Path(p) / "config.json").is_file() for p in _paths(out).values()
    )


def build(out_dir, force: bool = False) -> dict:
    """Build tokenizer, target and drafts into out_dir; returns name -> path.

    Idempotent: an existing manifest of this BUILD_VERSION is reused unless force.
    Concurrent callers (e.g. parallel test workers) serialise on a lock file.
    Each BUILD_VERSION has its own subdirectory (out_dir/vN): a server still
    running on an older build never sees its files swapped.
    """
    import fcntl

    out = Path(out_dir).resolve() / f"v{BUILD_VERSION}"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if force or not _up_to_date(out):
            _build(out)
    return _paths(out)


def _build(out: Path) -> None:
    import torch

    torch.manual_seed(SEED)
    (out / "manifest.json").unlink(missing_ok=True)  # stale until rewritten below
    # Build beside the final place, then swap in: a crash leaves no half model.
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
    try:
        target_dir = tmp / "target"
        tok = _build_tokenizer(target_dir)
        target = _build_target(target_dir, tok)
        runs = _greedy(target, tok)
        if any(t < len(SPECIAL_TOKENS) for _, gen in runs for t in gen):
            raise RuntimeError("the target emits a special token: outputs lose their fixed length")
        vocabs = _vocabularies(target, runs)
        accept = {}
        for name, keep in vocabs.items():
            _write_draft(tmp / name, target, keep)
            probs = _draft_probs(target, keep)
            accept[name] = {
                f"{s},{k},{n}": [
                    _replay(probs, keep, [run], s, k, n, SIM_NEW_TOKENS) for run in runs
                ]
                for s, k, n in SIM_SETTINGS
            }
        for name in ("target", *DRAFTS):
            final = out / name
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp / name, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    manifest = {
        "build_version": BUILD_VERSION,
        "seed": SEED,
        "paths": {name: name for name in ("target", *DRAFTS)},  # relative to the manifest
        "target": {
            "vocab_size": VOCAB_SIZE,
            "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS,
            "embed_scale": EMBED_SCALE,
            "eos_token_id": EOS,
        },
        "eagle_aux_hidden_state_layer_ids": AUX_LAYER_IDS,
        "draft_vocab_size": {name: len(v) for name, v in vocabs.items()},
        # Target token ids each draft can propose (draft-mostly: all ordinary ids).
        "draft_tokens": {name: v for name, v in vocabs.items() if name != "draft-mostly"},
        "demo_prompts": DEMO_PROMPTS,
        # Greedy continuations measured with transformers (prompt ids, new ids).
        "greedy": [{"prompt_ids": p, "new_ids": g} for p, g in runs],
        # SGLang's meta_info spec_accept_length (completion tokens / verify cycles)
        # replayed per demo prompt for greedy requests of SIM_NEW_TOKENS tokens:
        # draft -> "steps,topk,num_draft_tokens" -> one value per DEMO_PROMPTS entry.
        "expected_accept_length": accept,
        "expected_accept_new_tokens": SIM_NEW_TOKENS,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    means = {d: {k: round(sum(v) / len(v), 2) for k, v in a.items()} for d, a in accept.items()}
    _log(f"built into {out}; mean accept lengths {json.dumps(means)}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.out_dir, force=args.force), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
