"""Chain verifies on SGLang's split-KV verify kernels (in_sglang/chain_verify.py).

Kernel level: SGLang's own `verify_splitkv_fwd` (MHA/GQA) and `verify_shared_kv_fwd`
(absorbed MLA, 576/512 like Kimi-K2.5's) against its `extend_attention_fwd` on topk-1
verify shapes, run by Triton's interpreter in a child process (TRITON_INTERPRET must be
set before the kernels are defined): contexts 1 to 4096, batches 1 to 8 with ragged
prefixes, chains of 1 to 6 tokens, with the harness's launch parameters and with
SGLang's own; the split-KV kernel's scratch zeroed as the project's wrapper does (SGLang
leaves it uninitialised: test_empty_splits_of_a_short_prefix_are_zeroed). Each kernel
earns its tolerance: fp32 partials differ from the extend
kernel by reassociation only; the MLA kernel keeps its split partials in bf16, one bf16
rounding (unit roundoff 2^-8) of a convex combination of V rows (bound: 2^-8 x max |V|).

Decisions: which calls the draft-extend dispatch sends to the verify kernel (a
constant-length causal chain, nothing else), the switch's grammar, and the one refusal
line for a release without the kernels. Servers: tests/test_chain_verify_server.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.in_sglang import chain_verify

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "chain_kernels.py"
STANDIN = ROOT / "sgl_eagle_ext" / "cpu" / "standin"
HARNESS = {"MAX_N_SPLITS": 1, "MIN_N_SPLITS": 1, "DEFAULT_BLOCK_N": 128}  # cpu.toml

GQA = [  # (bs, h_q, h_kv, head dim, prefixes, chain, launch parameters)
    (1, 4, 2, 16, [1], 1, HARNESS),
    (1, 4, 2, 16, [4096], 4, HARNESS),
    (8, 4, 2, 16, [1, 3, 17, 64, 100, 250, 31, 8], 6, HARNESS),
    (3, 8, 1, 64, [1000, 5, 333], 3, HARNESS),
    (2, 4, 4, 32, [2000, 700], 2, {}),  # SGLang's own: 4 splits of 32 keys
    (1, 4, 2, 16, [4100], 5, {}),  # 8 splits past 4k
    (4, 4, 2, 16, [9, 90, 900, 1], 1, {}),  # a 0-step verify: one token per request
]
MLA = [  # Kimi-K2.5 at TP 8: 8 query heads per rank on one 576-wide latent row
    (1, 8, 1, 576, [1], 1, {}),
    (2, 8, 1, 576, [64, 1500], 4, {}),
    (4, 8, 1, 576, [5, 40, 300, 2], 6, {"MAX_N_SPLITS": 1}),  # the harness's one split
]
# The grouped-head kernel on GQA (query heads per KV head a power of two): the tiny
# target (4/2, 16 wide), its draft (1/1, 64 wide), one KV head per rank at TP 2
GROUPED = [
    (1, 4, 2, 16, [1], 1, HARNESS),
    (8, 4, 2, 16, [1, 3, 17, 64, 100, 250, 31, 8], 4, HARNESS),
    (2, 1, 1, 64, [700, 9], 3, HARNESS),
    (3, 2, 1, 16, [4096, 5, 40], 6, {}),  # SGLang's own launch parameters
]


def run_driver(cases: list[dict]) -> list[dict]:
    env = dict(os.environ, TRITON_INTERPRET="1", SGLANG_USE_CPU_ENGINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(ROOT)])
    out = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def as_cases(kernel: str, shapes) -> list[dict]:
    return [
        {
            "kernel": kernel,
            "bs": bs,
            "h_q": hq,
            "h_kv": hkv,
            "dk": d,
            "dv": 512 if d == 576 else d,
            "prefixes": prefixes,
            "chain": chain,
            "params": params,
            "seed": i,
        }
        for i, (bs, hq, hkv, d, prefixes, chain, params) in enumerate(shapes)
    ]


@pytest.mark.parametrize(
    "kernel, shapes", [("splitkv", GQA), ("shared_kv", MLA), ("shared_kv", GROUPED)]
)
def test_split_kv_verify_equals_the_extend_kernel(kernel, shapes):
    """The project's path: fp32 partials (reassociation only: 2e-5), but absorbed MLA's
    bf16 ones (one bf16 rounding of V: 2^-8 x max |V|)."""
    cases = as_cases(kernel, shapes)
    for case, result in zip(cases, run_driver(cases), strict=True):
        assert result["served"], case  # the kernel took the shape: no silent fallback
        assert result["max_diff"] <= result["bound"], (case, result)
        assert (result["bound"] == 2e-5) == (case["dk"] == case["dv"]), (case, result)


def test_sglangs_bf16_partials_on_gqa_are_one_rounding_off():
    """SGLang's own grouped-head scratch (bf16 partials, the wrapper off) on the tiny
    target's GQA shape: within one bf16 rounding of V, and further off than the
    project's fp32 scratch."""
    cases = as_cases("shared_kv", GROUPED[1:2])
    stock, fixed = (run_driver([{**c, "fixed": f} for c in cases])[0] for f in (False, True))
    assert stock["served"] and stock["max_diff"] <= stock["bound"] != 2e-5, stock
    assert fixed["max_diff"] <= 2e-5 < stock["max_diff"], (fixed, stock)


def test_empty_splits_of_a_short_prefix_are_zeroed():
    """SGLang's split-KV kernel leaves a split that a short prefix does not reach
    unwritten (4 splits of 32 keys: prefixes of 96 or fewer) and weights it 0 in its
    combine; scratch that held NaN (torch.empty on a GPU) then gives NaN. The project's
    wrapper zeroes the scratch when SGLang allocates it."""
    shape = [(2, 4, 2, 16, [16, 96], 4, {})]  # SGLang's own launch parameters: 4 splits
    stock, fixed = (
        run_driver([{**c, "poison": True, "fixed": f} for c in as_cases("splitkv", shape)])[0]
        for f in (False, True)
    )
    assert stock["finite"] is False  # the hazard is real in the stock kernel
    assert fixed["finite"] is True and fixed["max_diff"] <= fixed["bound"], fixed


# --- the draft-extend dispatch --------------------------------------------------------


class Pool:
    size = 16


class Backend:
    num_draft_tokens = 4
    req_to_token_pool = Pool()


def fake_kernel(log):
    def verify(q, k, v, o, kb, vb, qo, kvp, kvi, mask, causal, mip, max_len, ks, vs, *rest,
               sm_scale=None, logit_cap=0.0, sliding_window_size=-1, sinks=None,
               window_kv_offsets=None, xai_temperature_len=-1, max_bs=None):  # fmt: skip
        log.append(("verify", max_len, max_bs))
        return True

    return verify


def chain_args(mask=None, causal=True, max_len=4):
    return ("q", "k", "v", "o", "kb", "vb", "qo", "kvp", "kvi", mask, causal, "mip", max_len, 1, 1)


@pytest.fixture
def dispatch(monkeypatch):
    monkeypatch.setattr(chain_verify.PATCHES, "_installed", [object()])  # as if installed
    log = []
    backend = Backend()
    vars(backend)[chain_verify._IN_DRAFT_EXTEND] = True  # its forward_extend saw DRAFT_EXTEND_V2
    kernels = chain_verify._Told([("verify", fake_kernel(log))], "draft-extend")
    extend = chain_verify._ChainExtend(
        backend, lambda *a, **k: log.append(("extend", a[12])), kernels
    )
    return extend, log


class Heads:
    def __init__(self, n):
        self.shape = (4, n, 16)


def test_mha_tries_the_per_head_kernel_first():
    """Query heads sharing a KV head (GQA, absorbed MLA): the grouped-head kernel
    first; MHA: the per-head one (the grouped kernel pads one head to 16 rows)."""
    calls = []
    told = chain_verify._Told(
        [("grouped", lambda *a, **k: calls.append("grouped")), ("per-head", lambda *a, **k: calls.append("per-head") or True)],
        "draft-extend",
    )  # fmt: skip
    gqa = (Heads(4), Heads(2), *chain_args()[2:])
    mha = (Heads(2), Heads(2), *chain_args()[2:])
    assert told(*gqa) and calls == ["grouped", "per-head"]
    calls.clear()
    assert told(*mha) and calls == ["per-head"]


def test_the_kernels_are_tried_in_turn_and_told_once(monkeypatch):
    """The grouped-head kernel first, the per-head one when it declines, the extend
    kernel (False) when both do; one line per (kernel, chain length)."""
    lines = []
    monkeypatch.setattr(chain_verify.PATCHES, "sink", lines.append)
    monkeypatch.setattr(chain_verify, "_said", set())
    calls = []

    def kernel(name, serves):
        def run(*args, **kwargs):
            calls.append(name)
            return serves(args[12])

        return run

    told = chain_verify._Told(
        [("grouped", kernel("grouped", lambda n: n == 4)), ("per-head", kernel("per-head", lambda n: n < 4))],
        "target verify",
    )  # fmt: skip
    results = [told(*chain_args(max_len=n)) for n in (4, 2, 5, 4)]
    assert results == [True, True, False, True]
    assert calls == ["grouped", "grouped", "per-head", "grouped", "per-head", "grouped"]
    said = [line.split(": ", 1)[1] for line in lines]
    assert said == [
        "target verify on grouped (4 token(s) per request)",
        "target verify on per-head (2 token(s) per request)",
        "grouped / per-head declined a target verify of 5 token(s) per request: "
        "the extend kernel runs it",
    ]


def test_a_causal_chain_goes_to_the_verify_kernel(dispatch):
    extend, log = dispatch
    extend(*chain_args(max_len=4), 0.25, page_size=1, extend_seq_lens_cpu=[4])
    extend(*chain_args(max_len=1), 0.25, score_mod=None)
    assert log == [("verify", 4, 16), ("verify", 1, 16)]


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (chain_args(mask="tree mask"), {}),  # a custom mask: a tree, or a target verify
        (chain_args(causal=False), {}),
        (chain_args(max_len=5), {}),  # longer than any chain of this backend: a prefill
        (chain_args(), {"page_size": 16}),  # paged KV: the verify kernels are slot-based
        (chain_args(), {"score_mod": "mod"}),
        (chain_args(), {"something_new": 1}),  # a keyword from a later release
    ],
)
def test_anything_else_stays_on_the_extend_kernel(dispatch, args, kwargs):
    extend, log = dispatch
    extend(*args, **kwargs)
    assert log == [("extend", args[12])]


def test_a_prefill_stays_on_the_extend_kernel(dispatch):
    """Outside a draft-extend after a verify (a prefill: its prefix may be empty, where
    SGLang's split-KV kernel returns NaN) the same-shaped call runs the extend kernel."""
    extend, log = dispatch
    vars(extend.backend)[chain_verify._IN_DRAFT_EXTEND] = False
    extend(*chain_args(max_len=4))
    assert log == [("extend", 4)]


def test_uninstalled_dispatch_is_the_extend_kernel(monkeypatch):
    log = []
    kernels = chain_verify._Told([("verify", fake_kernel(log))], "draft-extend")
    extend = chain_verify._ChainExtend(Backend(), lambda *a, **k: log.append("extend"), kernels)
    monkeypatch.setattr(chain_verify.PATCHES, "_installed", [])
    extend(*chain_args())
    assert log == ["extend"]


# --- the switch -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, params",
    [
        ("", None),
        ("0", None),
        ("1", {}),
        ("splits=1,block-n=128", {"splits": 1, "block-n": 128}),
        ("block-n=64", {"block-n": 64}),
    ],
)
def test_switch_values(text, params):
    assert chain_verify.parse(text) == params


@pytest.mark.parametrize("text", ["splits=3", "splits=0", "blocks=4", "splits=", "yes"])
def test_bad_switch_values_are_refused(text):
    with pytest.raises(ValueError):
        chain_verify.parse(text)


def test_a_bad_switch_is_one_line_and_stock(monkeypatch):
    lines = []
    monkeypatch.setattr(chain_verify.PATCHES, "sink", lines.append)
    assert chain_verify.install_from_env({"EAGLE_EXT_CHAIN_VERIFY": "splits=3"}) is False
    assert len(lines) == 1 and "EAGLE_EXT_CHAIN_VERIFY" in lines[0] and "power of two" in lines[0]


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.13.post1", "0.4.0"])
def test_a_release_without_the_kernels_is_refused_with_one_line(monkeypatch, version):
    lines = []
    monkeypatch.setattr(chain_verify.PATCHES, "sink", lines.append)
    assert chain_verify.install({}, version=version) is False
    assert len(lines) == 1, lines
    assert not chain_verify.PATCHES.installed


# --- the one-token decode path --------------------------------------------------------


class Mode:
    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "verify"

    def is_draft_extend_v2(self):
        return self.name == "draft-extend"


Mode.DECODE = Mode("decode")


class Spec:
    draft_token_num = 1


class Batch:
    def __init__(self, mode="verify", tokens=1):
        import torch

        self.forward_mode, self.batch_size = Mode(mode), 2
        self.spec_info = Spec() if mode == "verify" else None
        if self.spec_info is not None:
            self.spec_info.draft_token_num = tokens
        self.seq_lens, self.seq_lens_sum = torch.tensor([5, 9]), 14
        self.extend_seq_lens_cpu, self.extend_prefix_lens_cpu = [tokens] * 2, [5, 9]
        self.extend_prefix_lens = torch.tensor([5, 9])


class MetaBackend:
    def __init__(self, fail=False):
        self.fail, self.built = fail, []
        vars(self)[chain_verify._DECODE_OK] = releases.ChainVerify()

    def init(self, batch):
        if batch.forward_mode.name == "decode" and self.fail:
            raise RuntimeError("boom")
        self.built.append((batch.forward_mode.name, batch.seq_lens.tolist(), batch.seq_lens_sum))
        self.forward_metadata = object()


@pytest.mark.parametrize("mode", ["verify", "draft-extend"])
def test_a_one_token_forward_also_gets_sglangs_decode_metadata(monkeypatch, mode):
    """Prefix + the token, as SGLang's decode branch sees a decode; the batch is given
    back as it was; SGLang's own metadata stays the backend's."""
    monkeypatch.setattr(chain_verify.PATCHES, "_installed", [object()])
    backend, batch = MetaBackend(), Batch(mode)
    chain_verify.decode_metadata(lambda b: backend.init(b), backend, (batch,), {})
    assert backend.built == [(mode, [5, 9], 14), ("decode", [6, 10], 16)]
    decode, stock = vars(backend)[chain_verify._DECODE_META]
    assert backend.forward_metadata is stock and decode is not stock
    assert batch.forward_mode.name == mode and batch.seq_lens.tolist() == [5, 9]


def test_longer_chains_get_no_decode_metadata(monkeypatch):
    monkeypatch.setattr(chain_verify.PATCHES, "_installed", [object()])
    for batch in (Batch("verify", tokens=3), Batch("draft-extend", tokens=3), Batch("prefill")):
        backend = MetaBackend()
        chain_verify.decode_metadata(lambda b, be=backend: be.init(b), backend, (batch,), {})
        assert chain_verify._DECODE_META not in vars(backend)


def test_a_failing_decode_build_leaves_sglangs_path(monkeypatch):
    """A decode-branch failure is one warning: the forward keeps SGLang's metadata and
    the backend stops trying (it must not take the rank down)."""
    lines = []
    monkeypatch.setattr(chain_verify.PATCHES, "_installed", [object()])
    monkeypatch.setattr(chain_verify.PATCHES, "sink", lines.append)
    backend, batch = MetaBackend(fail=True), Batch()
    chain_verify.decode_metadata(lambda b: backend.init(b), backend, (batch,), {})
    assert chain_verify._DECODE_META not in vars(backend)
    assert chain_verify._DECODE_OK not in vars(backend)
    assert backend.built == [("verify", [5, 9], 14)] and batch.forward_mode.name == "verify"
    assert len(lines) == 1 and "RuntimeError: boom" in lines[0]
