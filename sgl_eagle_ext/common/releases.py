"""Supported SGLang releases: the one table of version knowledge.

Everything that differs between SGLang releases and that the launcher, the
patches or the anchor checks need to know lives in RELEASES below. Facts come
from reading each release's pristine wheel (python -m sgl_eagle_ext.wheels
VERSION unpacks it); tests/test_anchors.py checks the anchors against them.

Flag vocabulary: preset files use SGLang's classic flag names (those of
0.5.10.post1); `Release.renames` and `Release.expansions` translate them into
the spelling a given release accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from packaging.version import InvalidVersion, Version

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.installed import installed_version

# SGLang flags whose value is a secret (every supported release has all three; read from
# each release's server_args.py). They never go on a command line: the launcher hands
# them to the server entry in the environment (common/secret_flags.py).
SECRET_SERVER_FLAGS = ("api-key", "admin-api-key", "ssl-keyfile-password")


@dataclass(frozen=True)
class WorkerAnchors:
    """Where each profiled phase lives for one EAGLE worker generation.

    Anchors are "module:Class.method" and must be defined in that class body
    (tests/test_anchors.py checks every release's pristine source).
    """

    worker: str  # "v1" or "v2"
    step: str  # one speculation cycle (decode) or prefill
    draft: str  # all draft steps, incl. CUDA-graph replay
    verify: str  # target verify forward + accept/sample
    target_forward: str  # called with is_verify=True inside verify
    draft_extend: str  # draft-extend after decode
    # Where per-request accept counts reach the CPU (v2, possibly a later
    # iteration under the overlap scheduler); None: the step's own result
    # carries them (v1, synchronous).
    accept_join: str | None
    # The scheduler's "no batch" housekeeping, called in a loop while idle: the
    # profiler flushes its partial window there.
    idle: str | None = None

    def anchors(self) -> dict[str, str]:
        roles = ("step", "draft", "verify", "target_forward", "draft_extend", "accept_join", "idle")
        return {r: getattr(self, r) for r in roles if getattr(self, r)}


_TP = "sglang.srt.managers.tp_worker:TpModelWorker.forward_batch_generation"
_V1 = "sglang.srt.speculative.eagle_worker:EAGLEWorker"
_V2 = "sglang.srt.speculative.eagle_worker_v2"
_IDLE_0510 = (
    "sglang.srt.managers.scheduler_runtime_checker_mixin:"
    "SchedulerRuntimeCheckerMixin.self_check_during_idle"
)
_IDLE = "sglang.srt.managers.scheduler:Scheduler.on_idle"  # 0.5.13+
V1_WORKER = WorkerAnchors(
    "v1",
    step=f"{_V1}.forward_batch_generation",
    draft=f"{_V1}.draft",
    verify=f"{_V1}.verify",
    target_forward=_TP,
    draft_extend=f"{_V1}.forward_draft_extend_after_decode",
    accept_join=None,
    idle=_IDLE_0510,
)


def _v2_worker(accept_join: str, idle: str) -> WorkerAnchors:
    return WorkerAnchors(
        "v2",
        step=f"{_V2}:EAGLEWorkerV2.forward_batch_generation",
        draft=f"{_V2}:EagleDraftWorker.draft",
        verify=f"{_V2}:EAGLEWorkerV2.verify",
        target_forward=_TP,
        draft_extend=f"{_V2}:EagleDraftWorker._draft_extend_for_decode",
        accept_join=accept_join,
        idle=idle,
    )


# 0.5.10.post1 runs v2 only with SGLANG_ENABLE_SPEC_V2=1 (and topk 1).
V2_WORKER_0510 = _v2_worker(
    "sglang.srt.managers.scheduler_output_processor_mixin:"
    "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids",
    _IDLE_0510,
)
V2_WORKER = _v2_worker(
    "sglang.srt.managers.scheduler_components.batch_result_processor:"
    "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
    _IDLE,
)


# The variable that turns on SGLang's PCIe-IPC all-reduce (Release.pcie_allreduce), and
# the TP sizes its kernels build channels for (pcie_ipc_ar._SUPPORTED_WORLD_SIZES).
PCIE_ALLREDUCE_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
PCIE_ALLREDUCE_TP = (2, 4, 8)


@dataclass(frozen=True)
class EnvOverride:
    """An environment variable SGLang itself writes before spawning the ranks."""

    var: str
    when: str  # human words, printed in the warning
    flags: tuple[str, ...] = ()  # any of these flags triggers it; () = always
    setdefault: bool = False  # True: only fills an unset variable
    # Launch conditions that must all hold as well (launcher/nccl.py CONDITIONS):
    # "dcp>1", "nnodes>1", "parallel>1" (max of tp, ep, dp), "graphs-on",
    # "tp-lm-head-a2a" (the TP LM-head all-to-all, explicit or SGLang's default).
    needs: tuple[str, ...] = ()


_ENV_OVERRIDES_COMMON = (
    EnvOverride("CUDA_DEVICE_MAX_CONNECTIONS", "always set to 8"),
    # engine.py _set_envs_and_config writes both whenever unset, in every release (read
    # in 0.5.10.post1, 0.5.13.post1, 0.5.16, 0.5.19, 0.5.21 and 0.5.23): every rank has
    # them though no preset sets them (the launcher's rank table says so).
    EnvOverride(
        "NCCL_CUMEM_ENABLE",
        "0 when unset: NCCL's cuMem-backed buffers off (1 with --enable-symm-mem)",
        setdefault=True,
    ),
    EnvOverride(
        "NCCL_NVLS_ENABLE",
        "0 when unset: NVLink SHARP off (1 with --enable-nccl-nvls or --enable-symm-mem)",
        setdefault=True,
    ),
    EnvOverride(
        "NCCL_CUMEM_ENABLE", "forced to 1 by --enable-symm-mem", flags=("--enable-symm-mem",)
    ),
    EnvOverride(
        "NCCL_NVLS_ENABLE",
        "forced to 1 by --enable-nccl-nvls / --enable-symm-mem",
        flags=("--enable-nccl-nvls", "--enable-symm-mem"),
    ),
    EnvOverride(
        "NCCL_ALGO",
        "set to allreduce:tree by --enable-deterministic-inference at TP>1",
        flags=("--enable-deterministic-inference",),
    ),
    EnvOverride(  # engine.py _set_envs_and_config: any value but "0" becomes "1"
        "TRTLLM_ENABLE_PDL", "set to 1 unless it is 0 (any other value becomes 1)", setdefault=True
    ),
)
# 0.5.21+ (moe/token_dispatcher/deepep.py): each rank raises it when DeepEP builds its buffer.
_NVSHMEM_QP_DEPTH = EnvOverride(
    "NVSHMEM_QP_DEPTH",
    "raised in every rank to at least max(1024, 2 x (DeepEP max dispatch tokens per rank + 1))",
    flags=("--moe-a2a-backend",),
    needs=("deepep",),
)
# 0.5.16+ (engine.py): with decode context parallelism, 0 unless set, and forced
# to 0 over a user value under --enable-symm-mem.
_ENV_OVERRIDES_0516 = _ENV_OVERRIDES_COMMON + (
    EnvOverride(
        "NCCL_GRAPH_MIXING_SUPPORT",
        "forced to 0 by --enable-symm-mem with dcp > 1",
        flags=("--enable-symm-mem",),
        needs=("dcp>1",),
    ),
    EnvOverride(
        "NCCL_GRAPH_MIXING_SUPPORT", "defaults to 0 when dcp > 1", setdefault=True, needs=("dcp>1",)
    ),
)
_ENV_OVERRIDES_0519 = (
    _ENV_OVERRIDES_0516
    + tuple(
        EnvOverride(
            v,
            "set by --enable-deterministic-inference at TP>1",
            flags=("--enable-deterministic-inference",),
        )
        for v in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
    )
    + tuple(  # engine.py: only on an MNNVL fabric, which is known on the node only
        EnvOverride(
            v,
            "defaults to 1 with nnodes > 1 on an MNNVL fabric",
            setdefault=True,
            needs=("nnodes>1",),
        )
        for v in ("NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE")
    )
)


@dataclass(frozen=True)
class AdaptiveSpec:
    """SGLang's `--speculative-adaptive` in one release (speculative/adaptive_spec_params.py).

    SGLang turns adaptive off with one warning line ("speculative_adaptive disabled: ...")
    and serves static speculation when any of `turned_off_by` holds; the preflight
    (launcher/preflight/adaptive.py) reports them before launch instead.
    """

    # Smallest candidate step the config loader accepts: 0 (no drafting for that
    # bucket, the trivial 1-token verify) from 0.5.16; 0.5.13.post1 wants steps > 0.
    min_step: int
    # (what, flag, value that triggers it) read from adaptive_unsupported_reason:
    # value None = the bare boolean flag; "!=1" = any value but 1; ">1" = above 1.
    turned_off_by: tuple[tuple[str, str, str | None], ...]
    # --speculative-num-steps must be one of the config's candidate steps (a hard
    # ValueError at startup otherwise; unset: SGLang takes the middle candidate).
    initial_steps_in_candidates: bool = True
    # The per-bucket controller's decision method, wrapped by the probe backoff
    # (in_sglang/adaptive_backoff.py); None where there is no 0-step state to back off.
    decide_anchor: str | None = None
    # The slot's per-batch update (its warm-up count `_batch_count` against
    # `warmup_batches`, its `ema_accept_len`): the backoff ends a warm-up in which nothing
    # was accepted after `update_interval` batches. None with decide_anchor.
    warmup_anchor: str | None = None
    # The bucket router (batch size -> its slot), before every batch: a bucket met for
    # the first time once the draft is known to be dry starts at 0 steps, without a
    # warm-up at the starting steps. None with decide_anchor.
    route_anchor: str | None = None
    # Where the per-batch verify results reach the bucket router (the batch size and
    # every bucket's slot at hand): the schedule controller of `tune --live`
    # (in_sglang/schedule_control.py) pins steps or swaps the table here. None: not
    # verified for this release (the controller stays off with one log line).
    control_anchor: str | None = None


_ADAPTIVE_OFF_COMMON = (
    ("topk other than 1", "speculative-eagle-topk", "!=1"),
    ("multi-layer EAGLE", "enable-multi-layer-eagle", None),
    ("two-batch overlap", "enable-two-batch-overlap", None),
    ("PD multiplexing", "enable-pdmux", None),
)
_ADAPTIVE_0513 = AdaptiveSpec(
    min_step=1,
    turned_off_by=(
        ("DP attention", "enable-dp-attention", None),
        *_ADAPTIVE_OFF_COMMON,
    ),
)
_DECIDE = "sglang.srt.speculative.adaptive_spec_params:AdaptiveStepSlot._recompute_params"
_WARMUP = "sglang.srt.speculative.adaptive_spec_params:AdaptiveStepSlot.update"
_ROUTE = "sglang.srt.speculative.adaptive_spec_params:AdaptiveSpeculativeParams._route"
_ADAPTIVE_0516 = AdaptiveSpec(
    min_step=0,
    turned_off_by=_ADAPTIVE_0513.turned_off_by,
    decide_anchor=_DECIDE,
    warmup_anchor=_WARMUP,
    route_anchor=_ROUTE,
)
# 0.5.23: attention DP is `attn_dp_enabled_of` (--attn-dp-size > 1; the deprecated
# --enable-dp-attention maps onto it), and a platform-specific EAGLE worker
# (non-CUDA platforms) also turns adaptive off.
_ADAPTIVE_0523 = AdaptiveSpec(
    min_step=0,
    turned_off_by=(
        ("DP attention", "enable-dp-attention", None),
        ("DP attention", "attn-dp-size", ">1"),
        *_ADAPTIVE_OFF_COMMON,
    ),
    decide_anchor=_DECIDE,
    warmup_anchor=_WARMUP,
    route_anchor=_ROUTE,
    control_anchor=(
        "sglang.srt.speculative.adaptive_spec_params:AdaptiveSpeculativeParams.on_verify_complete"
    ),
)


@dataclass(frozen=True)
class ChainVerify:
    """SGLang's split-KV verify kernels for topk-1 chains on the Triton attention backend
    (in_sglang/chain_verify.py puts chain verifies and the draft's constant-length
    draft-extend on them; SGLang dispatches them on AMD gfx95 only).

    `backend` is the class whose __init__ sets, and whose forward_extend reads, the
    instance attributes named here (tests/test_anchors.py checks each release's source)."""

    backend: str = "sglang.srt.layers.attention.triton_backend:TritonAttnBackend"
    # (switch, kernel) instance attributes of the per-head split-KV kernel (MHA/GQA)
    # and of the grouped-head one (absorbed MLA); None: the release has no MLA kernel.
    splitkv: tuple[str, str] = ("use_verify_splitkv", "verify_splitkv_fwd")
    shared_kv: tuple[str, str] | None = ("use_verify_shared_kv", "verify_shared_kv_fwd")
    # The extend kernel the draft-extend dispatch sits in front of (an instance attribute),
    # and the method whose forward batch tells a draft-extend after a verify
    # (ForwardMode.is_draft_extend_v2: its prefix is never empty) from a prefill.
    extend: str = "extend_attention_fwd"
    forward_extend: str = "forward_extend"
    mode: str = "is_draft_extend_v2"
    # A forward of one token per request (a 0-step verify, the draft-extend after it) is
    # a decode: its metadata is built by the decode branch of `init_metadata` and it runs
    # `forward_decode`, the plain decode's own path and kernel.
    init_metadata: str = "init_forward_metadata"
    forward_decode: str = "forward_decode"
    # Kernel modules whose launch parameters a launch may set (MAX/MIN_N_SPLITS,
    # DEFAULT_BLOCK_N: module globals read at every call).
    splitkv_module: str = "sglang.kernels.ops.attention.verify_splitkv"
    # The split-KV kernel's scratch allocation (torch.empty): a split a short prefix leaves
    # empty is weighted 0 in the combine, and 0 x a NaN left in that memory is NaN.
    splitkv_alloc: str = "VerifySplitKV._alloc"
    shared_kv_module: str | None = "sglang.kernels.ops.attention.verify_mla"
    # Its scratch allocation: split partials in bf16, made fp32 (and zeroed) here.
    shared_kv_alloc: str = "VerifyMLA._alloc"


@dataclass(frozen=True)
class DraftCatchup:
    """What in_sglang/draft_catchup.py anchors on: SGLang's own skip of the 0-step
    draft-extend (the variable its v2 worker reads at every 0-step cycle, and the method
    that leaves stubs in its place), the draft worker's prefill draft-extend (one extend
    over many positions per request, run for the catch-up) and its draft step (where the
    catch-up runs before drafting resumes)."""

    skip_env: str = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
    stub: str = f"{_V2}:EAGLEWorkerV2._stub_skipped_draft_extend"
    extend: str = f"{_V2}:EagleDraftWorker._draft_extend_for_prefill"
    draft: str = f"{_V2}:EagleDraftWorker.draft"
    # ForwardMode member of a prefill-style extend
    mode: str = "sglang.srt.model_executor.forward_batch_info:ForwardMode.EXTEND"


_CHAIN_VERIFY_0516 = ChainVerify(shared_kv=None, shared_kv_module=None)
_CHAIN_VERIFY = ChainVerify()


@dataclass(frozen=True)
class Release:
    version: str
    # "v1": EAGLEWorker (speculative/eagle_worker.py) runs EAGLE-3 by default;
    # "v2": EAGLEWorkerV2 + EagleDraftWorker (speculative/eagle_worker_v2.py).
    spec_worker: str
    # sglang.srt.plugins.load_plugins exists: the `sglang.srt.plugins` entry-point
    # group is loaded in every SGLang process (launch_server.py's __main__ calls it;
    # in_sglang/serve.py, which replaces that __main__, calls it too).
    plugin_entry_point: bool
    torch: str  # the torch release the wheel pins
    # ServerArgs.resolve_once() exists and launch_server.run_server calls it before
    # launch_server (in_sglang/serve.py does the same).
    resolve_once: bool = True
    # GenerationBatchResult attribute with the per-request accepted draft tokens
    # (bonus excluded) on the CPU (profiling/recorder/instrument.py reads it).
    accept_counts_attr: str = "num_correct_drafts_per_req_cpu"
    # File (in the `sglang` package) defining get_context_length and
    # CONTEXT_LENGTH_KEYS (launcher/preflight/context_rule.py runs it).
    context_rule_file: str = "srt/utils/hf_transformers/common.py"
    # Classic flag -> this release's flag. A flag renamed here is refused
    # ("ambiguous option") or deprecated by the release.
    renames: Mapping[str, str] = field(default_factory=dict)
    # Classic boolean flag -> the (flag, value) pairs that replace it.
    expansions: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # Module holding SGLang's own tree-build / greedy-verify Triton kernels.
    tree_kernels: str | None = None
    # Requirements file of the CPU harness (harness/), None if it cannot run there.
    cpu_requirements: str | None = None
    # torch the CPU harness installs, when not `torch` (the pinned one is not to be had).
    cpu_torch: str | None = None
    # torchvision matching the harness's torch (SGLang imports it at module level).
    torchvision: str | None = None
    # EAGLE workers present in the release and the anchors profiling wraps.
    workers: tuple[WorkerAnchors, ...] = (V2_WORKER,)
    # Environment SGLang writes in the launcher process (inherited by every rank).
    env_overrides: tuple[EnvOverride, ...] = _ENV_OVERRIDES_COMMON
    # FlashInfer's PCIe-IPC all-reduce, opt-in by PCIE_ALLREDUCE_ENV (overlay
    # pcie-allreduce): srt/distributed/device_communicators/pcie_ipc_ar.py, the same
    # file in 0.5.21 and 0.5.23, absent from the earlier wheels.
    pcie_allreduce: bool = False
    # EAGLE-3 aux layers: how explicit eagle_aux_hidden_state_layer_ids become the
    # layers whose input is captured, per target family (preflight/aux_layers.py).
    aux_offset: Mapping[str, str] = field(default_factory=lambda: _AUX_OFFSET_NEW)
    # Target architectures whose decoder loop can also capture boundary 0 (the
    # embedding output; id -1 under "+1") and boundary N (the last block's output),
    # besides the inputs of layers 1..N-1 (tests/test_oracle.py reads each release's
    # loop; Llama's 0 on 0.5.23 was run on the CPU harness, 0.5.10.post1 raises TypeError).
    aux_capture_embedding: frozenset[str] = frozenset()
    aux_capture_final: frozenset[str] = frozenset()
    # transformers config model_types (of the release's pinned transformers) that split
    # rope per attention layer type: SGLang's context rule then reads no factor.
    rope_per_layer_types: frozenset[str] = field(default_factory=lambda: _ROPE_PER_LAYER_TF5_3)
    # CUDA-graph setup resets the capture layers to the defaults, so decode/verify
    # graphs capture other layers than prefill (upstream #22836, fixed in 0.5.13).
    graph_resets_aux_layers: bool = False
    # LlamaForCausalLMEagle3 sizes fc by the id count (num_aux_hidden_states, else
    # len(eagle_config ids)); False: always 3 inputs.
    draft_fc_follows_ids: bool = True
    # The target's KV pool is sized with the EAGLE draft's layers in its per-token cell
    # (0.5.23 pool_configurator.DefaultPoolConfigurator: target cell x draft layers /
    # target layers added), so the draft's KV comes out of mem_fraction_static; False:
    # the draft's pool takes the target's token count on top of it (0.5.10.post1's
    # model_runner_kv_cache_mixin: the draft worker reuses the target's pool config).
    # Read in those two wheels; the others are assumed like their neighbour
    # (launcher/preflight/memory_plan.py).
    draft_kv_in_pool: bool = True
    # EAGLE-3 draft classes registered (used when the release's source is not at hand).
    eagle3_drafts: tuple[str, ...] = ("LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM")
    # Benchmarks (sgl_eagle_ext/tools/bench): Prometheus counters whose deltas give the
    # accept length of one load level (None: no verify counter in this release), and
    # the chat request field that streams per-request spec details in
    # `sglext.spec_tokens_details` (None: the release does not stream them).
    metric_generation_tokens: str = "sglang:generation_tokens_total"
    # finished requests: each counted one prefill token in generation_tokens
    metric_requests: str = "sglang:num_requests_total"
    metric_spec_verify_calls: str | None = "sglang:spec_verify_calls_total"
    chat_spec_details_field: str | None = "return_spec_tokens_details"
    # --speculative-adaptive (EAGLE/EAGLE3 chains): None where the release has none.
    adaptive: AdaptiveSpec | None = None
    # SGLang's split-KV chain-verify kernels (0.5.16+); None: the release has none, and
    # chain verifies stay on the extend kernel (in_sglang/chain_verify.py says so).
    chain_verify: ChainVerify | None = None
    # SGLang's skip of the 0-step draft-extend (0.5.23); None: the release has none, and
    # 0-step cycles keep the per-cycle draft-extend (in_sglang/draft_catchup.py says so).
    draft_catchup: DraftCatchup | None = None

    @property
    def patches(self) -> tuple[str, ...]:
        """Ids of the source patches this release needs: the [[patch]] entries of
        patches/manifest.toml that list it (the manifest is the one list)."""
        from sgl_eagle_ext.common.patches import manifest

        return tuple(p.id for p in manifest.for_release(self.version, manifest.MANIFEST))

    @property
    def harness_torch(self) -> str:
        """The torch release the CPU harness installs."""
        return self.cpu_torch or self.torch

    def flag(self, name: str) -> str:
        """This release's spelling of a classic flag name (without dashes)."""
        return self.renames.get(name, name)


# Aux-layer offset rules (values of Release.aux_offset): AUX_PLUS_ONE always adds 1
# (ids mean "output of layer i"); AUX_FIRST_IS_1 adds 1 only when the first id is 1,
# else uses the ids as is ("input of layer i"; upstream #25454); AUX_UNLESS_MAX_IS_N
# uses them as is when their max is the layer count, else adds 1.
AUX_PLUS_ONE, AUX_FIRST_IS_1, AUX_UNLESS_MAX_IS_N = (
    "+1",
    "+1 if first id is 1",
    "+1 unless max is N",
)
# AUX_DEFAULTS_TOO: +1 to the ids and to the defaults (MiniMax-M3 VL, 0.5.23).
AUX_DEFAULTS_TOO = "+1, defaults included"
# Keys: target families (preflight/aux_layers.py maps architectures to them).
_AUX_OFFSET_OLD = MappingProxyType(
    {
        "llama": AUX_PLUS_ONE,
        "deepseek": AUX_PLUS_ONE,
        "gpt-oss": AUX_PLUS_ONE,
        "minimax-m3-vl": AUX_DEFAULTS_TOO,
    }
)
_AUX_OFFSET_V13 = MappingProxyType({**_AUX_OFFSET_OLD, "deepseek": AUX_FIRST_IS_1})
_AUX_OFFSET_NEW = MappingProxyType({**_AUX_OFFSET_V13, "gpt-oss": AUX_UNLESS_MAX_IS_N})  # 0.5.19+

_GPT_OSS = frozenset({"GptOssForCausalLM"})  # 0.5.19+: the boundary-capture loop
# Qwen2's loop captures the embedding itself when there is no residual yet (0.5.10.post1,
# run; kept in later releases, where only 0.5.23 was run).
_QWEN2 = frozenset({"Qwen2ForCausalLM"})
# Target classes whose set_eagle3_layers_to_capture follows deepseek_v2.py's rule
# (subclasses of DeepseekV2ForCausalLM, and Kimi-K2.5 which delegates to one).
DEEPSEEK_FAMILY = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "MistralLarge3ForCausalLM",
    }
)
# DeepSeek-V2/V3 and Kimi-K2.5, 0.5.16+: the layer captures its own input (capture 0 is
# the embedding output).
_DEEPSEEK_BOUNDARY = DEEPSEEK_FAMILY
# 0.5.23: every decoder loop that hands the capture to the layer boundary
# (capture_output= / captured_last_layer_outputs=), or captures before the layer itself
# (Gemma-3), also delivers capture 0.
_LAYER_BOUNDARY = (
    _GPT_OSS
    | _DEEPSEEK_BOUNDARY
    | {
        "ApertusForCausalLM",
        "BailingMoEForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "Glm4MoeForCausalLM",
        "Glm5NextForConditionalGeneration",
        "IQuestCoderForCausalLM",
        "InternLM3ForCausalLM",
        "Llama4ForCausalLM",
        "Llama4ForConditionalGeneration",
        "LlamaForCausalLM",
        "MiniMaxM2ForCausalLM",
        "MiniMaxM3SparseForCausalLM",
        "Ministral3ForCausalLM",
        "MistralForCausalLM",
        "Phi3ForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "TeleFLMForCausalLM",
    }
)
# Gemma-3 also captures the last layer's output (index N).
_FINAL_0523 = _GPT_OSS | {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
_ROPE_PER_LAYER_TF5_3 = frozenset(
    {
        "colmodernvbert",
        "gemma3",
        "gemma3_text",
        "gemma3n",
        "gemma3n_text",
        "modernbert",
        "modernbert-decoder",
        "modernvbert",
        "pe_audio",
        "shieldgemma2",
        "t5gemma2",
        "t5gemma2_encoder",
    }
)
_ROPE_PER_LAYER_TF5_19 = _ROPE_PER_LAYER_TF5_3 | {
    "deepseek_v4",
    "diffusion_gemma",
    "embedding_gemma2",
    "olmo3",
    "step3p5",
    "step3p7",
    "t5gemma2_decoder",
    "t5gemma2_text",
}

_GRAPH_FLAGS_V16 = MappingProxyType(
    {"cuda-graph-max-bs": "cuda-graph-max-bs-decode", "cuda-graph-bs": "cuda-graph-bs-decode"}
)
_GRAPH_OFF_V16 = MappingProxyType(
    {
        "disable-cuda-graph": (
            ("cuda-graph-backend-decode", "disabled"),
            ("cuda-graph-backend-prefill", "disabled"),
        ),
    }
)

RELEASES: tuple[Release, ...] = (
    # The last release with the v1 EAGLEWorker, the first with Kimi-K2.5. CUDA-graph
    # setup resets the draft's capture layers (patches/: cuda-graph-aux-layers).
    Release(
        "0.5.10.post1",
        spec_worker="v1",
        plugin_entry_point=False,
        resolve_once=False,
        torch="2.9.1",
        accept_counts_attr="accept_length_per_req_cpu",
        context_rule_file="srt/utils/hf_transformers_utils.py",
        workers=(V1_WORKER, V2_WORKER_0510),
        aux_offset=_AUX_OFFSET_OLD,
        aux_capture_embedding=_QWEN2,
        graph_resets_aux_layers=True,
        draft_fc_follows_ids=False,
        draft_kv_in_pool=False,
        eagle3_drafts=("LlamaForCausalLMEagle3",),
        metric_spec_verify_calls=None,
        chat_spec_details_field=None,
        # CPU harness: torch 2.13.0+cpu (this machine's wheel; the v1 worker runs on it)
        # with the CUDA-linked torchvision 0.28.0, whose native ops cannot load there
        # (cpu/torchvision_ops.py).
        cpu_requirements="sglang-0.5.10.post1-cpu.txt",
        cpu_torch="2.13.0",
        torchvision="0.28.0",
    ),
    # v1 worker deleted; the plugin entry point appears; aux-layer fixes #22836, #25454.
    Release(
        "0.5.13.post1",
        spec_worker="v2",
        adaptive=_ADAPTIVE_0513,
        plugin_entry_point=True,
        resolve_once=False,
        torch="2.11.0",
        aux_offset=_AUX_OFFSET_V13,
        aux_capture_embedding=_QWEN2,
        chat_spec_details_field=None,
    ),
    # --cuda-graph-max-bs becomes an alias of --cuda-graph-max-bs-decode.
    Release(
        "0.5.16",
        spec_worker="v2",
        chain_verify=_CHAIN_VERIFY_0516,
        adaptive=_ADAPTIVE_0516,
        plugin_entry_point=True,
        resolve_once=False,
        torch="2.11.0",
        renames=_GRAPH_FLAGS_V16,
        expansions=_GRAPH_OFF_V16,
        tree_kernels="sglang.kernels.ops.speculative.spec_tree",
        env_overrides=_ENV_OVERRIDES_0516,
        aux_offset=_AUX_OFFSET_V13,
        aux_capture_embedding=_DEEPSEEK_BOUNDARY | _QWEN2,
        chat_spec_details_field=None,
    ),
    Release(
        "0.5.19",
        spec_worker="v2",
        chain_verify=_CHAIN_VERIFY,
        adaptive=_ADAPTIVE_0516,
        plugin_entry_point=True,
        torch="2.13.0",
        renames=_GRAPH_FLAGS_V16,
        expansions=_GRAPH_OFF_V16,
        tree_kernels="sglang.kernels.ops.speculative.spec_tree",
        env_overrides=_ENV_OVERRIDES_0519,
        aux_capture_embedding=_GPT_OSS | _DEEPSEEK_BOUNDARY | _QWEN2,
        aux_capture_final=_GPT_OSS,
    ),
    # --cuda-graph-max-bs is gone (argparse: ambiguous option).
    Release(
        "0.5.21",
        spec_worker="v2",
        chain_verify=_CHAIN_VERIFY,
        pcie_allreduce=True,
        adaptive=_ADAPTIVE_0516,
        plugin_entry_point=True,
        torch="2.13.0",
        renames=_GRAPH_FLAGS_V16,
        expansions=_GRAPH_OFF_V16,
        tree_kernels="sglang.kernels.ops.speculative.spec_tree",
        env_overrides=_ENV_OVERRIDES_0519
        + (
            EnvOverride(
                "NCCL_GRAPH_REGISTER",
                "defaults to 0 with the TP LM-head all-to-all",
                setdefault=True,
                needs=("tp-lm-head-a2a",),
            ),
            _NVSHMEM_QP_DEPTH,
        ),
        aux_capture_embedding=_GPT_OSS | _DEEPSEEK_BOUNDARY | _QWEN2,
        aux_capture_final=_GPT_OSS,
    ),
    Release(
        "0.5.23",
        spec_worker="v2",
        chain_verify=_CHAIN_VERIFY,
        draft_catchup=DraftCatchup(),
        pcie_allreduce=True,
        adaptive=_ADAPTIVE_0523,
        plugin_entry_point=True,
        torch="2.14.1",
        renames=_GRAPH_FLAGS_V16,
        expansions=_GRAPH_OFF_V16,
        tree_kernels="sglang.kernels.ops.speculative.spec_tree",
        cpu_requirements="sglang-0.5.23-cpu.txt",
        torchvision="0.29.1",
        aux_capture_embedding=_LAYER_BOUNDARY,
        aux_capture_final=_FINAL_0523,
        rope_per_layer_types=_ROPE_PER_LAYER_TF5_19,
        env_overrides=_ENV_OVERRIDES_0519
        + (
            EnvOverride(
                "NCCL_GRAPH_REGISTER",
                "defaults to 0 when max(tp, ep, dp) > 1 and any CUDA-graph phase is on",
                setdefault=True,
                needs=("parallel>1", "graphs-on"),
            ),
            _NVSHMEM_QP_DEPTH,
        ),
    ),
)

BY_VERSION: Mapping[str, Release] = MappingProxyType({r.version: r for r in RELEASES})
# The release the CPU harness installs by default: the newest one it can run.
PRIMARY = RELEASES[-1]


def version_key(version: str) -> Version:
    """PEP 440 ordering: 0.5.10rc1 < 0.5.10 < 0.5.10.post1 < 0.5.11.dev0 < 0.5.11.

    Raises UserError for a string that is no version."""
    # a string of digits longer than int() takes (4300) raises ValueError, not
    # InvalidVersion; no release number is anywhere near 100 characters
    try:
        if not isinstance(version, str) or len(version) > 100:
            raise InvalidVersion(version)
        return Version(version)
    except (InvalidVersion, ValueError):
        raise UserError(
            f"SGLang version {str(version)[:40]!r} is not a version number.",
            fix="give it as SGLang spells it, e.g. 0.5.23 or 0.5.10.post1",
        ) from None


def first_release(has) -> Release | None:
    """The oldest supported release for which has(release) is true, e.g. the first
    without the CUDA-graph aux-layer reset (for messages that name it)."""
    return next((r for r in RELEASES if has(r)), None)


def resolve(version: str | None, force: bool = False) -> tuple[Release, str]:
    """The table row for `version` (None: the installed release, else PRIMARY).

    Returns (release, how) where `how` says where the version came from.
    An unknown release is refused unless `force`, which then uses the rules of
    the newest supported release older than it in PEP 440 order (the oldest
    supported one if none is older). Pre-releases and dev builds come BEFORE their
    release: --force with 0.5.21rc1 applies 0.5.19's rules, not 0.5.21's (what
    changed in 0.5.21 may be absent from its release candidates, and the rules
    of an older release fail closed more often than those of a newer one). A
    post-release or local build (0.5.23.post1, 0.5.23+cu130) gets its release's
    rules under --force.
    """
    how = "given"
    if version is not None and not isinstance(version, str):
        version_key(version)  # raises: a version is a string
    if version is None:
        version = installed_version()
        how = "installed"
        if version is None:
            return PRIMARY, "not installed; assuming the primary release"
    if version in BY_VERSION:
        return BY_VERSION[version], how
    version_key(version)  # not a version number at all: said so, whatever --force
    supported = ", ".join(BY_VERSION)
    if not force:
        raise UserError(
            f"SGLang {version} ({how}) is not a supported release (supported: {supported}).",
            fix="use a supported release, or pass --force to apply the rules of the nearest "
            "older supported release",
        )
    key = version_key(version)
    older = [r for r in RELEASES if version_key(r.version) <= key]
    row = older[-1] if older else RELEASES[0]
    return row, f"{how}; unsupported, --force: using the rules of {row.version}"


# =======================================================================================
# Resolution rules (predicted): the settings SGLang fills in on its own and fills in
# differently for a plain and a speculative launch. launcher/fairness.py applies them
# where the release is not installed (labelled "predicted"); where it is, SGLang's own
# resolution answers instead, and tests/test_fairness.py checks these rules against it
# on the harness releases. Read from each release's source (0.5.13.post1-0.5.21 from
# their pristine wheels).
# =======================================================================================

RANDOM = "<random>"  # a fresh random value per server start
GPU_MEMORY = "<from the GPU's memory>"  # computed at startup: not predicted
GRAPH_SIZES = "<decode graph sizes>"  # SGLang's list for plain or speculative decoding


@dataclass(frozen=True)
class ResolutionRule:
    """One setting SGLang resolves on its own. `when` lists conditions that must all
    hold (launcher/fairness.py evaluates them on the final argument list and
    environment): "eagle" (EAGLE/EAGLE3/NEXTN/STANDALONE), "spec" (any algorithm),
    "cpu" (--device cpu), "gpu" (any other device), "spec-v1"
    (SGLANG_ENABLE_SPEC_V2 unset or false)."""

    field: str  # the release's ServerArgs field (dotted inside a nested config)
    value: object  # what SGLang sets; RANDOM / GRAPH_SIZES as above
    by: str  # the SGLang hook that sets it
    when: tuple[str, ...]
    flag: str  # the classic flag that pins it for every arm
    # False: only when the setting is unset (a default: pin it for every arm). True:
    # SGLang sets it whatever is given (inherent to speculation on this release).
    forced: bool = False
    default: object = None  # the field's value when the flag is not given
    # The difference is speculation's own cost on this release (reported, not a stop);
    # None: as `forced`.
    inherent: bool | None = None

    @property
    def is_inherent(self) -> bool:
        return self.forced if self.inherent is None else self.inherent


_SEED = ResolutionRule("random_seed", RANDOM, "_handle_missing_default_values", (), "random-seed")
_SEED_OLD = dataclasses.replace(_SEED, by="ServerArgs.__post_init__")
_CAP_48 = ResolutionRule(
    "max_running_requests", 48, "_handle_eagle_family", ("eagle",), "max-running-requests"
)
_MIXED_OFF = ResolutionRule(
    "enable_mixed_chunk",
    False,
    "_handle_eagle_family",
    ("eagle",),
    "enable-mixed-chunk",
    True,
    False,
)
_GRAPH_BS_FLAT = ResolutionRule(
    "cuda_graph_bs", GRAPH_SIZES, "_generate_cuda_graph_batch_sizes", ("gpu",), "cuda-graph-bs"
)
_GRAPH_BS_NESTED = ResolutionRule(
    "cuda_graph_config.decode.bs",
    GRAPH_SIZES,
    "generate_decode_cuda_graph_batch_sizes",
    ("gpu",),
    "cuda-graph-bs",
)
_CPU_OVERLAP_OFF = ResolutionRule(
    "disable_overlap_schedule",
    True,
    "_disable_overlap_schedule_for_cpu",
    ("eagle", "cpu"),
    "disable-overlap-schedule",
    True,
    False,
)
_OLD = "ServerArgs._handle_speculative_decoding"
# 0.5.10.post1 and 0.5.13.post1 size the KV pool 4 GB smaller for an EAGLE draft's weights
# and graphs when --mem-fraction-static is unset: memory the draft uses (on CPU too,
# where the CPU overlay's max-total-tokens sizes the pool for every arm anyway).
_DRAFT_RESERVE = ResolutionRule(
    "mem_fraction_static",
    GPU_MEMORY,
    "ServerArgs._handle_gpu_memory_settings",
    ("eagle",),
    "mem-fraction-static",
    inherent=True,
)
_V2_RULES = (_SEED, _CAP_48, _MIXED_OFF, _GRAPH_BS_NESTED, _CPU_OVERLAP_OFF)
RESOLUTION_RULES: Mapping[str, tuple[ResolutionRule, ...]] = MappingProxyType(
    {
        "0.5.10.post1": (
            _SEED_OLD,
            dataclasses.replace(_CAP_48, by=_OLD),
            dataclasses.replace(_MIXED_OFF, by=_OLD),
            dataclasses.replace(_GRAPH_BS_FLAT, by="ServerArgs._generate_cuda_graph_batch_sizes"),
            # the v1 worker has no overlap scheduler (SGLANG_ENABLE_SPEC_V2 defaults off)
            ResolutionRule(
                "disable_overlap_schedule",
                True,
                _OLD,
                ("eagle", "spec-v1"),
                "disable-overlap-schedule",
                True,
                False,
            ),
            ResolutionRule(
                "disable_piecewise_cuda_graph",  # on CPU it is off for every server
                True,
                "ServerArgs._handle_piecewise_cuda_graph",
                ("spec", "gpu"),
                "disable-piecewise-cuda-graph",
                True,
                False,
            ),
            _DRAFT_RESERVE,
        ),
        # 0.5.13.post1: SGLANG_ENABLE_SPEC_V2 defaults on (overlap kept on a GPU)
        "0.5.13.post1": (
            dataclasses.replace(_SEED, by="ServerArgs.__post_init__"),
            _CAP_48,
            _MIXED_OFF,
            dataclasses.replace(_GRAPH_BS_FLAT, by="ServerArgs._generate_cuda_graph_batch_sizes"),
            _DRAFT_RESERVE,
        ),
        "0.5.16": (dataclasses.replace(_SEED, by="ServerArgs.__post_init__"), *_V2_RULES[1:]),
        "0.5.19": _V2_RULES,
        "0.5.21": _V2_RULES,
        "0.5.23": _V2_RULES,
    }
)
