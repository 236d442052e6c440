"""Ask an installed SGLang for its own verdicts (run as a script by SGLang's python).

    SGLANG_PYTHON sglang_probe.py REQUEST.json      -> one line: PROBE {json}
    (the test suite's warm processes answer with this code too: tests/probe_serve.py)

Runs inside the python that will start the server, so it imports only SGLang, its
transformers and the standard library (never sgl_eagle_ext). Nothing heavy starts:
no weights are read, no model is built, no server process is spawned.

One question per launch ("launches": [{"argv": [...], "env": {...}, "cwd": ...}, ...]):
the launch's final SGLang argument list, asked in the launch's environment and working
directory (as_launched), one launch after the other in this one process. The answer:

  settings: SGLang's own parser (prepare_server_args) and resolution (resolve_once, or
      the dataclass __post_init__ of releases without it) on that argument list: every
      resolved field (a nested config by dotted name: cuda_graph_config.decode.bs), and
      which field SGLang changed, from what, by which hook;
  target / draft: ModelConfig.from_server_args on that record (so --json-model-override-
      args, --context-length, --trust-remote-code, --revision, --dtype ... apply), the
      draft with the target's context length as the draft worker gets it;
  target_class: the class SGLang's model loader picks (get_model_architecture: its
      registry, with its own fallbacks);
  aux: for EAGLE-3, that class's set_eagle3_layers_to_capture run on the draft's ids
      (a class without it is refused, as SGLang refuses it at startup);
  errors: every exception on the way (any type), with SGLang's message and the step.

Adaptive tables ("adaptive": [{"path": ..., "initial": N}, ...]): the buckets SGLang's
own loader (AdaptiveSpeculativeParams, what the server builds at startup) makes of each
config file: {"buckets": {batch size: candidate steps}} or {"error": ...} (tune live).

Config files ("config": [["--config", FILE, ...], ...]): the argument list SGLang's own
`prepare_server_args` makes of each (its config merger, stopped at its parse):
{"argv": [...]} or {"error": ...} (launcher/server_config.py, `-- --config FILE`).

Legacy requests (the oracle tests): "context", "aux", "families", "family_cases".
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
    """The model class SGLang's own registry resolves `arch` to (importing every model
    module, as the server does: a few seconds)."""
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
    return _capture_answer(cls, arch, n, ids, config)


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


# -- one launch: SGLang's own answer for the exact argument list ----------------------------
# Fields whose name has one of these words (api_key, ssl_keyfile_password, watermark_key,
# hf_token ...) are masked: an answer is cached, a secret never is. A number or a flag is
# no secret (tbo_token_distribution_threshold, ds_heavy_token_num): kept, so the fairness
# check sees arms that differ in it.
SECRET_WORDS = frozenset({"key", "keys", "password", "secret", "token", "passphrase"})


def _jsonable(value):
    """A JSON-able copy of a resolved value (records as dicts, anything else as text)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        pass
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if hasattr(value, "__struct_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__struct_fields__}
    if hasattr(value, "value") and type(value).__module__ != "builtins":  # an Enum
        return _jsonable(value.value)
    return str(value)


def _error(step: str, e: BaseException, file: str | None = None) -> dict:
    """An exception as SGLang raised it: its type, its own message, the step it ended."""
    text = str(e).strip() or repr(e)
    if isinstance(e, SystemExit):  # argparse: its message went to stderr (captured)
        text = getattr(e, "sgl_message", "") or f"the argument parser exited ({e.code})"
    read = _config_read(e)
    return {
        "step": step,
        "type": type(e).__name__,
        "message": text[:1500],
        "file": read[0] if read else file,
        "draft": read[1] if read else None,
    }


_PATH_NAMES = ("model_path", "pretrained_model_name_or_path", "model_name_or_path", "path")


def _config_read(e: BaseException) -> tuple[str, bool] | None:
    """(the model directory, whether as a draft) SGLang or transformers was reading when
    `e` was raised: the innermost frame whose own arguments name a local directory."""
    tb = e.__traceback__
    found = None
    while tb is not None:
        local = tb.tb_frame.f_locals
        for name in _PATH_NAMES:
            value = local.get(name)
            if isinstance(value, str) and os.path.isdir(value):
                found = (value, bool(local.get("is_draft_model")))
                break
        tb = tb.tb_next
    return found


def _fields(obj) -> list[str]:
    if hasattr(obj, "__dataclass_fields__"):
        return list(obj.__dataclass_fields__)
    return list(getattr(type(obj), "__struct_fields__", ()))


def _masked(name: str, value):
    if isinstance(value, bool | int | float) or value is None:
        return value
    if SECRET_WORDS & set(re.split(r"[._]", name.lower())):
        return "***"
    return value


def _leaves(name: str, value) -> dict:
    """A resolved value by dotted name: a nested config (0.5.19+'s cuda_graph_config)
    one entry per leaf, as the release table's rules and the fairness check name them
    ("cuda_graph_config.decode.bs"); anything else itself."""
    if isinstance(value, dict) and value:
        out = {}
        for k, v in value.items():
            out.update(_leaves(f"{name}.{k}", v))
        return out
    return {name: value}


@contextlib.contextmanager
def _traced_post_init(cls, log: dict):
    """Releases without resolve_once resolve in the dataclass's __post_init__: snapshot
    the parsed fields before it and note, per field, the last method that wrote it."""
    own_post = cls.__dict__.get("__post_init__")
    own_set = cls.__dict__.get("__setattr__")
    if own_post is None:
        yield
        return
    parent_set = cls.__setattr__

    def tracer(self, name, value):
        log.setdefault("by", {})[name] = sys._getframe(1).f_code.co_name
        parent_set(self, name, value)

    def post_init(self):
        log["raw"] = {f: getattr(self, f, None) for f in _fields(self)}
        cls.__setattr__ = tracer
        try:
            own_post(self)
        finally:
            if own_set is None:
                del cls.__setattr__
            else:
                cls.__setattr__ = own_set

    cls.__post_init__ = post_init
    try:
        yield
    finally:
        cls.__post_init__ = own_post


def _parse(argv: list[str]):
    """SGLang's own parser on the launch's arguments (its prepare_server_args)."""
    import io

    from sglang.srt import server_args as sa_mod

    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return sa_mod.prepare_server_args(list(argv))
    except SystemExit as e:  # argparse's "error: ..." line is SGLang's refusal
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        e.sgl_message = lines[-1] if lines else ""
        raise


def settings(argv: list[str]) -> tuple[object, dict]:
    """(the resolved ServerArgs or None, {"fields", "changes", "attributed", "error"})."""
    from sglang.srt.server_args import ServerArgs

    out: dict = {"fields": {}, "changes": [], "attributed": True, "error": None}
    log: dict = {}
    with _traced_post_init(ServerArgs, log):
        try:
            sa = _parse(argv)
        except BaseException as e:
            out["error"] = _error("settings", e)
            return None, out
    if hasattr(sa, "resolve_once"):
        raw_before = {f: getattr(sa, f, None) for f in _fields(sa)}
        try:
            sa.resolve_once()
        except BaseException as e:
            out["error"] = _error("settings", e)
            return None, out
        raw = getattr(sa, "_raw_input", None) or raw_before
        by: dict = {}
        for source, declared in getattr(sa, "_resolved_overrides", None) or ():
            for name in declared:
                by[name] = source
        out["attributed"] = hasattr(sa, "_resolved_overrides")
        resolved = sa.resolved_dict() if hasattr(sa, "resolved_dict") else None
        after = resolved or {f: getattr(sa, f, None) for f in _fields(sa)}
    else:  # resolved in __post_init__ (0.5.10-0.5.16)
        raw, by = log.get("raw", {}), log.get("by", {})
        out["attributed"] = bool(by)
        after = {f: getattr(sa, f, None) for f in _fields(sa)}
    for name, value in after.items():
        if name.startswith("_"):
            continue
        before = _leaves(name, _jsonable(raw.get(name)))
        source = by.get(name, "")
        for key, leaf in _leaves(name, _jsonable(value)).items():
            now = _masked(key, leaf)
            out["fields"][key] = now
            was = _masked(key, before.get(key))
            if name in raw and was != now:
                out["changes"].append([key, was, now, "" if source == "__init__" else source])
    return sa, out


def _config_kwargs(build, length):
    """from_server_args' context length: its argument (0.5.19+) or the record's own."""
    import inspect

    from sglang.srt.configs.model_config import ModelConfig

    if length is None:
        return build, {}
    if "context_length" in inspect.signature(ModelConfig.from_server_args).parameters:
        return build, {"context_length": length}
    sa = copy.copy(build)
    sa.context_length = length
    return sa, {}


def _launch_config(sa, path: str | None, draft: bool, length: int | None) -> dict:
    """SGLang's ModelConfig for the target (path None) or the draft, from the record."""
    from sglang.srt.configs.model_config import ModelConfig

    kw: dict = {}
    if draft:
        kw = {"model_path": path, "is_draft_model": True}
        revision = getattr(sa, "speculative_draft_model_revision", None)
        if revision:
            kw["model_revision"] = revision
    record, extra = _config_kwargs(sa, length)
    mc = ModelConfig.from_server_args(record, **kw, **extra)
    text = mc.hf_text_config
    eagle = getattr(mc.hf_config, "eagle_config", None)
    eagle = eagle if isinstance(eagle, dict) else {}
    return {
        "mc": mc,
        "len": int(mc.context_len),
        "layers": getattr(mc, "num_hidden_layers", getattr(text, "num_hidden_layers", None)),
        "hidden": getattr(mc, "hidden_size", getattr(text, "hidden_size", None)),
        "vocab": getattr(mc, "vocab_size", getattr(text, "vocab_size", None)),
        "arch": (getattr(mc.hf_config, "architectures", None) or [None])[0],
        "ids": eagle.get("eagle_aux_hidden_state_layer_ids"),
        "use_aux": eagle.get("use_aux_hidden_state", True),
    }


def _plain_config(got: dict) -> dict:
    return {k: v for k, v in got.items() if k != "mc"}


def _own_length(mc) -> int:
    """The length SGLang derives from the config alone (its get_context_length)."""
    return int(sys.modules[type(mc).__module__].get_context_length(mc.hf_text_config))


def _capture(cls, arch: str, target: dict, draft: dict) -> dict:
    """What SGLang's startup does with the draft's ids on the target class."""
    n, ids = target.get("layers"), draft.get("ids")
    if not hasattr(cls, "set_eagle3_layers_to_capture"):
        bare = cls.__new__(cls)
        try:  # SGLang's own startup step (0.5.23+), else its plain method call
            try:
                from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
                    configure_aux_hidden_state_capture,
                )
            except ImportError:
                bare.set_eagle3_layers_to_capture(ids)
            else:
                configure_aux_hidden_state_capture(
                    model=bare,
                    eagle_use_aux_hidden_state=True,
                    eagle_aux_hidden_state_layer_ids=ids,
                    dflash_use_aux_hidden_state=False,
                    dflash_target_layer_ids=None,
                    is_dspark=False,
                )
        except BaseException as e:
            return {"refused": _error("capture", e)}
        return {
            "refused": {
                "step": "capture",
                "type": "",
                "file": None,
                "message": f"{arch} has no set_eagle3_layers_to_capture",
            }
        }
    if not isinstance(n, int):
        return {"unresolved": "the target's layer count is unknown to SGLang's ModelConfig"}
    return _capture_answer(cls, arch, n, ids, target["mc"].hf_config)


def _capture_answer(cls, arch: str, n: int, ids, config) -> dict:
    """The class's own capture indices for these ids (or what it raised), and which
    boundaries (the embedding output, the last layer) its decoder loop delivers."""
    try:
        out = capture_indices(cls, arch, n, ids, config)
    except Exception as e:  # what SGLang's own method does with these ids
        return {"raised": f"{type(e).__name__}: {e}"[:300]}
    cap = out.get("layers_to_capture")
    if cap:
        out["boundaries"] = _boundary_run(cls, n, [c for c in cap if c in (0, n)] or [0, n])
    return out


# -- the target host: SGLang resolving as on a GPU this machine does not have ---------------
# The launch's "host" (launcher/preflight/hosts.py: GPU model, memory, compute capability,
# count) stands in for the device queries SGLang's parser and resolution make: its own
# platform override (runtime_context.override_platform, 0.5.19+) and, on every release,
# the device probes of sglang.srt.utils.common wherever a module imported them by name.
HOST_ENV = "EAGLE_EXT_PROBE_HOST"


def _host_probes(host: dict) -> dict:
    """SGLang's device-probe functions (utils.common names) answered for `host`."""
    major, minor = (int(x) for x in host["capability"])
    mem, count, name = float(host["memory_mib"]), int(host["count"]), str(host["name"])

    def flag(value):
        return lambda *a, **k: value

    return {
        "is_cuda": flag(True),
        "is_cuda_alike": flag(True),
        "is_sm80_supported": flag(major == 8),
        "is_sm90_supported": flag(major == 9),
        "is_hopper_with_cuda_12_3": flag(major == 9),
        "is_sm100_supported": flag(major == 10),
        "is_sm110_supported": flag(major == 11),
        "is_sm100_or_sm110_supported": flag(major in (10, 11)),
        "is_sm120_supported": flag(major == 12),
        "is_blackwell_supported": flag(major in (10, 11, 12)),
        "is_blackwell": flag(major in (10, 11, 12)),
        "is_sm120": flag((major, minor) == (12, 0)),
        "is_sm121": flag((major, minor) == (12, 1)),
        "get_device_sm": flag(major * 10 + minor),
        "get_device_capability": flag((major, minor)),
        "get_device": lambda device_id=None: "cuda" if device_id is None else f"cuda:{device_id}",
        "get_device_count": flag(count),
        "get_device_name": flag(name),
        "get_device_memory_capacity": flag(mem),
        "get_nvgpu_memory_capacity": flag(mem),
        "is_flashinfer_available": flag(bool(host.get("flashinfer", True))),
    }


@contextlib.contextmanager
def as_host(host: dict | None):
    """Meanwhile, SGLang's device queries answer for `host` (None: this machine)."""
    if not host:
        yield
        return
    _warm()  # SGLang's modules import as on this machine (their import-time probes
    _import_all("sglang.srt.arg_groups")  # pick kernels that exist here); then the host
    from sglang.srt.utils import common

    fakes = _host_probes(host)
    originals = {n: getattr(common, n) for n in fakes if hasattr(common, n)}
    by_id = {id(f): n for n, f in originals.items()}
    swapped = []  # (module, attribute, original)
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("sglang") or mod is None:
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, value in items:
            n = by_id.get(id(value))
            if n is not None:
                swapped.append((mod, attr, value))
                setattr(mod, attr, fakes[n])
    override = None
    try:  # SGLang's own platform override (0.5.19+): its readers go through it
        from sglang.srt.runtime_context import override_platform
    except ImportError:
        pass
    else:
        major, minor = (int(x) for x in host["capability"])
        facts = {
            "is_cuda": True,
            "is_sm90": major == 9,
            "is_sm100": major == 10,
            "is_sm100_or_sm110": major in (10, 11),
            "is_sm110": major == 11,
            "is_sm120": major == 12,
            "is_blackwell": major in (10, 11, 12),
            "is_hopper_with_cuda_12_3": major == 9,
            "device_sm": major * 10 + minor,
            "device_capability": (major, minor),
            "has_flashinfer": bool(host.get("flashinfer", True)),
        }
        try:
            override = override_platform(**facts)
            override.install()
        except ValueError:  # a release that knows fewer facts: the probes above do
            override = None
    try:
        yield
    finally:
        if override is not None:
            override.restore()
        for mod, attr, value in swapped:
            setattr(mod, attr, value)
        back = {id(fakes[n]): originals[n] for n in originals}
        for mod_name, mod in list(sys.modules.items()):  # modules imported meanwhile
            if mod_name.startswith("sglang") and mod is not None:
                for attr, value in list(getattr(mod, "__dict__", {}).items()):
                    if id(value) in back:
                        setattr(mod, attr, back[id(value)])


def _import_all(package: str) -> None:
    """Every module of `package` (resolution imports its hooks lazily)."""
    import pkgutil

    try:
        pkg = importlib.import_module(package)
    except BaseException:
        return
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except BaseException:
            pass


def _host_of_environment() -> dict | None:
    raw = os.environ.get(HOST_ENV)
    if not raw:
        return None
    try:
        host = json.loads(raw)
    except ValueError:
        return None
    return host if isinstance(host, dict) and "memory_mib" in host else None


def launch_case(case: dict) -> dict:
    """Every answer SGLang gives about one launch (see the module docstring)."""
    argv = list(case["argv"])
    out: dict = {"errors": []}
    if case.get("plugins", True):
        try:  # what launch_server does first on releases with plugins
            from sglang.srt.plugins import load_plugins
        except ImportError:
            pass
        else:
            try:
                load_plugins()
            except BaseException as e:
                out["errors"].append(_error("plugins", e))
    sa, out["settings"] = settings(argv)
    quiet = False  # resolution refused: the model answers below are context, not verdicts
    if out["settings"]["error"]:
        out["errors"].append(out["settings"]["error"])
        try:  # its ModelConfig on the parsed record: what resolution itself was building
            sa, quiet = _parse(argv), True
        except BaseException:
            sa = None
    if sa is None:
        return out
    errors = [] if quiet else out["errors"]
    model = getattr(sa, "model_path", None)
    draft_path = getattr(sa, "speculative_draft_model_path", None)
    algorithm = str(getattr(sa, "speculative_algorithm", None) or "").upper()
    ctx: dict = {}
    try:
        own = _launch_config(sa, None, False, 1)
        ctx["target_own"] = {**_plain_config(own), "len": _own_length(own["mc"])}
        target = _launch_config(sa, None, False, None)
        ctx["target"] = _plain_config(target)
    except BaseException as e:
        err = _error("target", e, model)
        if "target_own" in ctx:  # the length check: ModelConfig refused --context-length
            ctx["target"] = {"error": err["message"]}
        else:
            errors.append(err)
        target = None
    out["context"] = ctx
    draft = None
    if draft_path and "target_own" in ctx:
        effective = (ctx["target"].get("len") if target else None) or getattr(
            sa, "context_length", None
        )
        try:
            own = _launch_config(sa, draft_path, True, 1)
            ctx["draft_own"] = {**_plain_config(own), "len": _own_length(own["mc"])}
        except BaseException as e:
            errors.append(_error("draft", e, draft_path))
        else:
            try:
                draft = _launch_config(sa, draft_path, True, effective)
                ctx["draft"] = _plain_config(draft)
            except ValueError as e:  # the draft check every TP worker runs
                ctx["draft"] = {"error": str(e)[:600]}
                draft = own
            except BaseException as e:
                errors.append(_error("draft", e, draft_path))
    if target is None:
        return out
    if not quiet:
        try:  # what the memory plan (memory_plan.py) divides: SGLang's own reading
            out["memory"] = _memory_facts(sa, target["mc"], draft["mc"] if draft else None)
        except BaseException as e:
            out["memory"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    try:
        from sglang.srt.model_loader.utils import get_model_architecture

        cls, arch = get_model_architecture(target["mc"])
        out["target_class"] = {"arch": arch, "class": cls.__name__, "module": cls.__module__}
    except BaseException as e:
        errors.append(_error("registry", e, model))
        return out
    if algorithm == "EAGLE3" and draft is not None and draft.get("use_aux", True):
        out["aux"] = _capture(cls, arch, target, draft)
        if "refused" in out["aux"]:
            errors.append({**out["aux"]["refused"], "file": model})
    if quiet:  # only what SGLang's ModelConfig said; the refusal above is the verdict
        out = {k: v for k, v in out.items() if k in ("errors", "settings", "context")}
    return out


def _kv_facts(mc, tp: int) -> dict:
    """One model's KV geometry as SGLang's ModelConfig derives it (per TP rank)."""
    arch = getattr(mc, "attention_arch", None)
    mla = getattr(arch, "name", str(arch)) == "MLA"
    text = mc.hf_text_config
    try:
        kv_heads = int(mc.get_num_kv_heads(tp))
    except Exception:
        kv_heads = None
    return {
        "mla": mla,
        "layers": int(getattr(mc, "num_hidden_layers", 0) or text.num_hidden_layers),
        "kv_lora_rank": getattr(mc, "kv_lora_rank", None) if mla else None,
        "qk_rope_head_dim": getattr(mc, "qk_rope_head_dim", None) if mla else None,
        "kv_heads_per_rank": kv_heads,
        "head_dim": getattr(mc, "head_dim", None),
        "v_head_dim": getattr(mc, "v_head_dim", None),
        "dtype": str(getattr(mc, "dtype", "")).replace("torch.", ""),
        "multimodal": bool(getattr(mc, "is_multimodal", False)),
        "arch": (getattr(mc.hf_config, "architectures", None) or [None])[0],
    }


def _vlm_factor(sa, mc, gpu):
    """What SGLang's own adjust_mem_fraction_for_vlm multiplies mem_fraction_static by
    for this model (run on 1.0): a module function (0.5.19+) or a ServerArgs method."""
    try:
        from sglang.srt.arg_groups.memory_hook import adjust_mem_fraction_for_vlm
    except ImportError:
        probe = copy.copy(sa)
        object.__setattr__(probe, "mem_fraction_static", 1.0)
        type(sa).adjust_mem_fraction_for_vlm(probe, mc)
        return float(probe.mem_fraction_static)
    return float(adjust_mem_fraction_for_vlm(1.0, mc, False, gpu))


def _memory_facts(sa, target_mc, draft_mc) -> dict:
    """The device memory SGLang sees (the host's under as_host) and both models' KV."""
    from sglang.srt.utils import common

    tp = int(getattr(sa, "tp_size", 1) or 1)
    try:
        gpu = common.get_device_memory_capacity(getattr(sa, "device", None))
    except Exception:
        gpu = None
    kv_dtype = str(getattr(sa, "kv_cache_dtype", "auto") or "auto")
    return {
        "vlm_factor": _vlm_factor(sa, target_mc, gpu) if target_mc.is_multimodal else None,
        "gpu_mib": gpu,
        "kv_cache_dtype": kv_dtype,
        "target": _kv_facts(target_mc, tp),
        "draft": _kv_facts(draft_mc, tp) if draft_mc is not None else None,
    }


# SGLang's modules that memoize a model's configuration by its path (get_config,
# get_generation_config, ...; 0.5.10's single module and 0.5.19+'s package).
_CONFIG_MEMOS = ("sglang.srt.configs", "sglang.srt.utils.hf_transformers", "sglang.srt.hf_")


def _forget_configs() -> None:
    """Drop the configurations SGLang memoized for the launch before: it may have read
    the same relative path in another directory, or changed a cached config in place.
    (Its other memos, the model registry's imports above all, stay: the start
    environment that decides them is the same for every launch of one request.)"""
    for name, mod in list(sys.modules.items()):
        if not name.startswith(_CONFIG_MEMOS):
            continue
        for value in list(vars(mod).values()):
            try:  # a stand-in for a missing optional library raises on any attribute
                clear = getattr(value, "cache_clear", None)
                if callable(clear) and getattr(value, "__module__", None) == name:
                    clear()
            except Exception:
                pass


@contextlib.contextmanager
def as_launched(case: dict):
    """Meanwhile, the launch's own environment and working directory, and none of the
    configs SGLang memoized for the launch before: "env" holds what differs from this
    process's environment (a value, or None: unset), "cwd" where the server will run.
    What the interpreter fixed at its start (PYTHONPATH, and SGLang's variables, which
    its modules may read when imported) is the same for every launch of one request
    (ask_sglang.py groups the launches by it)."""
    env, saved_env, saved_cwd = case.get("env") or {}, dict(os.environ), os.getcwd()
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if case.get("cwd"):
            os.chdir(case["cwd"])
        _forget_configs()
        yield
    finally:  # what SGLang's resolution set in os.environ goes too: no launch sees another's
        os.chdir(saved_cwd)
        if dict(os.environ) != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)


def adaptive_case(case: dict) -> dict:
    """The buckets SGLang's loader builds from one adaptive config file."""
    try:
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

        p = AdaptiveSpeculativeParams(initial_steps=int(case["initial"]), cfg_path=case["path"])
        return {"buckets": {str(k): list(s.candidate_steps) for k, s in p._slots.items()}}
    except BaseException as e:  # SGLang refused the file: its own words
        return {"error": _error("adaptive", e, case.get("path"))}


def config_case(asked: list) -> dict:
    """The flags SGLang's prepare_server_args merges from `--config FILE` (its config
    merger runs; its parse is stopped where the merged list reaches it)."""
    import argparse

    class Merged(Exception):
        pass

    def merged(self, args=None, namespace=None):
        raise Merged(list(args))

    stock = argparse.ArgumentParser.parse_args
    try:
        from sglang.srt.server_args import prepare_server_args

        argparse.ArgumentParser.parse_args = merged
        prepare_server_args([str(a) for a in asked])
        return {"error": _error("config", RuntimeError("SGLang never parsed the merged list"))}
    except Merged as m:
        return {"argv": [str(a) for a in m.args[0]]}
    except BaseException as e:  # SGLang refused the file: its own words
        return {"error": _error("config", e)}
    finally:
        argparse.ArgumentParser.parse_args = stock


def answer(req: dict) -> dict:
    """SGLang's answers to one request (the launches' and the legacy kinds)."""
    t0 = time.monotonic()
    import sglang

    out: dict = {"version": sglang.__version__, "pkg": os.path.dirname(sglang.__file__)}
    if "launches" in req:
        out["launches"] = []
        for case in req["launches"]:
            t1 = time.monotonic()
            try:
                with as_launched(case), as_host(_host_of_environment()):
                    got = launch_case(case)
                    got["host"] = _host_of_environment()
            except BaseException as e:  # a bug here is still one answer, never a crash
                got = {"errors": [_error("probe", e)]}
            got["seconds"] = round(time.monotonic() - t1, 2)
            out["launches"].append(got)
    out["adaptive"] = [adaptive_case(c) for c in req.get("adaptive", [])]
    out["config"] = [config_case(c) for c in req.get("config", [])]
    out["context"] = [context_case(c) for c in req.get("context", [])]
    out["aux"] = [aux_case(c) for c in req.get("aux", [])]
    if req.get("families"):
        out["families"] = families()
    if req.get("family_cases"):
        import tempfile

        with tempfile.TemporaryDirectory() as root:
            out["family_cases"] = family_cases(out["families"], req["family_cases"], root)
    out["seconds"] = round(time.monotonic() - t0, 2)
    return out


def main() -> None:
    with open(sys.argv[1]) as f:
        req = json.load(f)
    sys.stdout.write(TAG + json.dumps(answer(req)) + "\n")


# -- what every answer imports ----------------------------------------------------------
def _warm() -> None:
    """SGLang's argument parser, ModelConfig, its model registry (every model module) and
    resolution's hooks; a failure here is left for the answer to report."""
    for name in (
        "sglang",
        "sglang.srt.server_args",
        "sglang.srt.configs.model_config",
        "sglang.srt.models.registry",
        "sglang.srt.model_loader.utils",
    ):
        try:
            importlib.import_module(name)
        except BaseException:
            pass
    _import_all("sglang.srt.arg_groups")  # resolution's hooks (as_host needs them first)


if __name__ == "__main__":
    _own_environment()
    importlib.invalidate_caches()
    main()
