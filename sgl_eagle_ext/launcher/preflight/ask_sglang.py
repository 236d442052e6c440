"""Ask the SGLang that will run the server about one exact launch (sglang_probe.py).

One question per launch: the python that will start the server runs sglang_probe.py
on the launch's final SGLang argument list, in the launch's environment and working
directory. Its one answer (Answer) holds SGLang's parser + resolution of those
arguments (the settings it changes on its own, and which hook changed them), its
ModelConfig of the target and the draft built from that record (override arguments
applied), the class its model loader picks for the target, the capture layers of
that class, and every exception on the way in SGLang's own words.

Many launches are asked at once in one subprocess (SGLang imported once), each in its
own environment and working directory; each answer is cached under its own launch's
key (probe_cache): a repeat of the same launch on the same installed files is read
from disk; a failed probe is cached as failed, and says so. Where a probe_server broker
runs (EAGLE_EXT_PROBE_SERVER), the subprocess is a fork of a process that imported SGLang
once, from the same probe code; anything short of its answer asks the subprocess.

    ask_launch(python, argv, env)   -> (Answer | None, why)  (preflight, dry run)
    ask_launches(python, [Launch(argv, env, cwd), ...])      (one subprocess for many)
    settings_for_launches(python, [Launch, ...]) -> [Resolution | None]  (arm fairness)
    settings_for(python, argv, env) -> Resolution | None     (the same, one launch)
    adaptive_buckets(python, path, initial) -> (buckets | None, why)  (tune live's table)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import env_allow, proctree
from sgl_eagle_ext.common.contract import CPU_ENV
from sgl_eagle_ext.common.installed import installed
from sgl_eagle_ext.launcher.preflight import hosts, probe_cache, probe_server
from sgl_eagle_ext.launcher.preflight.sglang_probe import TAG
from sgl_eagle_ext.launcher.resolution import Change, Resolution

PROBE = probe_server.PROBE
TIMEOUT_S = 240.0  # importing SGLang's model registry takes ~10-40 s on a busy CPU


@dataclass
class Answer:
    """SGLang's own answer about one launch (None / empty where it gave none)."""

    version: str
    seconds: float
    context: dict = field(default_factory=dict)  # lengths: target_own/target/draft_own/draft
    aux: dict | None = None  # the target class's capture answer (EAGLE-3 launches)
    cached_at: str | None = None  # when SGLang gave this answer, if it came from the cache
    settings: Resolution | None = None  # its parser + resolution of the argument list
    errors: list[dict] = field(default_factory=list)  # each: step, type, message, file
    target_class: dict | None = None  # {"arch", "class", "module"}: what its loader picks
    # the device memory and both models' KV geometry as SGLang reads them (memory_plan)
    memory: dict | None = None
    host: dict | None = None  # the GPU host SGLang resolved as on (hosts.py), if not here

    @property
    def label(self) -> str:
        on = f" as on {host_label(self.host)}" if self.host else ""
        if self.cached_at:
            return f"by SGLang {self.version}{on} (cached answer from {self.cached_at})"
        return f"by SGLang {self.version}{on}"

    @property
    def target(self) -> dict:
        """SGLang's ModelConfig of the target: len, layers, hidden, vocab, arch."""
        return self.context.get("target_own") or {}

    @property
    def draft(self) -> dict:
        return self.context.get("draft_own") or {}


def probe_env(env: Mapping[str, str] | None) -> dict:
    """The launch environment, minus what would bend SGLang's verdicts, plus what the
    server entry itself sets up before SGLang loads (in_sglang/serve.py): on the CPU
    harness, its required variables and the sgl_kernel stand-in first on the path.
    Only its allow-listed variables (common/env_allow.py): this is the environment
    that goes to the probe (its subprocess, its request, a warm process's socket)."""
    base = dict(os.environ if env is None else env)
    for name in ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "SGLANG_IS_IN_CI"):
        base.pop(name, None)
    base.setdefault("HF_HUB_OFFLINE", "1")
    base.pop(hosts.PROBE_ENV, None)  # set per launch by ask_launches only
    if base.get(CPU_ENV) == "1":
        from sgl_eagle_ext.cpu import harness

        base.update(harness.REQUIRED_ENV)
        parts = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
        parts = [harness.STANDIN_DIR] + [p for p in parts if p != harness.STANDIN_DIR]
        base["PYTHONPATH"] = os.pathsep.join(parts)
    return env_allow.allowed(base)


def host_label(host: dict) -> str:
    """A probe's host description, as the labels name it: 'GPU (SM120, 97887 MiB)'."""
    cap = "".join(str(x) for x in host.get("capability") or ())
    return f"{host.get('name')} (SM{cap}, {host.get('memory_mib')} MiB)"


def _resolution(version: str, got: dict, cached_at: str | None) -> Resolution | None:
    s = got.get("settings")
    if not isinstance(s, dict):
        return None
    err = s.get("error")
    return Resolution(
        version=version,
        source="sglang",
        fields=dict(s.get("fields") or {}),
        changes=[Change(*c) for c in s.get("changes") or []],
        error=f"{err['type']}: {err['message']}" if err else None,
        cached_at=cached_at,
        attributed=bool(s.get("attributed", True)),
        host=host_label(got["host"]) if got.get("host") else None,
    )


def _answer(version: str, got: dict, seconds: float, cached_at: str | None = None) -> Answer:
    return Answer(
        version=version,
        seconds=seconds,
        context=got.get("context") or {},
        aux=got.get("aux"),
        cached_at=cached_at,
        settings=_resolution(version, got, cached_at),
        errors=list(got.get("errors") or []),
        target_class=got.get("target_class"),
        memory=got.get("memory"),
        host=got.get("host"),
    )


@dataclass(frozen=True)
class Launch:
    """One launch to ask about: its final SGLang argument list (plan.argv, no secret
    flags), the server's environment (None: this process's) and its working directory
    (None: this process's; a relative --model-path means what it will mean there)."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None


def _start_key(env: Mapping[str, str], cwd: str) -> str:
    """What one probe process cannot change between launches: the environment SGLang's
    answer depends on (probe_cache.env_part: PYTHONPATH, which the interpreter reads at
    its start, SGLang's variables, which its modules may read when imported, ...), and
    the working directory where PYTHONPATH names a relative folder."""
    relative = any(not os.path.isabs(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return json.dumps([probe_cache.env_part(env), cwd if relative else None], sort_keys=True)


def _env_delta(base: Mapping[str, str], env: Mapping[str, str]) -> dict:
    """What the probe sets (or unsets: None) for a launch whose environment is `env`, in
    a process started with `base` (both allow-listed already: probe_env)."""
    delta: dict = {k: v for k, v in env.items() if base.get(k) != v}
    delta.update({k: None for k in base if k not in env})
    return delta


def ask_launches(
    python: str,
    launches: Sequence[Launch],
    timeout: float = TIMEOUT_S,
    found: dict | None = None,
) -> list[tuple[Answer | None, str]]:
    """SGLang's answer for each launch: (Answer, '') or (None, why it could not be asked).

    Each answer is cached under its own launch's key: a later ask of one of them alone
    is read from disk. The launches not in the cache are asked in ONE subprocess, each
    in its own environment and working directory, per environment the process fixes at
    its start (_start_key: the arms of one comparison share it; a CPU-overlay launch and
    a GPU one do not). found: installed(python, env) when the caller has it. A failure
    to ask (a crash, no answer) is cached as failed for the same key and says so when
    read back; a timeout is not cached (it depends on the machine's load)."""
    envs = [probe_env(x.env) for x in launches]
    for x, env in zip(launches, envs, strict=True):  # a GPU launch asked off its host
        host = hosts.for_launch(x.argv, env)
        if host is not None:
            env[hosts.PROBE_ENV] = host.probe_description()
    cwds = [os.path.realpath(x.cwd or os.getcwd()) for x in launches]
    groups: dict[str, list[int]] = {}
    for i, (env, cwd) in enumerate(zip(envs, cwds, strict=True)):
        groups.setdefault(_start_key(env, cwd), []).append(i)
    out: list = [None] * len(launches)
    for members in groups.values():
        t0 = time.monotonic()
        have = installed(python, envs[members[0]]) if found is None else found
        if not have.get("sglang"):
            for i in members:
                out[i] = (None, f"no SGLang in {python}")
            continue
        keys = {
            i: probe_cache.key(python, have, PROBE, list(launches[i].argv), envs[i], cwds[i])
            if probe_cache.enabled(envs[i])
            else None
            for i in members
        }
        todo = []
        for i in members:
            hit = probe_cache.load(keys[i]) if keys[i] else None
            if hit is None:
                todo.append(i)
                continue
            got, when = hit
            got = probe_cache.with_port(got, list(launches[i].argv))
            if "failed" in got:
                out[i] = (
                    None,
                    f"{got['failed']} (cached failure from {when}: the same launch on "
                    f"the same files; {probe_cache.BYPASS}=0 asks again)",
                )
            else:
                out[i] = (_answer(got["version"], got, time.monotonic() - t0, when), "")
        for i, (answer, why, cacheable, got) in zip(
            todo, _ask(python, launches, envs, cwds, todo, timeout, have)
        ):
            out[i] = (answer, why)
            if keys[i] and cacheable:
                probe_cache.store(keys[i], got or {"version": have["sglang"], "failed": why})
    return out


def _ask(python: str, launches, envs: list, cwds: list, todo: list, timeout: float, have: dict):
    """One probe (probe_server's warm process, or a subprocess) for the launches `todo`
    (one start environment), if any: per launch (Answer | None, why, cacheable, its
    answer to cache: None if it failed)."""
    if not todo:
        return
    base, where = envs[todo[0]], cwds[todo[0]]
    warm = probe_server.identity(python, _start_key(base, where), have.get("src"))
    request = {
        "launches": [
            {"argv": list(launches[i].argv), "env": _env_delta(base, envs[i]), "cwd": cwds[i]}
            for i in todo
        ]
    }
    t1 = time.monotonic()
    reply, why, cacheable = _probe(python, request, base, timeout, where, warm)
    if reply is not None and len(reply["launches"]) != len(todo):
        reply, why = None, f"asking SGLang failed: {len(reply['launches'])} answers to {len(todo)}"
    per = (time.monotonic() - t1) / len(todo)
    for j in range(len(todo)):
        if reply is None:
            yield None, why, cacheable, None
            continue
        got = {**reply["launches"][j], "version": reply["version"]}
        yield _answer(reply["version"], got, per), "", True, got


def ask_launch(
    python: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
    found: dict | None = None,
) -> tuple[Answer | None, str]:
    """SGLang's answer about one launch: (Answer, '') or (None, why it could not be asked)."""
    return ask_launches(python, [Launch(argv, env)], timeout, found)[0]


def settings_for_launches(python: str, launches: Sequence[Launch]) -> list[Resolution | None]:
    """The settings SGLang will run each launch with, by SGLang itself, asked in one
    subprocess (ask_launches; the arm-fairness check asks every arm at once).

    Per launch: SGLang's Resolution (source="sglang"): every resolved ServerArgs field
    (a nested config by dotted name), the changes it makes on its own (field, before,
    after, the hook that made it), or .error with SGLang's own message when it refuses
    these arguments. None when that python has no SGLang or could not be asked (the
    caller predicts from the release table instead). Cached like every probe answer:
    repeats cost a file read."""
    return [a.settings if a is not None else None for a, _ in ask_launches(python, launches)]


def settings_for(python: str, argv: list[str], env: dict) -> Resolution | None:
    """settings_for_launches for one launch: python, the interpreter that will start the
    server; argv, the launch's final SGLang argument list; env, the server's environment."""
    return settings_for_launches(python, [Launch(argv, env)])[0]


def adaptive_buckets(
    python: str, path: Path, initial: int, timeout: float = TIMEOUT_S
) -> tuple[dict | None, str]:
    """The buckets SGLang's own loader builds from the adaptive config at `path` (its
    AdaptiveSpeculativeParams, as the server does at startup, started at `initial`
    steps): ({batch size: candidate steps}, '') or (None, why: SGLang's refusal in its
    own words, or why it could not be asked). Through the probe (warm where a broker
    runs), in this process's environment; not cached (the file is the question)."""
    env, cwd = probe_env(None), os.path.realpath(os.getcwd())
    have = installed(python, env)
    if not have.get("sglang"):
        return None, f"no SGLang in {python}"
    warm = probe_server.identity(python, _start_key(env, cwd), have.get("src"))
    # a request may hold several kinds; an empty "launches" keeps the answer's shape
    request = {"launches": [], "adaptive": [{"path": str(path), "initial": int(initial)}]}
    reply, why, _ = _probe(python, request, env, timeout, cwd, warm)
    if reply is None:
        return None, why
    got = (reply.get("adaptive") or [{}])[0]
    if isinstance(got.get("buckets"), dict):
        return got["buckets"], ""
    err = got.get("error") or {}
    return None, f"{err.get('type', 'no answer')}: {err.get('message', '')}".rstrip(": ")


def config_argv(
    python: str, asked: list[str], timeout: float = TIMEOUT_S
) -> tuple[list | None, str]:
    """The argument list SGLang's own parser merges from `--config FILE` (`asked`: every
    --config and its file): (argv, '') or (None, why: SGLang's refusal in its own words,
    or why it could not be asked). Through the probe, in this process's environment."""
    env, cwd = probe_env(None), os.path.realpath(os.getcwd())
    have = installed(python, env)
    if not have.get("sglang"):
        return None, f"no SGLang in {python}"
    warm = probe_server.identity(python, _start_key(env, cwd), have.get("src"))
    reply, why, _ = _probe(python, {"launches": [], "config": [asked]}, env, timeout, cwd, warm)
    if reply is None:
        return None, why
    got = (reply.get("config") or [{}])[0]
    argv = got.get("argv")
    if isinstance(argv, list) and all(isinstance(t, str) for t in argv):
        return argv, ""
    err = got.get("error") or {}
    return None, f"{err.get('type', 'no answer')}: {err.get('message', '')}".rstrip(": ")


def _probe(
    python: str,
    request: dict,
    env: dict,
    timeout: float,
    cwd: str | None = None,
    warm: str | None = None,
):
    """(the probe's JSON answer, '', _) or (None, why, cacheable). `warm`: the identity
    of a probe_server process that may answer instead of a subprocess. One deadline,
    `timeout`, for both: the subprocess gets what the warm ask left."""
    deadline = time.monotonic() + timeout
    env = env_allow.allowed(os.environ if env is None else env)  # idempotent after probe_env
    line = probe_server.ask(python, request, env, cwd or os.getcwd(), warm, timeout)
    if line == "timeout" or time.monotonic() >= deadline:
        return None, f"asking SGLang timed out after {timeout:.0f} s", False
    if line is not None:
        return _reply(line, 0, "")
    with tempfile.TemporaryDirectory(prefix="sgl-eagle-ext-probe-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps(request))
        try:
            proc = proctree.run_in_group(  # its group killed on timeout, every way out
                [python, str(PROBE), str(path)],
                deadline - time.monotonic(),
                env=env,
                # the (first) launch's own directory; the probe moves to each one's
                cwd=cwd or os.getcwd(),
            )
        except subprocess.TimeoutExpired:
            return None, f"asking SGLang timed out after {timeout:.0f} s", False
        except OSError as e:
            return None, f"could not run {python}: {e.strerror or e}", False
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(TAG)]
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return _reply(lines[-1] if lines else "", proc.returncode, tail)


def _reply(line: str, returncode: int, tail: str):
    """The probe's answer line read: (reply, '', True) or (None, why, True)."""
    if returncode != 0 or not line:
        return None, f"asking SGLang failed (exit {returncode}): {tail[:300]}", True
    try:
        reply = json.loads(line[len(TAG) :])
    except ValueError:
        return None, "asking SGLang failed: its answer was not JSON", True
    if not isinstance(reply.get("launches"), list):
        return None, "asking SGLang failed: the answer holds no launches", True
    return reply, "", True


def default_python() -> str:
    """The python the launcher starts SGLang with (launcher/cli.py: sys.executable)."""
    return sys.executable
