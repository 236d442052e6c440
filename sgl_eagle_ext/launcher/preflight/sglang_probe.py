"""Ask an installed SGLang for its own verdicts (run as a script by SGLang's python).

    SGLANG_PYTHON sglang_probe.py REQUEST.json      -> one line: PROBE {json}

Runs inside the python that will start the server, so it imports only SGLang, its
transformers and the standard library (never sgl_eagle_ext). It answers:

  context: the release's ModelConfig on the target and the draft directories (its
      AutoConfig, class defaults and rope handling included, no weights): the
      target's context length, the draft's own, and whether the draft check (the
      ValueError every TP worker raises) passes at the target's length;
  aux: the target class's own set_eagle3_layers_to_capture, run on an instance
      built without weights or __init__ (a recorder stands in for the sub-modules
      it reaches; a delegation to an inner model is followed into that class), and
      the decoder loop run on stand-in layers to see which captures arrive;
  families: every registered architecture whose class defines
      set_eagle3_layers_to_capture (and the model modules that failed to import).

Request (JSON): {"context": [{"target": DIR, "draft": DIR|null, "context_length": int|null}],
                 "aux": [{"arch": str, "n": int, "ids": [int]|null, "config": DIR|null}],
                 "families": bool}
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder (the preflight's modules: context.py, sizes.py,
# ...) comes first on sys.path, where a module named like one of the standard library's
# would shadow it for SGLang's imports: take the folder off before importing anything.
# (Imported as a module, by ask_sglang.py for TAG, it changes nothing.)
_HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import contextlib  # noqa: E402
import copy  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

# The answer line's tag, defined here only: ask_sglang.py imports it (this file runs in
# SGLang's python, where sgl_eagle_ext may not be importable).
TAG = "PROBE "


def _own_environment() -> None:
    """The bypasses of SGLang's context check must not change its verdict here; no
    download. Only when run as the probe: before SGLang is imported."""
    for var in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_IS_IN_CI"):
        os.environ.pop(var, None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


# -- context ---------------------------------------------------------------------------
def _model_config(path: str, **kw) -> dict:
    from sglang.srt.configs.model_config import ModelConfig

    try:
        mc = ModelConfig(path, trust_remote_code=False, **kw)
    except ValueError as e:  # the draft check, or a config SGLang refuses
        return {"error": str(e)[:400]}
    text = mc.hf_text_config
    return {
        "len": int(mc.context_len),
        "layers": getattr(text, "num_hidden_layers", None),
        "arch": (getattr(mc.hf_config, "architectures", None) or [None])[0],
    }


def context_case(case: dict) -> dict:
    user = case.get("context_length")
    out = {"target_own": _model_config(case["target"])}
    out["target"] = (
        _model_config(case["target"], context_length=user) if user else out["target_own"]
    )
    if case.get("draft"):
        out["draft_own"] = _model_config(case["draft"])
        effective = user or out["target"].get("len")
        if effective is not None:
            out["draft"] = _model_config(
                case["draft"], context_length=effective, is_draft_model=True
            )
    return out


# -- aux layers: the capture decision ------------------------------------------------------
class _Recorder:
    """Stands in for whatever sub-module the method reaches: remembers what is set on
    it and which of its methods are called."""

    def __init__(self, path: str, log: list, n: int):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_n", n)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "layers":
            child = [
                _Recorder(f"{self._path}.layers[{i}]", self._log, self._n) for i in range(self._n)
            ]
        else:
            child = _Recorder(f"{self._path}.{name}", self._log, self._n)
        object.__setattr__(self, name, child)
        return child

    def __setattr__(self, name, value):
        self._log.append(("set", f"{self._path}.{name}", value))
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        self._log.append(("call", self._path, args))


_RANK = types.SimpleNamespace(is_last_rank=True, is_first_rank=True, rank_in_group=0, world_size=1)


@contextlib.contextmanager
def _single_rank(module):
    """Module-level accessors of the pipeline group answer 'one rank' meanwhile."""
    saved = {}
    for name, value in (
        ("get_pp_group", lambda: _RANK),
        ("get_parallel", lambda: types.SimpleNamespace(pp_group=_RANK)),
    ):
        if hasattr(module, name):
            saved[name] = getattr(module, name)
            setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _run_setter(cls, n: int, ids, config) -> list:
    log: list = []
    me = _Recorder("self", log, n)
    text = types.SimpleNamespace(num_hidden_layers=n)
    cfg = types.SimpleNamespace(num_hidden_layers=n, text_config=text)
    if config is not None:  # the real config, with the layer count asked about
        cfg = copy.copy(config)
        cfg.num_hidden_layers = n
        sub = getattr(config, "text_config", None)
        if sub is not None:
            cfg.text_config = copy.copy(sub)
            cfg.text_config.num_hidden_layers = n
    object.__setattr__(me, "config", cfg)
    object.__setattr__(me, "pp_group", _RANK)
    with _single_rank(sys.modules[cls.__module__]):
        cls.set_eagle3_layers_to_capture(me, None if ids is None else list(ids))
    return log


def _inner_classes(cls) -> list:
    """Classes of the same module that also define set_eagle3_layers_to_capture but
    are not it or its bases: what `self.model` is built from."""
    mod = sys.modules[cls.__module__]
    return [
        c
        for c in vars(mod).values()
        if isinstance(c, type)
        and c.__module__ == mod.__name__
        and "set_eagle3_layers_to_capture" in vars(c)
        and not issubclass(cls, c)
    ]


def resolve(arch: str):
    """The model class SGLang registers for `arch`. The module defining it is imported
    alone when its file is found (the full registry imports every model: seconds)."""
    import sglang.srt.models as models

    needle = f"class {arch}("
    for folder in models.__path__:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    if needle not in f.read():
                        continue
                mod = importlib.import_module(f"sglang.srt.models.{name[:-3]}")
            except Exception:
                continue
            cls = getattr(mod, arch, None)
            if isinstance(cls, type):
                return cls
    from sglang.srt.models.registry import ModelRegistry

    return ModelRegistry.resolve_model_cls([arch])[0]


def _delegate_class(arch: str, config):
    """The class of `language_model` for a wrapper: its text config's causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    text = getattr(config, "text_config", None)
    names = list(getattr(text, "architectures", None) or [])
    mt = getattr(text, "model_type", None)
    if mt in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        names.append(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[mt])
    for name in names:
        try:
            return resolve(name)
        except Exception:
            continue
    return None


def capture_indices(cls, arch: str, n: int, ids, config=None, depth: int = 0) -> dict:
    """What set_eagle3_layers_to_capture leaves as the capture list, by running it."""
    log = _run_setter(cls, n, ids, config)
    for kind, path, value in log:
        if kind == "set" and path.endswith(".layers_to_capture"):
            return {"layers_to_capture": list(value), "via": cls.__name__}
    for kind, path, args in log:
        if kind != "call" or not path.endswith(".set_eagle3_layers_to_capture") or depth > 2:
            continue
        passed = args[0] if args else None
        owner = path.rsplit(".", 2)[-2]
        if owner == "language_model":
            inner = _delegate_class(arch, config)
            if inner is None:
                return {"unresolved": f"delegates to language_model of {arch}"}
            out = capture_indices(inner, arch, n, passed, config, depth + 1)
            out["via"] = f"{cls.__name__} -> {out.get('via')}"
            return out
        for inner in _inner_classes(cls):  # self.model's own setter
            sub = _run_setter(inner, n, passed, config)
            for k, p, v in sub:
                if k == "set" and p.endswith(".layers_to_capture"):
                    return {
                        "layers_to_capture": list(v),
                        "via": f"{cls.__name__} -> {inner.__name__}",
                    }
        return {"layers_to_capture": list(passed or []), "via": f"{cls.__name__} -> {path}"}
    return {"layers_to_capture": None, "via": cls.__name__}


# -- aux layers: does the decoder loop deliver index 0 and index N ---------------------------
class _Blank:
    """A forward batch with every optional feature off."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _boundary_run(cls, n: int, capture: list) -> dict:
    """Run the inner decoder loop of `cls` on stand-in layers (each adds 1 to the
    residual stream and hands over whatever capture hook the loop gives it) and see
    which boundaries arrive. {"embedding": bool, "final": bool} or {"not_run": why}."""
    import torch

    inner_cls = None
    for c in [*_loop_classes(cls)]:
        inner_cls = c
        break
    if inner_cls is None:
        return {"not_run": "no decoder-loop class found next to the model class"}

    class Layer(torch.nn.Module):
        def __init__(self, i):
            super().__init__()
            self.i = i

        def forward(self, *args, **kwargs):
            hidden = kwargs.get("hidden_states", args[1] if len(args) > 1 else None)
            residual = kwargs.get("residual", args[3] if len(args) > 3 else None)
            stream = hidden if residual is None else hidden + residual
            for key in ("capture_output", "captured_last_layer_outputs"):
                hook = kwargs.get(key)
                if hook is not None:
                    if callable(hook):  # capture_output=aux.capture
                        hook(stream.clone())
                    else:  # the collector itself
                        (getattr(hook, "capture", None) or hook.append)(stream.clone())
            out = stream + 1
            if residual is None and "capture_output" in kwargs:
                return out
            return out - 1, torch.ones_like(out)

    m = inner_cls.__new__(inner_cls)
    torch.nn.Module.__init__(m)
    m.layers = torch.nn.ModuleList([Layer(i) for i in range(n)])
    m.embed_tokens = lambda ids: torch.zeros(ids.shape[0], 4)
    m.norm = lambda h, r=None: (h if r is None else h + r, None)
    m.pp_group = _RANK
    m.start_layer, m.end_layer = 0, n
    m.layers_to_capture = list(capture)
    fb = _Blank()
    missing = re.compile(r"object has no attribute '(\w+)'")
    for _ in range(12):  # attributes __init__ would have set: off/absent
        try:
            with _single_rank(sys.modules[inner_cls.__module__]):
                out = m.forward(
                    torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), fb
                )
            break
        except AttributeError as e:
            name = missing.search(str(e))
            if not name or f"'{type(m).__name__}'" not in str(e):
                return {"not_run": f"AttributeError: {e}"[:300]}
            setattr(m, name.group(1), None)
        except TypeError as e:
            if "NoneType" in str(e) and "+" in str(e):  # hidden + None at index 0
                return {"embedding": False, "final": None, "raised": str(e)[:200]}
            return {"not_run": f"{type(e).__name__}: {e}"[:300]}
        except Exception as e:
            return {"not_run": f"{type(e).__name__}: {e}"[:300]}
    else:
        return {"not_run": "the decoder loop needs more than stand-ins"}
    aux = out[1] if isinstance(out, tuple) and out[1] is not None else []
    if hasattr(aux, "finalize"):  # a packer: its buffer holds the captures side by side
        aux = list(aux.finalize().split(4, dim=-1)) if len(aux) else []
    got = sorted({int(t.flatten()[0].item()) for t in aux})
    return {
        "embedding": 0 in got if 0 in capture else None,
        "final": n in got if n in capture else None,
        "got": got,
    }


def _loop_classes(cls):
    import inspect

    import torch

    mod = sys.modules[cls.__module__]

    for c in vars(mod).values():
        if (
            isinstance(c, type)
            and c.__module__ == mod.__name__
            and issubclass(c, torch.nn.Module)
            and not issubclass(cls, c)
            and "forward" in vars(c)
            and list(inspect.signature(c.forward).parameters)[1:4]
            == ["input_ids", "positions", "forward_batch"]
            and "set_eagle3_layers_to_capture" not in vars(c)
        ):
            yield c


@functools.cache
def _hf_config(path: str):
    """The target's config as SGLang loads it (None if it cannot)."""
    from sglang.srt.configs.model_config import ModelConfig

    try:
        return ModelConfig(path, trust_remote_code=False).hf_config
    except Exception:
        return None


def aux_case(case: dict) -> dict:
    arch, n, ids = case["arch"], case["n"], case.get("ids")
    try:
        cls = resolve(arch)
    except Exception as e:
        return {"missing": f"{type(e).__name__}: {e}"[:300]}
    if not hasattr(cls, "set_eagle3_layers_to_capture"):
        return {"missing": f"{arch} has no set_eagle3_layers_to_capture"}
    config = _hf_config(case["config"]) if case.get("config") else None
    try:
        out = capture_indices(cls, arch, n, ids, config)
    except Exception as e:  # what SGLang's own method does with these ids
        return {"raised": f"{type(e).__name__}: {e}"[:300]}
    cap = out.get("layers_to_capture")
    if cap:
        out["boundaries"] = _boundary_run(cls, n, [c for c in cap if c in (0, n)] or [0, n])
    return out


def families() -> dict:
    from sglang.srt.models.registry import ModelRegistry

    found, failed = [], []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry.resolve_model_cls([arch])[0]
        except Exception as e:
            failed.append(f"{arch}: {type(e).__name__}")
            continue
        if hasattr(cls, "set_eagle3_layers_to_capture"):
            found.append({"arch": arch, "module": cls.__module__.rsplit(".", 1)[-1]})
    return {"targets": found, "unimportable": failed}


def _model_type_of(arch: str) -> str | None:
    from transformers.models.auto import modeling_auto

    for name in dir(modeling_auto):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES"):
            for mt, archs in getattr(modeling_auto, name).items():
                if arch == archs or (isinstance(archs, (list, tuple)) and arch in archs):
                    return mt
    return None


def family_cases(fams: dict, req: dict, root: str) -> dict:
    """Every enumerated family: its context length for each config variant built on its
    transformers config class, and its capture answers for each id set (the class's
    config from the first variant that loads: a wrapper resolves its language model)."""
    out = {}
    for fam in fams["targets"]:
        arch = fam["arch"]
        mt = _model_type_of(arch)
        entry: dict = {"model_type": mt, "aux": [], "context": []}
        loaded = None
        given = req.get("configs", {}).get(arch)
        if given is not None:  # a class transformers does not map (SGLang's own config)
            loaded = os.path.join(root, f"{arch}-given")
            os.makedirs(loaded, exist_ok=True)
            with open(os.path.join(loaded, "config.json"), "w") as f:
                json.dump(given, f)
        for i, variant in enumerate(req.get("context", []) if mt else []):
            variant = dict(variant)
            cfg = {"architectures": [arch], "model_type": mt}
            if variant.pop("_nested", False):
                cfg["text_config"] = variant
            else:
                cfg.update(variant)
            path = os.path.join(root, f"{arch}-{i}")
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(cfg, f)
            try:
                got = _model_config(path)
            except Exception as e:  # a class SGLang cannot load from this alone
                got = {"skip": f"{type(e).__name__}: {e}"[:200]}
            if loaded is None and "len" in got:
                loaded = path
            entry["context"].append({"config": cfg, **got})
        for case in req.get("aux", []):
            entry["aux"].append(aux_case({"arch": arch, "config": loaded, **case}))
        out[arch] = entry
    return out


def main() -> None:
    t0 = time.monotonic()
    with open(sys.argv[1]) as f:
        req = json.load(f)
    import sglang

    out: dict = {"version": sglang.__version__, "pkg": os.path.dirname(sglang.__file__)}
    out["context"] = [context_case(c) for c in req.get("context", [])]
    out["aux"] = [aux_case(c) for c in req.get("aux", [])]
    if req.get("families"):
        out["families"] = families()
    if req.get("family_cases"):
        import tempfile

        with tempfile.TemporaryDirectory() as root:
            out["family_cases"] = family_cases(out["families"], req["family_cases"], root)
    out["seconds"] = round(time.monotonic() - t0, 2)
    sys.stdout.write(TAG + json.dumps(out) + "\n")


if __name__ == "__main__":
    _own_environment()
    importlib.invalidate_caches()
    main()
