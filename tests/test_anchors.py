"""Every anchor the profiling patches use exists in the pristine source of every
supported release (wheel downloaded without dependencies and cached, never
installed), as a method defined in that class's own body."""

from __future__ import annotations

import ast

import pytest

from sgl_eagle_ext.common import releases, wheels

pytestmark = pytest.mark.harness  # release wheels (network or cache)


def defined_methods(source_root, module: str, cls: str) -> set[str] | None:
    path = source_root.parent.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return None


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_profile_anchors_exist_in_release_source(release):
    root = wheels.source(release.version)
    for worker in release.workers:
        for role, anchor in worker.anchors().items():
            module, qualname = anchor.split(":")
            cls, method = qualname.split(".")
            methods = defined_methods(root, module, cls)
            assert methods is not None, f"{release.version}: class {module}:{cls} missing ({role})"
            assert method in methods, f"{release.version}: {anchor} missing ({role})"


@pytest.mark.parametrize(
    "release", [r for r in releases.RELEASES if r.adaptive], ids=lambda r: r.version
)
def test_adaptive_backoff_anchor_exists_in_release_source(release):
    """The probe backoff wraps the adaptive controller's decision method of each
    release (its wheel's source, like the profile anchors)."""
    spec = release.adaptive
    if spec.decide_anchor is None:  # the backoff says 'disabled' for this release
        assert spec.warmup_anchor is None and spec.route_anchor is None
        return
    for anchor in (spec.decide_anchor, spec.warmup_anchor, spec.route_anchor):
        module, qualname = anchor.split(":")
        cls, method = qualname.split(".")
        methods = defined_methods(wheels.source(release.version), module, cls)
        assert methods is not None and method in methods, f"{release.version}: {anchor} missing"
    # the warm-up cut reads and sets these on the slot
    source = (
        wheels.source(release.version).parent / "sglang/srt/speculative/adaptive_spec_params.py"
    )
    for attr in (
        "self._batch_count",
        "self.warmup_batches",
        "self.ema_accept_len",
        "self.update_interval",
    ):
        assert attr in source.read_text(), (release.version, attr)


def test_anchor_check_detects_a_missing_method():
    root = wheels.source(releases.PRIMARY.version)
    assert "verify" in defined_methods(
        root, "sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"
    )
    assert defined_methods(root, "sglang.srt.speculative.eagle_worker", "EAGLEWorker") is None


def class_body(path, cls: str) -> set[str]:
    """Names a class body defines: methods and annotated fields."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                n.name if not isinstance(n, ast.AnnAssign) else getattr(n.target, "id", "")
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign))
            }
    return set()


def top_level_functions(path) -> set[str]:
    if not path.is_file():
        return set()
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_release_table_columns_match_the_release_source(release):
    """What in_sglang/serve.py, the recorder and the preflight take from the table is
    what the release's pristine source has."""
    srt = wheels.source(release.version) / "srt"
    has_plugins = "load_plugins" in top_level_functions(srt / "plugins" / "__init__.py")
    assert release.plugin_entry_point == has_plugins
    has_resolve = "resolve_once" in class_body(srt / "server_args.py", "ServerArgs")
    assert release.resolve_once == has_resolve
    fields = class_body(srt / "managers" / "utils.py", "GenerationBatchResult")
    assert release.accept_counts_attr in fields
    rule_file = wheels.source(release.version) / release.context_rule_file
    assert "get_context_length" in top_level_functions(rule_file)


def assigned_in_init(source_root, anchor: str) -> set[str]:
    """The `self.X = ...` attributes a class's __init__ assigns (its own body)."""
    module, cls = anchor.split(":")
    path = source_root.parent.joinpath(*module.split(".")).with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    targets = [
                        t
                        for n in ast.walk(fn)
                        for t in (
                            n.targets
                            if isinstance(n, ast.Assign)
                            else [n.target]
                            if isinstance(n, ast.AnnAssign)
                            else []
                        )
                    ]
                    return {t.attr for t in targets if isinstance(t, ast.Attribute)}
    return set()


def module_globals(source_root, module: str) -> set[str] | None:
    path = source_root.parent.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    return {
        t.id
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_chain_verify_anchors_exist_in_release_source(release):
    """Every attribute in_sglang/chain_verify.py sets or reads on the Triton backend is
    assigned by that release's __init__, and the launch parameters it may set are the
    kernel modules' globals; a release without a row has no split-KV verify kernel."""
    root = wheels.source(release.version)
    cv = release.chain_verify
    if cv is None:
        default = releases.ChainVerify()
        assert module_globals(root, default.splitkv_module) is None, release.version
        return
    module, cls = cv.backend.split(":")
    methods = defined_methods(root, module, cls)
    assert {cv.forward_extend, cv.init_metadata, cv.forward_decode} <= methods, release.version
    assert cv.mode in defined_methods(
        root, "sglang.srt.model_executor.forward_batch_info", "ForwardMode"
    ), release.version
    attrs = assigned_in_init(root, cv.backend)
    wanted = {*cv.splitkv, cv.extend, "topk", "use_mla", "num_draft_tokens", "forward_metadata"}
    wanted |= set(cv.shared_kv or ())
    assert wanted <= attrs, f"{release.version}: missing {wanted - attrs}"
    assert {"MAX_N_SPLITS", "MIN_N_SPLITS", "DEFAULT_BLOCK_N"} <= module_globals(
        root, cv.splitkv_module
    )
    kernel_cls, alloc = cv.splitkv_alloc.split(".")
    assert alloc in defined_methods(root, cv.splitkv_module, kernel_cls), release.version
    if cv.shared_kv_module:
        assert {"MAX_N_SPLITS", "DEFAULT_BLOCK_N"} <= module_globals(root, cv.shared_kv_module)
    else:
        assert module_globals(root, releases.ChainVerify().shared_kv_module) is None


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_draft_catchup_anchors_exist_in_release_source(release):
    """in_sglang/draft_catchup.py's methods are defined in the release's v2 worker, its
    skip variable is SGLang's own (environ.py) and read where the 0-step cycle stubs; a
    release without a row says so at startup (0.5.23 is the one the harness runs)."""
    root = wheels.source(release.version)
    dc = release.draft_catchup
    if dc is None:
        return
    for anchor in (dc.stub, dc.extend, dc.draft):
        module, qualname = anchor.split(":")
        cls, method = qualname.split(".")
        assert method in (defined_methods(root, module, cls) or ()), anchor
    environ = (root / "srt/environ.py").read_text()
    assert f"{dc.skip_env} = EnvBool(False)" in environ
    worker = (root / "srt/speculative/eagle_worker_v2.py").read_text()
    assert f"envs.{dc.skip_env}.get()" in worker
    module, member = dc.mode.split(":")
    assert member.split(".")[1] in (root / "srt/model_executor/forward_batch_info.py").read_text()
