"""SGLang's own answers for the differential tests (tests/test_oracle_*.py).

Run with a harness venv's python (`python sglang_oracle.py cases.json`): it loads
every case the way that release does (its transformers via SGLang's ModelConfig,
its model classes' set_eagle3_layers_to_capture) and prints one JSON object.
Only SGLang and the standard library are used here: this file is the oracle, so
it imports nothing from sgl_eagle_ext.

Cases (JSON): {"context": [{"target": cfg, "draft": cfg | null, "context_length": int | null}],
               "aux": [{"arch": str, "n": int, "ids": list | null}]}
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
import types

# The bypasses of SGLang's context check must not leak into the oracle.
for var in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_IS_IN_CI"):
    os.environ.pop(var, None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Target architecture -> (module, model class, inner model class whose forward captures).
TARGETS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM", "LlamaModel"),
    "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM", "DeepseekV2Model"),
    "DeepseekV2ForCausalLM": ("deepseek_v2", "DeepseekV2ForCausalLM", "DeepseekV2Model"),
    "GptOssForCausalLM": ("gpt_oss", "GptOssForCausalLM", "GptOssModel"),
    "KimiK25ForConditionalGeneration": ("kimi_k25", "KimiK25ForConditionalGeneration", None),
}


def _model_config(root: str, cfg: dict, **kw) -> dict:
    from sglang.srt.configs.model_config import ModelConfig

    path = tempfile.mkdtemp(dir=root)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    try:
        return {"len": ModelConfig(path, **kw).context_len}
    except ValueError as e:
        return {"error": str(e)[:300]}


def context_case(root: str, case: dict) -> dict:
    out = {"target": _model_config(root, case["target"], context_length=case.get("context_length"))}
    if case.get("draft") is not None:
        out["draft_own"] = _model_config(root, case["draft"])
        effective = case.get("context_length") or out["target"].get("len")
        if effective is not None:
            out["draft"] = _model_config(
                root, case["draft"], context_length=effective, is_draft_model=True
            )
    return out


def _minimal(cls, n: int):
    """An object carrying what set_eagle3_layers_to_capture reads and writes."""
    obj = types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True),
        config=types.SimpleNamespace(num_hidden_layers=n),
        model=types.SimpleNamespace(layers_to_capture=[]),
        capture_aux_hidden_states=False,
    )
    obj.set_eagle3_layers_to_capture = types.MethodType(cls.set_eagle3_layers_to_capture, obj)
    return obj


def _boundaries(inner) -> dict:
    """Which hidden-state boundaries the decoder loop of `inner` can capture besides the
    inputs of layers 1..N-1: 0 (the embedding output) and N (the last block's output)."""
    src = _forward_source(inner)
    return {
        # the capture goes through the layer boundary (residual handled there), or the
        # loop captures start_layer's input itself; else `hidden_states + residual`
        # with residual None: TypeError at index 0
        "embedding": "capture_output=aux_hidden_states.capture" in src
        or "self.start_layer in self.layers_to_capture" in src
        # DeepSeek 0.5.16-0.5.21: the layer's communicator captures its residual after
        # prepare_attn, which at layer 0 is the embedding output (residual None handled)
        or "captured_last_layer_outputs=" in src,
        "final": "self.end_layer in self.layers_to_capture" in src
        or "i + 1 in self.layers_to_capture" in src,
    }


class _FromSource:
    """A release's classes as far as this test needs them, compiled from its source
    files (a pristine wheel whose package cannot be imported next to this transformers):
    set_eagle3_layers_to_capture and the decoder loop's source text."""

    def __init__(self, pkg: str, mod_name: str):
        import ast

        self.file = os.path.join(pkg, "srt", "models", mod_name + ".py")
        with open(self.file, encoding="utf-8") as f:
            self.text = f.read()
        self.tree = ast.parse(self.text)

    def __getattr__(self, cls_name: str):
        import ast

        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls_name:
                ns = {"Optional": object, "List": object}
                attrs = {}
                for fn in node.body:
                    if (
                        isinstance(fn, ast.FunctionDef)
                        and fn.name == "set_eagle3_layers_to_capture"
                    ):
                        fn.decorator_list, fn.returns = [], None
                        for a in fn.args.args:
                            a.annotation = None
                        code = compile(ast.Module(body=[fn], type_ignores=[]), self.file, "exec")
                        exec(code, ns)
                        attrs[fn.name] = ns[fn.name]
                    if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                        src = ast.get_source_segment(self.text, fn)
                        attrs["forward_source"] = src
                for base in node.bases:  # inherited from a class of the same module
                    if isinstance(base, ast.Name) and base.id != cls_name:
                        try:
                            inherited = vars(getattr(self, base.id))
                        except AttributeError:
                            continue
                        attrs = {**inherited, **attrs}
                return types.SimpleNamespace(**attrs)
        raise AttributeError(cls_name)


def _forward_source(inner) -> str:
    return getattr(inner, "forward_source", None) or inspect.getsource(inner.forward)


def _probe():
    """The product's driver (SGLang + stdlib only), loaded by path: it runs the target
    class's own set_eagle3_layers_to_capture and its decoder loop on stand-in layers."""
    import importlib.util

    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "sgl_eagle_ext",
        "launcher",
        "preflight",
        "sglang_probe.py",
    )
    spec = importlib.util.spec_from_file_location("sglang_probe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def aux_case(case: dict, pkg: str | None = None) -> dict:
    mod_name, cls_name, inner_name = TARGETS[case["arch"]]
    if pkg is None:  # the installed release: run its code
        if inner_name is None:  # a wrapper: its config names the language model
            path = tempfile.mkdtemp()
            text = {"model_type": "deepseek_v3", "num_hidden_layers": case["n"]}
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(
                    {"architectures": [cls_name], "model_type": "kimi_k25", "text_config": text}, f
                )
            case = {**case, "config": path}
        got = _probe().aux_case(case)
        if "layers_to_capture" not in got:
            return got
        b = got.get("boundaries") or {}
        return {
            "layers_to_capture": got["layers_to_capture"],
            "embedding": b.get("embedding"),
            "final": b.get("final"),
        }
    if pkg is not None:
        mod = _FromSource(pkg, mod_name)
        if inner_name is None:
            ds = _FromSource(pkg, "deepseek_v2")
        return _aux_with(mod, cls_name, inner_name, case, ds if inner_name is None else None)
    try:
        mod = importlib.import_module(f"sglang.srt.models.{mod_name}")
    except ImportError as e:
        return {"missing": str(e)}
    ds = importlib.import_module("sglang.srt.models.deepseek_v2") if inner_name is None else None
    return _aux_with(mod, cls_name, inner_name, case, ds)


def _aux_with(mod, cls_name, inner_name, case, ds) -> dict:
    cls = getattr(mod, cls_name)
    n = case["n"]
    if inner_name is None:  # Kimi-K2.5 delegates to its DeepSeek-V3 language model
        inner_model = _minimal(ds.DeepseekV3ForCausalLM, n)
        obj = types.SimpleNamespace(language_model=inner_model)
        holder, inner = inner_model, ds.DeepseekV2Model
    else:
        obj = holder = _minimal(cls, n)
        inner = getattr(mod, inner_name)
    try:
        cls.set_eagle3_layers_to_capture(obj, case["ids"])
    except Exception as e:  # the oracle reports what SGLang does
        return {"raised": f"{type(e).__name__}: {e}"}
    return {"layers_to_capture": list(holder.model.layers_to_capture), **_boundaries(inner)}


def _wheel_rule(pkg: str):
    """get_context_length compiled out of a pristine wheel's source (with its keys)."""
    import ast

    for rel in ("srt/utils/hf_transformers/common.py", "srt/utils/hf_transformers_utils.py"):
        path = os.path.join(pkg, rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        body = [
            n
            for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name == "get_context_length")
            or (
                isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "CONTEXT_LENGTH_KEYS" for t in n.targets)
            )
        ]
        if len(body) == 2:
            ns: dict = {}
            exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
            return ns["get_context_length"]
    raise LookupError(f"no get_context_length in {pkg}")


def load_text_configs(root: str, case: dict) -> dict:
    """Each config of a case as this python's transformers loads it (SGLang's
    hf_text_config: the text sub-config when nested), or the reason it cannot."""
    from transformers import AutoConfig

    out = {}
    for role in ("target", "draft"):
        if case.get(role) is None:
            continue
        path = tempfile.mkdtemp(dir=root)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(case[role], f)
        try:
            cfg = AutoConfig.from_pretrained(path)
        except (ValueError, KeyError) as e:  # a model type only SGLang registers
            out[role] = str(e)[:200]
            continue
        out[role] = getattr(cfg, "text_config", None) or cfg
    return out


def wheel_context_case(rule, loaded: dict) -> dict:
    """The release's own rule on the configs as transformers loaded them."""
    return {
        role: {"skip": cfg} if isinstance(cfg, str) else {"len": int(rule(cfg))}
        for role, cfg in loaded.items()
    }


def main() -> None:
    """argv: CASES.json [PKG...]. With PKGs (pristine wheels' `sglang` directories, whose
    packages cannot be imported here): the aux cases on methods compiled from each PKG's
    source, and the context limits by PKG's get_context_length on configs loaded by
    this python's transformers (5.x, as every release pins)."""
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    if len(sys.argv) > 2:  # one or more pristine wheels, one process for all
        with tempfile.TemporaryDirectory() as root:
            loaded = [load_text_configs(root, c) for c in cases.get("context", [])]
        out = {"wheels": []}
        for pkg in sys.argv[2:]:
            rule = _wheel_rule(pkg)
            out["wheels"].append(
                {
                    "pkg": pkg,
                    "aux": [aux_case(c, pkg) for c in cases.get("aux", [])],
                    "context": [wheel_context_case(rule, x) for x in loaded],
                }
            )
        print("ORACLE " + json.dumps(out))
        return
    import sglang

    out = {"version": sglang.__version__, "pkg": os.path.dirname(sglang.__file__)}
    with tempfile.TemporaryDirectory() as root:
        out["context"] = [context_case(root, c) for c in cases.get("context", [])]
    out["aux"] = [aux_case(c) for c in cases.get("aux", [])]
    print("ORACLE " + json.dumps(out))


if __name__ == "__main__":
    main()
