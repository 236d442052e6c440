"""Preflight: the Kimi-K2.5 case the project's first users hit (a 128k draft for a 256k target), aux-layer conventions per release, shapes, bad
input, host checks, and SGLang's context-length rule against our reimplementation."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import ports, releases, wheels
from sgl_eagle_ext.launcher.preflight import aux_layers, context_rule, host, run
from sgl_eagle_ext.launcher.preflight.cli import main as preflight_main
from sgl_eagle_ext.launcher.preflight.overlay import OVERLAY_NOTE

R = releases.BY_VERSION
OLD, NEW = R["0.5.10.post1"], R["0.5.23"]
# the CPU launch's environment (launch/overlays/cpu.toml): SGLang is asked in it
CPU_ENV = {
    **os.environ,
    "SGLANG_USE_CPU_ENGINE": "1",
    "TRITON_INTERPRET": "1",
    "EAGLE_EXT_CPU": "1",
}
KIMI_ROPE = {
    "beta_fast": 1,
    "beta_slow": 1,
    "factor": 64,
    "mscale": 1,
    "mscale_all_dim": 1,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}


def kimi_target(**text) -> dict:
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "hidden_size": 7168,
            "num_hidden_layers": 61,
            "vocab_size": 163840,
            "max_position_embeddings": 262144,
            "rope_theta": 50000,
            "rope_scaling": KIMI_ROPE,
            **text,
        },
    }


def eagle3_draft(ids=(2, 30, 58), **top) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
        "max_position_embeddings": 131072,
        "rope_theta": 50000,
        "rope_scaling": KIMI_ROPE,
        "tie_word_embeddings": False,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(ids or ()),
            "use_aux_hidden_state": True,
        },
    }
    if ids is None:
        del cfg["eagle_config"]
    cfg.update(top)
    return cfg


DRAFT_TENSORS = {
    "fc.weight": [7168, 3 * 7168],
    "d2t": [32000],
    "t2d": [163840],
    "lm_head.weight": [32000, 7168],
    "midlayer.self_attn.q_proj.weight": [8, 8],
}


def write_safetensors_header(path: Path, tensors: dict) -> None:
    """A safetensors file whose header is real (the data is not: nothing reads it)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def model_dir(root: Path, name: str, config, tensors: dict | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if tensors is not None:
        write_safetensors_header(d / "model.safetensors", tensors)
    return d


@pytest.fixture
def pair(tmp_path):
    def make(target=None, draft=None, tensors=DRAFT_TENSORS):
        t = model_dir(tmp_path, "target", target or kimi_target())
        d = model_dir(tmp_path, "draft", draft or eagle3_draft(), tensors)
        return t, d

    return make


def check(t, d, release=NEW, args=(), **kw):
    kw.setdefault("host_checks", False)
    kw.setdefault("ask", False)  # the rules; tests/test_ask_sglang.py asks SGLang
    return run(str(t), str(d) if d else None, release, list(args), **kw)


def ids_of(report, severity=None):
    return {f.id for f in report.findings if severity is None or f.severity == severity}


def tree_digest(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ------------------------------- the first users' case: Kimi-K2.5 with a 128k-context draft


def test_kimi_short_draft_is_a_context_error_with_both_fixes_and_exit_1(pair, capsys):
    t, d = pair()
    rc = preflight_main(
        ["--model-path", str(t), "--draft-model-path", str(d), "--no-host", "--rules-only"]
    )
    out = capsys.readouterr().out
    assert rc == 1
    line = next(ln for ln in out.splitlines() if "context.draft-shorter" in ln)
    assert line.startswith("ERROR") and f"{d}/config.json: max_position_embeddings" in line
    assert "131072" in line and "262144" in line
    assert "--context-length 131072" in out and "--fix" in out
    assert "preflight STOP" in out


def test_fix_writes_an_overlay_and_leaves_the_original_byte_identical(pair, tmp_path, capsys):
    t, d = pair()
    (d / "tokenizer.json").write_text("{}")
    (d / "sub").mkdir()
    before = tree_digest(d)
    overlays = tmp_path / "overlays"
    rc = preflight_main(
        [
            "--model-path",
            str(t),
            "--draft-model-path",
            str(d),
            "--no-host",
            "--rules-only",
            "--fix",
            "--overlay-dir",
            str(overlays),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert tree_digest(d) == before and sorted(p.name for p in d.iterdir()) == [
        "config.json",
        "model.safetensors",
        "sub",
        "tokenizer.json",
    ]
    (ov,) = overlays.iterdir()
    assert f"--speculative-draft-model-path {ov}" in out
    cfg = json.loads((ov / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 262144
    assert {k: v for k, v in cfg.items() if k != "max_position_embeddings"} == {
        k: v for k, v in eagle3_draft().items() if k != "max_position_embeddings"
    }
    for name in ("model.safetensors", "tokenizer.json", "sub"):
        assert (ov / name).is_symlink() and (ov / name).resolve() == (d / name).resolve()
    assert json.loads((ov / OVERLAY_NOTE).read_text())["original"] == str(d.resolve())
    # The overlay passes on its own, and a second --fix rebuilds it in place.
    assert check(t, ov).ok
    again = check(t, d, fix=True, overlay_root=overlays)
    assert again.overlay == ov and again.ok and len(list(overlays.iterdir())) == 1


def test_context_length_at_the_draft_limit_passes(pair):
    t, d = pair()
    report = check(t, d, args=["--context-length", "131072"])
    assert report.ok, report.render()
    assert check(t, d, args=["--context-length", "128Ki"]).ok
    assert not check(t, d, args=["--context-length", "131073"]).ok


def test_context_length_beyond_the_target_is_an_error(pair):
    t, d = pair(draft=eagle3_draft(max_position_embeddings=1 << 20))
    report = check(t, d, args=["--context-length", "300000"])
    assert "context.over-target" in ids_of(report, "error")
    assert "context.bad-value" in ids_of(check(t, d, args=["--context-length", "lots"]), "error")


def test_allow_env_turns_the_error_into_a_warning(pair):
    t, d = pair()
    report = check(t, d, env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    assert report.ok and "context.draft-shorter" in ids_of(report, "warning")


def test_skip_waives_a_finding_knowingly(pair, capsys):
    t, d = pair()
    rc = preflight_main(
        [
            "--model-path",
            str(t),
            "--draft-model-path",
            str(d),
            "--no-host",
            "--rules-only",
            "--skip",
            "context.draft-shorter",
        ]
    )
    assert rc == 0 and "WAIVED  context.draft-shorter" in capsys.readouterr().out
    assert check(t, d, skip=["context"]).ok  # a prefix waives the group
    # a typo waives nothing, and says so with the nearest id of the run
    report = check(t, d, skip=["context.draft-short", "context"])
    (typo,) = [f for f in report.findings if f.id == "preflight.skip-unmatched"]
    assert typo.severity == "warning" and report.ok
    assert "--skip context.draft-short matched no finding of this run; did you mean " in (
        typo.message
    )


def test_json_output(pair, capsys):
    t, d = pair()
    assert (
        preflight_main(
            ["--model-path", str(t), "--draft-model-path", str(d), "--no-host", "--json"]
        )
        == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["release"] == releases.resolve(None)[0].version
    err = next(f for f in report["findings"] if f["id"] == "context.draft-shorter")
    assert err["severity"] == "error" and err["field"] == "max_position_embeddings"
    assert err["file"] == f"{d}/config.json" and "--context-length" in err["fix"]
    verdict = err["data"].pop("verdict")  # SGLang's own where this python has the release
    # a GPU launch checked where there is no GPU: resolved as on the described host
    assert verdict.split(" as on ")[0] in (
        f"by SGLang {report['release']}",
        "predicted from the release table",
    )
    assert err["data"] == {"draft_limit": 131072, "target_context": 262144}


def test_rope_differences_are_warnings(pair):
    t, d = pair(
        draft=eagle3_draft(rope_theta=10000, rope_scaling=None, max_position_embeddings=262144)
    )
    report = check(t, d)
    assert {"rope.theta-differs", "rope.scaling-differs"} <= ids_of(report, "warning")
    assert report.ok


def test_retarget_points_the_launch_at_the_overlay(pair, tmp_path):
    t, d = pair()
    report = check(t, d, fix=True, overlay_root=tmp_path / "ov")
    args = ["--model-path", str(t), "--speculative-draft-model-path", str(d), "--tp-size", "8"]
    assert report.retarget(args) == [
        "--model-path",
        str(t),
        "--speculative-draft-model-path",
        str(report.overlay),
        "--tp-size",
        "8",
    ]
    assert report.draft_model_path == str(report.overlay)


# ------------------------------------------------------------------ aux layers


def test_layer_id_minus_one_is_an_error(pair):
    t, d = pair(draft=eagle3_draft(ids=(-1, 30, 58), max_position_embeddings=262144))
    for release in releases.RELEASES:
        report = check(t, d, release)
        assert "aux.embedding" in ids_of(report, "error"), release.version
        assert not report.ok


LLAMA_TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}
GPT_OSS_TARGET = {
    "architectures": ["GptOssForCausalLM"],
    "hidden_size": 2880,
    "num_hidden_layers": 24,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
}


@pytest.mark.parametrize(
    "arch, n, ids, expected",
    [
        # Llama/Qwen: always +1, in every release.
        ("LlamaForCausalLM", 32, [1, 15, 28], {v.version: [2, 16, 29] for v in releases.RELEASES}),
        (
            "Qwen3MoeForCausalLM",
            48,
            [1, 23, 44],
            {v.version: [2, 24, 45] for v in releases.RELEASES},
        ),
        # DeepSeek/Kimi: +1 always up to 0.5.10; from 0.5.13 only when the first id is 1.
        (
            "KimiK25ForConditionalGeneration",
            61,
            [2, 30, 58],
            {
                "0.5.10.post1": [3, 31, 59],
                **{
                    v: [2, 30, 58] for v in ("0.5.13.post1", "0.5.16", "0.5.19", "0.5.21", "0.5.23")
                },
            },
        ),
        (
            "DeepseekV3ForCausalLM",
            61,
            [1, 29, 57],
            {v.version: [2, 30, 58] for v in releases.RELEASES},
        ),
        (
            "KimiK25ForConditionalGeneration",
            61,
            None,
            {v.version: [2, 30, 58] for v in releases.RELEASES},
        ),
        # GPT-OSS: from 0.5.19 ids whose max is N are used as is.
        (
            "GptOssForCausalLM",
            24,
            [1, 12, 24],
            {
                "0.5.10.post1": [2, 13, 25],
                "0.5.13.post1": [2, 13, 25],
                "0.5.16": [2, 13, 25],
                "0.5.19": [1, 12, 24],
                "0.5.21": [1, 12, 24],
                "0.5.23": [1, 12, 24],
            },
        ),
    ],
)
def test_effective_layers_per_release_and_architecture(arch, n, ids, expected):
    fam = aux_layers.family(arch)
    got = {
        r.version: aux_layers.effective(ids, n, aux_layers.rules(r, set())[fam])
        for r in releases.RELEASES
    }
    assert got == expected


def test_effective_layers_are_printed_with_the_other_releases(pair):
    t, d = pair(draft=eagle3_draft(max_position_embeddings=262144))
    for release, eff in ((OLD, [3, 31, 59]), (NEW, [2, 30, 58])):
        note = next(f for f in check(t, d, release).findings if f.id == "aux.effective")
        assert note.data["effective"] == eff
        assert f"entering layers [{', '.join(map(str, eff))}]" in note.message
        assert "0.5.10.post1: [3, 31, 59]; 0.5.13.post1..0.5.23: [2, 30, 58]" in note.message


def test_old_release_warns_about_the_graph_reset_and_the_offset_unless_patched(pair):
    t, d = pair(draft=eagle3_draft(max_position_embeddings=262144))
    report = check(t, d, OLD)
    assert {"aux.cuda-graph-reset", "aux.deepseek-offset"} <= ids_of(report, "warning")
    assert "aux.cuda-graph-reset" not in ids_of(check(t, d, OLD, ["--disable-cuda-graph"]))
    assert not {"aux.cuda-graph-reset", "aux.deepseek-offset"} & ids_of(check(t, d, NEW))
    # With both patches applied, 0.5.10 captures what 0.5.13+ capture.
    both = {aux_layers.PATCH_GRAPHS, aux_layers.PATCH_OFFSET}
    t_md, d_md = _dirs(t, d)
    found = aux_layers.check(t_md, d_md, OLD, both, True, 3)
    assert not [f for f in found if f.severity != "info"]
    assert next(f for f in found if f.id == "aux.effective").data["effective"] == [2, 30, 58]


def _dirs(t, d):
    from sgl_eagle_ext.launcher.preflight import model_dirs

    return model_dirs.load("target", "--model-path", str(t))[0], model_dirs.load(
        "draft", "--draft-model-path", str(d)
    )[0]


@pytest.mark.parametrize(
    "draft, finding, severity",
    [
        (
            eagle3_draft(ids=None, eagle_aux_hidden_state_layer_ids=[2, 30, 58]),
            "aux.top-level-ignored",
            "warning",
        ),
        (
            eagle3_draft(ids=(2, 30, 58), eagle_aux_hidden_state_layer_ids=[1, 29, 57]),
            "aux.top-level-ignored",
            "warning",
        ),
        (eagle3_draft(ids=None, eagle_config="[2, 30, 58]"), "aux.eagle-config", "warning"),
        (eagle3_draft(ids=(2, 30, 30)), "aux.duplicates", "error"),
        (eagle3_draft(ids=(58, 30, 2)), "aux.unsorted", "warning"),
        (eagle3_draft(ids=(2, 30, 61)), "aux.out-of-range", "error"),
        (eagle3_draft(ids=(2, 30, 58, 59)), "aux.fc-mismatch", "error"),
        (eagle3_draft(ids=("2", 30, 58)), "config.bad-field", "error"),
        (eagle3_draft(ids=()), "aux.fc-mismatch", "error"),
        (
            eagle3_draft(
                eagle_config={
                    "eagle_aux_hidden_state_layer_ids": [2, 30, 58],
                    "use_aux_hidden_state": False,
                }
            ),
            "aux.disabled",
            "warning",
        ),
    ],
)
def test_aux_layer_findings(pair, draft, finding, severity):
    t, d = pair(draft={**draft, "max_position_embeddings": 262144})
    report = check(t, d)
    assert finding in ids_of(report, severity), report.render()


def test_a_bug_in_one_check_is_a_finding_not_a_traceback(pair, monkeypatch):
    t, d = pair()

    def broken(*args):
        raise KeyError("oops")

    monkeypatch.setattr(aux_layers, "check", broken)
    report = check(t, d)
    assert "aux.internal" in ids_of(report, "warning")
    assert "context.draft-shorter" in ids_of(report, "error")  # the other checks still ran


def test_defaults_are_used_and_printed_when_ids_are_absent(pair):
    t, d = pair(draft=eagle3_draft(ids=None, max_position_embeddings=262144))
    report = check(t, d)
    assert report.ok, report.render()
    note = next(f for f in report.findings if f.id == "aux.effective")
    assert note.data["effective"] == [2, 30, 58] and "defaults" in note.message


def test_fc_in_checkpoint_must_match_the_id_count(pair):
    t, d = pair(
        draft=eagle3_draft(max_position_embeddings=262144),
        tensors={**DRAFT_TENSORS, "fc.weight": [7168, 4 * 7168]},
    )
    report = check(t, d)
    assert "aux.fc-mismatch" in ids_of(report, "error")
    # 0.5.10 always builds 3 inputs: a 4-layer draft cannot load there.
    t, d = pair(
        draft=eagle3_draft(ids=(2, 20, 40, 58), max_position_embeddings=262144),
        tensors={**DRAFT_TENSORS, "fc.weight": [7168, 4 * 7168]},
    )
    assert check(t, d).ok
    assert "aux.fc-mismatch" in ids_of(check(t, d, OLD), "error")


# ------------------------------------------------------------------ shapes, architectures


@pytest.mark.parametrize(
    "draft, tensors, finding",
    [
        (eagle3_draft(hidden_size=4096), DRAFT_TENSORS, "shape.hidden"),
        (eagle3_draft(vocab_size=32000, draft_vocab_size=None), DRAFT_TENSORS, "shape.vocab"),
        (eagle3_draft(), {k: v for k, v in DRAFT_TENSORS.items() if k != "d2t"}, "shape.d2t"),
        (eagle3_draft(), {**DRAFT_TENSORS, "d2t": [16000]}, "shape.d2t"),
        (eagle3_draft(draft_vocab_size=16000), {**DRAFT_TENSORS, "d2t": [16000]}, "shape.lm-head"),
        (eagle3_draft(), {**DRAFT_TENSORS, "fc.weight": [7168, 1000]}, "shape.fc"),
    ],
)
def test_shape_mismatches_are_errors(pair, draft, tensors, finding):
    t, d = pair(draft={**draft, "max_position_embeddings": 262144}, tensors=tensors)
    assert finding in ids_of(check(t, d), "error")


def test_target_hidden_size_is_what_fc_takes(pair):
    t, d = pair(
        draft=eagle3_draft(
            hidden_size=4096, target_hidden_size=7168, max_position_embeddings=262144
        ),
        tensors={**DRAFT_TENSORS, "fc.weight": [4096, 3 * 7168]},
    )
    assert check(t, d).ok


def test_architectures_the_release_does_not_know(pair):
    mla = eagle3_draft(
        architectures=["Eagle3DeepseekV2ForCausalLM"], max_position_embeddings=262144
    )
    t, d = pair(draft=mla)
    assert "arch.draft-unknown" in ids_of(check(t, d, OLD), "error")
    assert "arch.draft-unknown" not in ids_of(check(t, d, NEW))
    t, d = pair(draft={**mla, "architectures": ["LlamaForCausalLM"]})
    assert "arch.draft-unknown" in ids_of(check(t, d, NEW), "error")
    if wheels.source_for(NEW.version) is not None:  # the registry is read from the source
        t, d = pair(
            target={**kimi_target(), "architectures": ["NoSuchForCausalLM"]},
            draft=eagle3_draft(max_position_embeddings=262144),
        )
        assert "arch.target-unknown" in ids_of(check(t, d, NEW), "error")


def test_nested_text_config_is_read_for_the_target(pair):
    t, d = pair(draft=eagle3_draft(max_position_embeddings=262144))
    report = check(t, d)
    assert "arch.text-config" in ids_of(report, "info")
    # Without text_config the same fields at the top level give the same result.
    flat = {**kimi_target()["text_config"], "architectures": ["DeepseekV3ForCausalLM"]}
    t2, d2 = pair(target=flat, draft=eagle3_draft(max_position_embeddings=262144))
    assert check(t2, d2).ok


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "breakage, finding",
    [
        ("missing-dir", "config.missing-dir"),
        ("file-not-dir", "config.missing-dir"),
        ("no-config", "config.missing-file"),
        ("config-is-a-dir", "config.unreadable"),
        ("not-utf8", "config.unreadable"),
        ("invalid-json", "config.invalid-json"),
        ("json-list", "config.invalid-json"),
        ("no-architectures", "config.missing-field"),
        ("no-layers", "config.missing-field"),
        ("no-hidden", "config.missing-field"),
        ("string-length", "config.bad-field"),
        ("null-factor", "config.bad-field"),
    ],
)
@pytest.mark.parametrize("side", ["target", "draft"])
def test_bad_input_is_a_clear_finding(tmp_path, capsys, breakage, finding, side):
    good = {"target": kimi_target(), "draft": eagle3_draft(max_position_embeddings=262144)}
    paths = {}
    for role, cfg in good.items():
        d = tmp_path / role
        if role != side:
            paths[role] = model_dir(tmp_path, role, cfg, DRAFT_TENSORS)
            continue
        text = cfg.get("text_config", cfg) if role == "target" else cfg
        if breakage == "missing-dir":
            d = tmp_path / "nowhere"
        elif breakage == "file-not-dir":
            d.write_text("x")
        elif breakage == "no-config":
            d.mkdir()
        elif breakage == "config-is-a-dir":
            (d / "config.json").mkdir(parents=True)
        elif breakage == "not-utf8":
            model_dir(tmp_path, role, "{}").joinpath("config.json").write_bytes(b'{"a": "\xff"}')
        elif breakage == "invalid-json":
            model_dir(tmp_path, role, '{"architectures": ["X"],')
        elif breakage == "json-list":
            model_dir(tmp_path, role, "[1, 2]")
        else:
            if breakage == "no-architectures":
                cfg = {k: v for k, v in cfg.items() if k != "architectures"}
            elif breakage == "no-layers" and role == "target":
                del text["num_hidden_layers"]
            elif breakage in ("no-hidden", "no-layers"):
                del text["hidden_size"]
            elif breakage == "string-length":
                text["max_position_embeddings"] = "262144"
            elif breakage == "null-factor":
                text["rope_scaling"] = {"type": "dynamic", "factor": None}
            model_dir(tmp_path, role, cfg, DRAFT_TENSORS)
        paths[role] = d
    rc = preflight_main(
        [
            "--model-path",
            str(paths["target"]),
            "--draft-model-path",
            str(paths["draft"]),
            "--no-host",
            "--rules-only",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out + err
    line = next(ln for ln in out.splitlines() if ln.startswith("ERROR") and finding in ln)
    assert str(paths[side]) in line or str(tmp_path / "nowhere") in line, line


def test_a_preset_is_checked_as_the_launcher_builds_it(pair, tmp_path, capsys):
    """--preset/--preset-file (with --overlay, --cpu): preflight checks the launch the
    launcher makes of the same flags: here the presets' own --context-length (131072,
    the memory plan's) clears the Kimi case's short draft, which fails without it."""
    from sgl_eagle_ext.launcher import presets

    t, d = pair()
    unpinned = presets.write(
        tmp_path / "unpinned.toml", extends="eagle3-2step", server={"context-length": False}
    )
    pair_flags = ["--model-path", str(t), "--draft-model-path", str(d), "--no-host"]
    assert preflight_main([*pair_flags, "--rules-only", "--preset-file", str(unpinned)]) == 1
    assert "ERROR   context.draft-shorter" in capsys.readouterr().out
    for more in ([], ["--overlay", "pcie-allreduce"]):
        assert preflight_main([*pair_flags, "--rules-only", "--preset", "eagle3-2step", *more]) == 0
        out = capsys.readouterr().out
        assert "context.ok" in out and "the target runs at 131072" in out, out
    # the CPU overlay drops the pin (the tiny models' own context): the short draft again
    assert preflight_main([*pair_flags, "--rules-only", "--preset", "eagle3-2step", "--cpu"]) == 1
    assert "ERROR   context.draft-shorter" in capsys.readouterr().out
    # the plan's own refusals, as the launcher words them
    for more, said in (
        (["--preset", "eagle3-2step", "--overlay", "nope"], "--overlay nope: no such overlay."),
        (["--preset", "eagle3-2step", "--adaptive-config", "x.json"], "is not adaptive."),
        (["--overlay", "2node"], "--overlay: applies to a preset, and none is given."),
    ):
        assert preflight_main([*pair_flags, *more]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err


def test_the_launcher_and_the_preflight_map_their_flags_alike():
    """One mapping (launcher/launch_flags.py): the same flags on either command line are
    the same plan.LaunchRequest."""
    from sgl_eagle_ext.launcher import cli as launch_cli
    from sgl_eagle_ext.launcher import launch_flags
    from sgl_eagle_ext.launcher.preflight import cli as preflight_cli

    flags = ["--preset-file", "p.toml", "--model-path", "T", "--draft-model-path", "D"]
    flags += ["--overlay", "2node", "--overlay", "x.toml", "--cpu", "--sglang-version", "0.5.23"]
    flags += ["--force", "--adaptive-config", "a.json"]
    extra = ["--port", "30001"]
    launcher = launch_cli.request_from_args(launch_cli.parser().parse_args(flags), extra)
    preflight = launch_flags.request(preflight_cli.parser().parse_args(flags), extra)
    assert launcher == preflight
    assert preflight.overlays == ("2node", "x.toml") and preflight.extra == ("--port", "30001")
    assert (preflight.preset_file, preflight.adaptive_config) == ("p.toml", "a.json")


def test_cli_never_shows_a_traceback(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgl_eagle_ext.preflight",
            "--model-path",
            str(tmp_path / "t"),
            "--draft-model-path",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "config.missing-dir" in done.stdout
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgl_eagle_ext.preflight",
            "--model-path",
            "x",
            "--sglang-version",
            "0.4.0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "not a supported release" in done.stderr


# ------------------------------------------------------------------ host checks


SMI_GPUS = "\n".join(
    f"{i}, GPU-{i:04d}, NVIDIA RTX PRO 6000 Blackwell, 12.0, 97887, {97000 if i != 3 else 1200}"
    for i in range(8)
)
SMI_APPS = "GPU-0003, 4242, 96000\n"


def test_host_checks_with_gpus():
    found = host.check_gpus({}, 8, "sm120", None, SMI_GPUS, SMI_APPS)
    ids = {f.id: f for f in found}
    assert "host.gpu-count" not in ids and "host.compute-capability" not in ids
    memory = ids["host.gpu-memory"]
    assert memory.severity == "error" and "pid 4242" in memory.message
    found = host.check_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}, 8, "sm120", None, SMI_GPUS, "")
    assert "host.gpu-count" in {f.id for f in found if f.severity == "error"}
    hopper = SMI_GPUS.replace("12.0", "9.0")
    found = host.check_gpus({}, 2, "sm120", None, hopper, "")
    assert "host.compute-capability" in {f.id for f in found}


def test_host_checks_without_gpu_are_skipped_with_a_note():
    found = host.check_gpus({}, 8, "sm120", None, "", "")
    assert [f.id for f in found] == ["host.no-gpu"] and found[0].severity == "info"


def test_port_in_use_is_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        (f,) = host.check_port("127.0.0.1", port)
    assert f.id == "host.port" and f.severity == "error" and str(port) in f.message


def test_iommu_and_acs_hints(tmp_path):
    groups = tmp_path / "groups"
    (groups / "0").mkdir(parents=True)
    acs = "01:00.0 PCI bridge\n\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+\n"
    found = host.check_p2p(8, "BOOT_IMAGE=/vmlinuz intel_iommu=on", groups, acs)
    assert {f.id for f in found} == {"host.iommu", "host.acs"}
    assert host.check_p2p(8, "intel_iommu=on iommu=pt", groups, "") == []
    assert host.check_p2p(1, "intel_iommu=on", groups, acs) == []


def test_nccl_environment_hints(tmp_path):
    """An empty NCCL_GRAPH_FILE, and pynccl's library (SGLANG_NCCL_SO_PATH) not the one
    LD_PRELOAD gives torch: each a warning at TP > 1; the same library by another path
    (a link) is one library."""
    lib = tmp_path / "libnccl.so.2.27"
    lib.write_bytes(b"")
    (tmp_path / "libnccl.so.2").symlink_to(lib.name)
    other = str(tmp_path / "other" / "libnccl.so.2")
    env = {"NCCL_GRAPH_FILE": "", "SGLANG_NCCL_SO_PATH": str(lib), "LD_PRELOAD": f"x.so:{other}"}
    found = {f.id: f for f in host.check_nccl_env(env, 8)}
    assert set(found) == {"host.nccl-graph-file", "host.nccl-library"}
    assert all(f.severity == "warning" for f in found.values())
    assert other in found["host.nccl-library"].message
    same = {"SGLANG_NCCL_SO_PATH": str(lib), "LD_PRELOAD": str(tmp_path / "libnccl.so.2")}
    assert host.check_nccl_env(same, 8) == []
    assert host.check_nccl_env({**env, "NCCL_GRAPH_FILE": "/etc/topo.xml"}, 8)[0].id == (
        "host.nccl-library"
    )
    assert host.check_nccl_env(env, 1) == []


def test_run_includes_host_checks(pair):
    t, d = pair(draft=eagle3_draft(max_position_embeddings=262144))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        report = run(str(t), str(d), NEW, ["--port", str(port)])
    assert "host.port" in ids_of(report, "error")


# ------------------------------------------------------------------ the context-length rule


def rule_configs():
    """Configs covering every branch of SGLang's rule (field order, factor, exceptions)."""
    keys = context_rule.KEYS
    ropes = [
        None,
        {},
        {"rope_type": "linear", "factor": 4.0},
        {"type": "linear", "factor": 2},
        {"rope_type": "yarn", "factor": 64, "original_max_position_embeddings": 4096},
        {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1},
        {"type": "llama3", "factor": 8.0},
        {"rope_type": "dynamic", "factor": 1.5},
        {"rope_type": "default", "rope_theta": 10000.0},
    ]
    out = []
    for n in range(len(keys) + 1):
        for present in itertools.combinations(keys, n):
            for rope in ropes:
                cfg = {k: 1000 * (i + 1) + 7 for i, k in enumerate(present)}
                if rope is not None:
                    cfg["rope_scaling"] = rope
                out.append(cfg)
                if rope:
                    out.append(
                        {
                            **{k: v for k, v in cfg.items() if k != "rope_scaling"},
                            "rope_parameters": rope,
                        }
                    )
    return out


def release_sources():
    srcs = {}
    installed = wheels.installed_source()
    if installed is not None:
        srcs["installed"] = installed
    for r in releases.RELEASES:
        srcs[r.version] = wheels.source(r.version)  # pip download --no-deps, cached
    return srcs


@pytest.fixture(scope="module")
def sources():
    return release_sources()


@pytest.mark.harness
def test_sglang_rule_and_reimplementation_agree(sources):
    configs = rule_configs()
    assert len(configs) > 500
    for name, pkg in sources.items():
        rule = context_rule.rule_for(pkg)
        assert rule is not None, f"get_context_length not found in {name} ({pkg})"
        for cfg in configs:
            assert rule(context_rule.ConfigView(cfg)) == context_rule.derive(cfg).value, (name, cfg)


@pytest.mark.harness
def test_config_view_matches_transformers_configs(sources):
    """ConfigView presents rope settings as transformers 5 config objects do."""
    import transformers  # the harness has it: missing is a failure, not a skip

    rule = context_rule.rule_for(sources[NEW.version])
    ropes = [
        None,
        {"rope_type": "linear", "factor": 4.0},
        {"type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        {"rope_type": "dynamic", "factor": 2.0},
    ]
    for rope in ropes:
        cfg = {"max_position_embeddings": 16384, "rope_scaling": rope}
        hf = transformers.LlamaConfig(**cfg)
        assert rule(hf) == rule(context_rule.ConfigView(cfg)), rope


def test_kimi_target_uses_text_config_and_yarn_exception():
    cfg = kimi_target()["text_config"]
    assert context_rule.derive(cfg).value == 262144  # factor 64 ignored: original_max... set
    assert (
        context_rule.derive(
            {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}
        ).value
        == 16384
    )
    assert context_rule.derive({}).value == 2048


# ------------------------------------------------------------------ the tiny CPU pair


@pytest.mark.harness
def test_tiny_pair_passes_preflight(tiny_models):
    """The launcher runs the preflight by default: the CPU pair must pass it."""
    for draft in ("draft-mostly", "draft-partial", "draft-never"):
        report = run(
            str(tiny_models["target"]),
            str(tiny_models[draft]),
            NEW,
            ["--device", "cpu", "--disable-cuda-graph"],
            host_checks=False,
            env=CPU_ENV,
        )
        assert report.ok, report.render()
        eff = next(f for f in report.findings if f.id == "aux.effective")
        assert eff.data["effective"] == [1, 2, 3]


@pytest.mark.server
def test_sglang_refuses_the_short_draft_and_not_the_fix_overlay(tiny_models, short_draft, tmp_path):
    """The first users' context mismatch (draft shorter than target) on the tiny pair: real
    SGLang refuses the short draft (after loading the target), SGLang's answer on the --fix
    overlay has no refusal left, and the original stays as it was."""
    import shlex

    from sgl_eagle_ext.common.server_process import ServerProcess
    from sgl_eagle_ext.launcher import readiness

    short = short_draft
    before = tree_digest(short)
    target = str(tiny_models["target"])

    report = run(target, str(short), NEW, ["--device", "cpu"], host_checks=False, env=CPU_ENV)
    assert "context.draft-shorter" in ids_of(report, "error")

    def server(draft: str, name: str) -> tuple[ServerProcess, str, int]:
        port = ports.pick()  # outside the ephemeral range (common/ports.py)
        plan = subprocess.run(
            [
                sys.executable,
                "-m",
                "sgl_eagle_ext.launch",
                "--preset",
                "eagle3-2step",
                "--cpu",
                "--model-path",
                target,
                "--draft-model-path",
                draft,
                "--dry-run",
                "--",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        lines = [ln for ln in plan.splitlines() if ln and not ln.startswith("#")]
        env = dict(ln.split("=", 1) for ln in lines[:-1])
        proc = ServerProcess(
            shlex.split(lines[-1]),
            {**os.environ, **env},
            tmp_path / f"{name}.log",
            redact=[],
            echo=False,
        )
        proc.start()
        return proc, f"http://127.0.0.1:{port}", port

    refused, url, port = server(str(short), "refused")
    try:
        with pytest.raises(readiness.StartupFailed):
            readiness.wait_ready(
                refused, url, port, api_key=None, stall_timeout=600, startup_timeout=900
            )
    finally:
        refused.stop()
    assert (
        "is greater than the derived context_length (1024)"
        in (tmp_path / "refused.log").read_text()
    )

    fixed = run(
        target,
        str(short),
        NEW,
        ["--device", "cpu"],
        fix=True,
        host_checks=False,
        overlay_root=tmp_path / "overlays",
        env=CPU_ENV,
    )
    assert fixed.ok and fixed.overlay, fixed.render()
    # SGLang's own answer on the overlay: no refusal left (the real server starting on
    # it through `launch --fix` is tests/test_server_cpu.py's, one server start fewer)
    again = run(
        target, fixed.draft_model_path, NEW, ["--device", "cpu"], host_checks=False, env=CPU_ENV
    )
    assert "context.draft-shorter" not in ids_of(again, "error"), again.render()
    assert tree_digest(short) == before
