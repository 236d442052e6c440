"""Chain verifies at a decode's cost on the Triton attention backend.

On the Triton backend SGLang verifies a speculative step on the prefill kernel
(`extend_attention_fwd`: one program per request and head walking the whole prefix
serially), even the one-token "verify" of a 0-step adaptive cycle. It ships split-KV
verify kernels for topk-1 chains (the grouped-head `verify_shared_kv_fwd` for absorbed
MLA such as Kimi-K2.5 and for GQA with power-of-two groups; the per-head
`verify_splitkv_fwd` for MHA/GQA) that fall back by themselves for what they cannot serve,
but dispatches them on AMD gfx95 only. Here, for every backend whose speculation is a
chain (topk 1):

- target verify (every chain step count) takes SGLang's own split-KV dispatch: the
  backend's switch is set after its __init__, and the kernel it calls tries the
  grouped-head kernel, then the per-head one (each's own can_handle; the per-head one
  first for MHA, where no query heads share a KV head), then says no (the extend kernel
  runs it). The grouped-head kernel's split partials are fp32 here for
  GQA (SGLang's are bf16: kept for MLA, whose scratch is large), so on GQA both differ
  from the extend kernel by reassociation only;
- the draft's draft-extend after a verify (DRAFT_EXTEND_V2: a constant-length causal
  chain per request over a prefix that is never empty, no custom mask) goes to the same
  kernels, in front of the backend's extend kernel. Only that mode: a prefill's extend
  can have an empty prefix, where SGLang's split-KV kernel returns NaN;
- a forward of one token per request (a 0-step verify, the draft-extend after it) is a
  decode: its metadata is built by SGLang's decode branch over prefix + token, and each
  layer runs the backend's forward_decode (SGLang's decode path and kernel), in eager
  forwards (a captured CUDA graph keeps SGLang's metadata: the split-KV verify kernel,
  a flash decode at one token). MLA backends keep the grouped-head kernel there.

Anything a kernel declines (ragged, sliding window, sinks, logit cap, paged KV,
score_mod) runs the extend kernel as before. The per-head kernel's scratch is zeroed when
allocated (SGLang leaves it uninitialised; a short prefix's empty split turns that into
NaN). A tree (topk > 1) is never touched: its mask is not causal.

EAGLE_EXT_CHAIN_VERIFY: "1" turns it on with SGLang's launch parameters (split count
by context length, its block sizes: tuned for MI350X, unmeasured on SM120 and Hopper);
"splits=N,block-n=M" sets them (the CPU harness's one-split rule, as its decode kernel
runs: launch/overlays/cpu.toml); "0" or unset: off. Installed in every scheduler
process (its FEATURE in the in-process registry), through the patching base: version
gated by the release table (`Release.chain_verify`), idempotent, reversible, fail
closed with one log line (an unknown release, a release without the kernels such as
0.5.10.post1's v1 worker, a missing anchor: the stock path). Nothing here synchronizes
the GPU: every decision reads shapes and Python scalars (the one-token test reads the
CPU copies SGLang keeps of the extend lengths).
"""

from __future__ import annotations

import inspect
import logging
import weakref

from sgl_eagle_ext.common.contract import CHAIN_VERIFY_ENV
from sgl_eagle_ext.common.contract import parse_chain_verify as parse
from sgl_eagle_ext.in_sglang_base import patching, registry

PATCHES = patching.Patches(CHAIN_VERIFY_ENV, logger="sgl_eagle_ext.chain_verify")

# Positional layout shared by extend_attention_fwd and both verify kernels.
_MASK, _CAUSAL, _MAX_LEN = 9, 10, 12
# extend_attention_fwd keywords the verify kernels do not take, and the value each must
# have for the two to compute the same thing (anything else: the extend kernel).
_EXTEND_ONLY = {
    "page_size": 1,
    "score_mod": None,
    "aux_tensors": None,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "identity_kv_indices": False,
    "extend_seq_lens_cpu": ...,  # informational: any value
}

# Set on a backend by its forward_extend for the call in progress: a draft-extend after a
# verify (the only extend the draft-extend dispatch serves).
_IN_DRAFT_EXTEND = "_eagle_ext_in_draft_extend"
# On a backend that may run one-token forwards as decodes (_enable), and, per forward,
# (the decode metadata, SGLang's own metadata it stands in for).
_DECODE_OK = "_eagle_ext_decode_ok"
_DECODE_META = "_eagle_ext_decode_meta"
# forward_extend's parameters, in order (SGLang's signature, every release in the table)
_EXTEND_ARGS = ("q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks")
_said: set[tuple[str, str, int]] = set()  # (role, kernel, tokens per request) told once
# Backends switched here -> their attributes as SGLang set them (uninstall restores them).
_switched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tell(role: str, kernel: str, tokens: int, ran: bool) -> None:
    key = (role if ran else role + " declined", kernel, tokens)
    if key in _said:
        return
    _said.add(key)
    if ran:
        PATCHES.say(
            logging.INFO,
            f"{CHAIN_VERIFY_ENV}: {role} on {kernel} ({tokens} token(s) per request)",
        )
    else:
        PATCHES.say(
            logging.INFO,
            f"{CHAIN_VERIFY_ENV}: {kernel} declined a {role} of {tokens} token(s) per "
            "request: the extend kernel runs it",
        )


class _Told:
    """Verify kernels as the backend's own target-verify dispatch calls one: the same
    call to each in turn until one serves it (its own can_handle), and one line the
    first time each chain length runs on a kernel (or is declined by all)."""

    def __init__(self, kernels: list[tuple[str, object]], role: str):
        self.kernels, self.role = kernels, role
        self.name = " / ".join(name for name, _ in kernels)

    def _order(self, args) -> list:
        """The grouped-head kernel first where query heads share a KV head (GQA, absorbed
        MLA); for MHA (one query head per KV head) the per-head one: the grouped kernel
        would run one head per program padded to 16 rows, at 4x the scratch."""
        try:
            shared = args[0].shape[1] > args[1].shape[1]
        except (AttributeError, IndexError, TypeError):
            shared = True
        return self.kernels if shared else self.kernels[::-1]

    def __call__(self, *args, **kwargs):
        tokens = int(args[_MAX_LEN]) if len(args) > _MAX_LEN else None
        for name, kernel in self._order(args):
            if kernel(*args, **kwargs):
                if tokens is not None:
                    _tell(self.role, name, tokens, True)
                return True
        if tokens is not None:
            _tell(self.role, self.name, tokens, False)
        return False


class _ChainExtend:
    """The backend's extend kernel with the verify kernel(s) in front of it for a
    constant-length causal chain without a custom mask (the draft's draft-extend after
    a chain verify): pure causal attention over prefix + chain, which a verify kernel
    computes (its can_handle checks the rest)."""

    def __init__(self, backend, extend, kernel: _Told):
        self.backend, self.extend, self.kernel = backend, extend, kernel
        self.takes = set.intersection(
            *(
                set(inspect.signature(getattr(k, "__wrapped__", k)).parameters)
                for _, k in kernel.kernels
            )
        )

    def _verify_kwargs(self, kwargs):
        out = {}
        for key, value in kwargs.items():
            if key in self.takes:
                out[key] = value
            elif key not in _EXTEND_ONLY:
                return None  # a keyword this module does not know: the extend kernel
            elif _EXTEND_ONLY[key] is not ... and value != _EXTEND_ONLY[key]:
                return None
        if "max_bs" in self.takes:
            pool = getattr(self.backend, "req_to_token_pool", None)
            out["max_bs"] = getattr(pool, "size", None)
        return out

    def __call__(self, *args, **kwargs):
        chain = PATCHES.installed and vars(self.backend).get(_IN_DRAFT_EXTEND, False)
        if chain and len(args) > _MAX_LEN and args[_MASK] is None and args[_CAUSAL]:
            try:
                tokens = int(args[_MAX_LEN])
            except (TypeError, ValueError):
                tokens = 0
            longest = max(int(getattr(self.backend, "num_draft_tokens", 0) or 0), 1)
            kw = self._verify_kwargs(kwargs) if 1 <= tokens <= longest else None
            if kw is not None and self.kernel(*args, **kw):
                return None
        return self.extend(*args, **kwargs)


def zero_partials(wrapped, kernel, args, kwargs):
    """After VerifySplitKV._alloc: its partials zeroed. With several splits a prefix
    shorter than the splits leaves some empty; the combine weights them 0, and 0 times
    whatever torch.empty left there (NaN, Inf) is NaN in the output. Once per
    allocation (scratch is sized by the request pool and reused), a memset."""
    result = wrapped(*args, **kwargs)
    out = getattr(kernel, "att_out", None)
    if out is not None:
        out.zero_()
    return result


def fp32_partials(wrapped, kernel, args, kwargs):
    """After VerifyMLA._alloc for GQA (head dims equal): its split partials in fp32,
    zeroed. SGLang keeps them in bf16 ("halves scratch traffic"), one more bf16 rounding
    than the extend kernel's; the kernel stores in the scratch's dtype, so fp32 scratch
    makes it differ from the extend kernel by reassociation only. Absorbed MLA (576/512)
    keeps SGLang's bf16: there the scratch is ~1 MiB per request slot per chain length
    per rank in bf16, and doubling it is memory the GPU host's plan does not have
    (docs/chain-verify.md)."""
    import torch  # in a scheduler process, where SGLang has loaded it

    result = wrapped(*args, **kwargs)
    out = getattr(kernel, "att_out", None)
    if out is not None and getattr(kernel, "head_dim", 0) == getattr(kernel, "v_head_dim", -1):
        kernel.att_out = torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    return result


def _one_token_prefix(batch, cv):
    """The prefix lengths (a tensor) and their sum (or None) of a forward that is a
    decode in all but name: a topk-1 target verify of one token per request (a 0-step
    cycle) or a draft-extend after a verify of one accepted token per request (its
    prefix is never empty). None for anything else."""
    mode = batch.forward_mode
    bs = batch.batch_size
    if mode.is_target_verify():
        if getattr(batch.spec_info, "draft_token_num", None) != 1:
            return None
        total = batch.seq_lens_sum
        return batch.seq_lens[:bs], None if total is None else int(total)
    draft_extend = getattr(mode, cv.mode, None)
    if draft_extend is None or not draft_extend():
        return None
    lens, prefix_cpu = batch.extend_seq_lens_cpu, batch.extend_prefix_lens_cpu
    if not lens or any(int(n) != 1 for n in lens) or batch.extend_prefix_lens is None:
        return None
    total = None if prefix_cpu is None else int(sum(prefix_cpu))
    return batch.extend_prefix_lens[:bs], total


def decode_metadata(wrapped, backend, args, kwargs):
    """After init_forward_metadata: for a one-token forward (_one_token_prefix), the
    decode's metadata as well, built by SGLang's own decode branch over the prefix and
    the new token (its KV location is in the request's token table before the forward,
    as a decode's is). forward_extend then runs it as SGLang runs a decode."""
    result = wrapped(*args, **kwargs)
    state = vars(backend)
    state.pop(_DECODE_META, None)
    if not (PATCHES.installed and state.get(_DECODE_OK)):
        return result
    batch = args[0] if args else kwargs.get("forward_batch")
    cv = state[_DECODE_OK]
    found = _one_token_prefix(batch, cv)
    if found is None:
        return result
    prefix, total = found
    stock = backend.forward_metadata
    saved = {
        a: getattr(batch, a) for a in ("forward_mode", "spec_info", "seq_lens", "seq_lens_sum")
    }
    try:
        batch.forward_mode = type(batch.forward_mode).DECODE
        batch.spec_info = None
        batch.seq_lens = prefix + 1
        batch.seq_lens_sum = None if total is None else total + len(prefix)
        wrapped(batch)
    except Exception as e:  # fail closed: this forward and the next keep SGLang's path
        state.pop(_DECODE_OK, None)
        PATCHES.say(
            logging.WARNING,
            f"{CHAIN_VERIFY_ENV}: the decode metadata for a one-token forward failed "
            f"({type(e).__name__}: {e}); one-token forwards stay on the verify kernels",
        )
        backend.forward_metadata = stock
        return result
    finally:
        for a, value in saved.items():
            setattr(batch, a, value)
    state[_DECODE_META] = (backend.forward_metadata, stock)
    backend.forward_metadata = stock
    return result


def _decodable(call: dict) -> bool:
    """A layer's forward_extend call that forward_decode computes the same way: its own
    K/V given (saved first by both), plain causal self-attention, no extend-only feature."""
    layer = call.get("layer")
    if call.get("k") is None or call.get("v") is None or layer is None:
        return False
    if call.get("score_mod") is not None or call.get("aux_tensors") is not None:
        return False
    window = getattr(layer, "sliding_window_size", None)
    kind = getattr(getattr(layer, "attn_type", None), "name", "DECODER")
    return (
        (window is None or window < 0)
        and kind == "DECODER"
        and not getattr(layer, "is_cross_attention", False)
        and layer.qk_head_dim == layer.v_head_dim
    )


def _as_decode(backend, wrapped, args, kwargs):
    """A forward_extend call of a one-token forward: forward_decode on the decode
    metadata where the layer allows (_decodable), else the extend path on SGLang's."""
    decode, stock = vars(backend)[_DECODE_META]
    call = dict(zip(_EXTEND_ARGS, args))
    call.update(kwargs)
    batch = call["forward_batch"]
    role = "target verify" if batch.forward_mode.is_target_verify() else "draft-extend"
    backend.forward_metadata = decode
    try:
        if _decodable(call):
            _tell(role, "the decode kernel", 1, True)
            return backend.forward_decode(
                call["q"],
                call["k"],
                call["v"],
                call["layer"],
                batch,
                save_kv_cache=call.get("save_kv_cache", True),
                sinks=call.get("sinks"),
            )
        backend.forward_metadata = stock
        return wrapped(*args, **kwargs)
    finally:
        backend.forward_metadata = stock


def _enable(backend, cv) -> None:
    """After TritonAttnBackend.__init__: chain (topk 1) backends verify on split-KV."""
    if getattr(backend, "topk", 0) != 1:
        return  # no speculation, or a tree: the extend kernel (its mask is not causal)
    # The grouped-head kernel first where the release has it (MLA; GQA whose query
    # heads per KV head are a power of two: one program per KV-head group, not per
    # query head), then the per-head split-KV kernel (MHA/GQA; it refuses MLA).
    pairs = ([cv.shared_kv] if cv.shared_kv else []) + [cv.splitkv]
    if getattr(backend, "use_mla", False) and cv.shared_kv is None:
        _tell("MLA target verify", "no MLA verify kernel in this release", 0, False)
        return
    kernels = [(attr, getattr(backend, attr, None)) for _, attr in pairs]
    extend = getattr(backend, cv.extend, None)
    if extend is None or any(k is None for _, k in kernels):
        PATCHES.refuse(f"the Triton backend has no {' / '.join(a for a, _ in kernels)}")
        return
    switch, kernel_attr = pairs[0]
    _switched[backend] = {a: getattr(backend, a) for a in (switch, kernel_attr, cv.extend)}
    plain = (
        not getattr(backend, "use_mla", False)  # MLA: the grouped-head verify kernel
        and getattr(backend, "dcp_size", 1) == 1
        and (getattr(backend, "sliding_window_size", None) or 0) <= 0
        and getattr(backend, "dllm_attention", None) is None
        and not getattr(backend, "enable_deterministic", False)
    )
    if plain:
        vars(backend)[_DECODE_OK] = cv
    setattr(backend, switch, True)  # SGLang's dispatch calls that attribute: the list
    setattr(backend, kernel_attr, _Told(kernels, "target verify"))
    setattr(backend, cv.extend, _ChainExtend(backend, extend, _Told(kernels, "draft-extend")))


def install(params: dict[str, int], version: str | None = None) -> bool:
    """Wrap the Triton backend's __init__ (and set the launch parameters); True when
    installed (now or before)."""
    if PATCHES.installed:
        return True
    found = PATCHES.part(
        "chain_verify",
        "ships no split-KV verify kernel: chain verifies stay on the extend kernel",
        version,
    )
    if found is None:
        return False
    release, cv = found

    def after_init(wrapped, backend, args, kwargs):
        result = wrapped(*args, **kwargs)
        _enable(backend, cv)
        return result

    def note_mode(wrapped, backend, args, kwargs):
        meta = vars(backend).get(_DECODE_META)
        if PATCHES.installed and meta is not None and meta[1] is backend.forward_metadata:
            return _as_decode(backend, wrapped, args, kwargs)
        batch = kwargs.get("forward_batch", args[4] if len(args) > 4 else None)
        mode = getattr(getattr(batch, "forward_mode", None), cv.mode, None)
        vars(backend)[_IN_DRAFT_EXTEND] = bool(mode and mode())
        return wrapped(*args, **kwargs)

    plan: list = [
        patching.Wrap(f"{cv.backend}.__init__", after_init, label="verify switches"),
        # in a CUDA-graph capture too: the draft-extend graph is captured through it
        patching.Wrap(
            f"{cv.backend}.{cv.forward_extend}", note_mode, label="draft-extend", in_capture=True
        ),
        # eager forwards only: a captured graph keeps SGLang's metadata (split-KV verify)
        patching.Wrap(
            f"{cv.backend}.{cv.init_metadata}", decode_metadata, label="one-token decode"
        ),
        patching.Wrap(
            f"{cv.splitkv_module}:{cv.splitkv_alloc}",
            zero_partials,
            label="split-KV scratch",
            in_capture=True,
        ),
    ]
    if cv.shared_kv_module:
        plan.append(
            patching.Wrap(
                f"{cv.shared_kv_module}:{cv.shared_kv_alloc}",
                fp32_partials,
                label="grouped-head scratch",
                in_capture=True,
            )
        )
    modules = [m for m in (cv.splitkv_module, cv.shared_kv_module) if m]
    if "splits" in params:
        n = params["splits"]
        plan += [patching.Set(f"{m}:MAX_N_SPLITS", n, label="split count") for m in modules]
        plan.append(patching.Set(f"{cv.splitkv_module}:MIN_N_SPLITS", n, label="split count"))
    if "block-n" in params:
        plan += [
            patching.Set(f"{m}:DEFAULT_BLOCK_N", params["block-n"], label="KV block")
            for m in modules
        ]
    launch = ", ".join(f"{k}={v}" for k, v in params.items()) or "SGLang's launch parameters"
    return PATCHES.install(
        plan,
        release=release.version,
        on=f"on (topk-1 chains: target verify and draft-extend on split-KV; {launch})",
    )


def uninstall() -> None:
    """Backends built meanwhile get SGLang's attributes back; later ones are stock."""
    PATCHES.uninstall()
    for backend, attrs in list(_switched.items()):
        for name, value in attrs.items():
            setattr(backend, name, value)
        for name in (_DECODE_OK, _DECODE_META):
            vars(backend).pop(name, None)
    _switched.clear()
    _said.clear()


def install_from_env(env) -> bool:
    try:
        params = parse(env.get(CHAIN_VERIFY_ENV, ""))
    except ValueError as e:
        return PATCHES.refuse(f"{CHAIN_VERIFY_ENV}={env.get(CHAIN_VERIFY_ENV)!r}: {e}")
    return False if params is None else install(params)


FEATURE = registry.register(
    registry.Feature(
        CHAIN_VERIFY_ENV,
        enabled=lambda env: bool(env.get(CHAIN_VERIFY_ENV, "").strip()),
        hooks={registry.SCHEDULER: lambda ctx: install_from_env(ctx.env)},
        # after the platform fixes (the CPU harness's stand-ins), before the model runner
        # builds its attention backends
        order=registry.PLATFORM + 5,
    )
)
