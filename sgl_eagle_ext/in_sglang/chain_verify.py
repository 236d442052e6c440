"""Chain verifies on SGLang's split-KV verify kernels (Triton attention backend).

On the Triton backend SGLang verifies a speculative step on the prefill kernel
(`extend_attention_fwd`: one program per request and head walking the whole prefix
serially), even the one-token "verify" of a 0-step adaptive cycle. It ships split-KV
verify kernels for topk-1 chains (`verify_splitkv_fwd` for MHA/GQA, the grouped-head
`verify_shared_kv_fwd` for absorbed MLA such as Kimi-K2.5) that fall back by themselves
for what they cannot serve, but dispatches them on AMD gfx95 only. Here, for every
backend whose speculation is a chain (topk 1):

- target verify (every chain step count, 0 included) takes SGLang's own split-KV
  dispatch: the backend's switches are set after its __init__;
- the draft's draft-extend after a verify (DRAFT_EXTEND_V2: a constant-length causal
  chain per request over a prefix that is never empty, no custom mask) is put on the
  same kernel, in front of the backend's extend kernel. Only that mode: a prefill's
  extend can have an empty prefix, where SGLang's split-KV kernel returns NaN.
  The kernel's own `can_handle` decides; anything it declines (ragged, sliding window,
  sinks, logit cap, paged KV, score_mod) runs the extend kernel as before. The
  split-KV kernel's scratch is zeroed when allocated (SGLang leaves it uninitialised, and
  a short prefix's empty split turns that into NaN: found by the GPU check's tests). A tree
  (topk > 1) is never touched: its mask is not causal.

EAGLE_EXT_CHAIN_VERIFY: "1" turns it on with SGLang's launch parameters (split count
by context length, its block sizes: tuned for MI350X, unmeasured on SM120 and Hopper);
"splits=N,block-n=M" sets them (the CPU harness's one-split rule, as its decode kernel
runs: launch/overlays/cpu.toml); "0" or unset: off. Installed in every scheduler
process (its FEATURE in the in-process registry), through the patching base: version
gated by the release table (`Release.chain_verify`), idempotent, reversible, fail
closed with one log line (an unknown release, a release without the kernels such as
0.5.10.post1's v1 worker, a missing anchor: the stock path). Nothing here synchronizes
the GPU: every decision reads shapes and Python scalars, so it is also safe inside a
CUDA-graph capture.
"""

from __future__ import annotations

import inspect
import logging
import weakref

from sgl_eagle_ext.common.contract import CHAIN_VERIFY_ENV
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
_said: set[tuple[str, str, int]] = set()  # (role, kernel, tokens per request) told once
# Backends switched here -> their attributes as SGLang set them (uninstall restores them).
_switched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def parse(text: str) -> dict[str, int] | None:
    """The switch's value -> launch parameters ({} = SGLang's own); None: off.
    ValueError for anything else."""
    text = text.strip()
    if text in ("", "0", "off"):
        return None
    if text in ("1", "on"):
        return {}
    params = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if key not in ("splits", "block-n") or not sep or not value.strip().isdigit():
            raise ValueError(f"{part.strip()!r} is not splits=N or block-n=M")
        n = int(value)
        if n < 1 or n & (n - 1) or n > 1024:
            raise ValueError(f"{key}={n} is not a power of two from 1 to 1024")
        params[key] = n
    return params


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
    """A verify kernel as the backend's own target-verify dispatch calls it: the same
    call, and one line the first time each chain length runs (or is declined)."""

    def __init__(self, kernel, name: str, role: str):
        self.kernel, self.name, self.role = kernel, name, role

    def __call__(self, *args, **kwargs):
        ran = self.kernel(*args, **kwargs)
        if len(args) > _MAX_LEN:
            _tell(self.role, self.name, int(args[_MAX_LEN]), bool(ran))
        return ran


class _ChainExtend:
    """The backend's extend kernel with the verify kernel in front of it for a
    constant-length causal chain without a custom mask (the draft's draft-extend after
    a chain verify): pure causal attention over prefix + chain, which the verify kernel
    computes (its can_handle checks the rest)."""

    def __init__(self, backend, extend, kernel, name: str):
        self.backend, self.extend, self.kernel, self.name = backend, extend, kernel, name
        self.takes = set(inspect.signature(getattr(kernel, "__wrapped__", kernel)).parameters)

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
            if kw is not None:
                ran = self.kernel(*args, **kw)
                _tell("draft-extend", self.name, tokens, bool(ran))
                if ran:
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


def _enable(backend, cv) -> None:
    """After TritonAttnBackend.__init__: chain (topk 1) backends verify on split-KV."""
    if getattr(backend, "topk", 0) != 1:
        return  # no speculation, or a tree: the extend kernel (its mask is not causal)
    if getattr(backend, "use_mla", False):
        if cv.shared_kv is None:
            _tell("MLA target verify", "no MLA verify kernel in this release", 0, False)
            return
        switch, kernel_attr = cv.shared_kv
    else:
        switch, kernel_attr = cv.splitkv
    kernel = getattr(backend, kernel_attr, None)
    extend = getattr(backend, cv.extend, None)
    if kernel is None or extend is None:
        PATCHES.refuse(f"the Triton backend has no {kernel_attr} / {cv.extend}")
        return
    _switched[backend] = {a: getattr(backend, a) for a in (switch, kernel_attr, cv.extend)}
    setattr(backend, switch, True)
    setattr(backend, kernel_attr, _Told(kernel, kernel_attr, "target verify"))
    setattr(backend, cv.extend, _ChainExtend(backend, extend, kernel, kernel_attr))


def install(params: dict[str, int], version: str | None = None) -> bool:
    """Wrap the Triton backend's __init__ (and set the launch parameters); True when
    installed (now or before)."""
    if PATCHES.installed:
        return True
    release = PATCHES.release(version)
    if release is None:
        return False
    cv = release.chain_verify
    if cv is None:
        return PATCHES.refuse(
            f"SGLang {release.version} ships no split-KV verify kernel: chain verifies "
            "stay on the extend kernel"
        )

    def after_init(wrapped, backend, args, kwargs):
        result = wrapped(*args, **kwargs)
        _enable(backend, cv)
        return result

    def note_mode(wrapped, backend, args, kwargs):
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
        patching.Wrap(
            f"{cv.splitkv_module}:{cv.splitkv_alloc}",
            zero_partials,
            label="split-KV scratch",
            in_capture=True,
        ),
    ]
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
