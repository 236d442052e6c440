"""Every spelling of a secret flag that SGLang's own parser accepts is one the
launcher and `bench ab` take off the command line or refuse (issue 26): SGLang's
parser (its ServerArgs.add_cli_args on an argparse parser, as its
prepare_server_args builds it) is asked, in a subprocess, what each prefix of each
secret flag means; the rule in common/redaction.py must agree, for every release
installed here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sgl_eagle_ext.common import redaction, releases, secret_flags
from sgl_eagle_ext.common.errors import UserError

pytestmark = pytest.mark.harness

ASK = r"""
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs

flags = json.loads(sys.argv[1])
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
dests = {a.dest: s for a in parser._actions for s in a.option_strings if s.startswith("--")}
full = {s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--")}
out = {"full": sorted(f for f in full if any(x.startswith(f) for x in flags))}
for flag in flags:
    for n in range(1, len(flag) + 1):
        tok = "--" + flag[:n]
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ns = parser.parse_args(["--model-path", "m", tok, "VALUE"])
            out[tok] = next((d for d, v in vars(ns).items() if v == "VALUE"), None)
        except SystemExit:
            out[tok] = "error"  # ambiguous: SGLang refuses it itself
print("ANSWER" + json.dumps(out))
"""

# The harnesses where the README's install puts them: beside this checkout.
ROOT = Path(__file__).resolve().parents[1]
PYTHONS = {
    "0.5.23": ROOT / ".venv" / "bin" / "python",
    "0.5.10.post1": ROOT / ".venv-0.5.10.post1" / "bin" / "python",
}


@pytest.mark.parametrize("version", list(PYTHONS))
def test_every_prefix_sglang_takes_for_a_secret_flag_is_caught(version):
    python = PYTHONS[version]
    if not python.exists():
        pytest.fail(f"{python}: the harness for SGLang {version} is not installed")
    flags = list(releases.SECRET_SERVER_FLAGS)
    assert tuple(flags) == redaction.SECRET_FLAGS  # the two copies of the list agree
    p = subprocess.run(
        [str(python), "-c", ASK, json.dumps(flags)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("ANSWER")] or [p.stderr]
    answer = json.loads(line[len("ANSWER") :])
    # the full flags that prefix a secret flag are exactly those we keep
    assert sorted(set(answer.pop("full")) - set(flags)) == sorted(redaction.NOT_SECRET_PREFIXES)
    secret_dests = {f.replace("-", "_") for f in flags}
    taken = 0
    for tok, dest in answer.items():
        name = tok[2:]
        if dest in secret_dests and name not in flags:  # SGLang reads a secret from it
            taken += 1
            assert redaction.abbreviates_secret(name) == dest.replace("_", "-"), tok
            with pytest.raises(UserError, match="abbreviation of the secret flag"):
                secret_flags.take([tok, "VALUE"])
        elif dest not in (None, "error") and dest not in secret_dests:
            # a real non-secret flag (--ssl-keyfile): kept, with its value
            assert redaction.abbreviates_secret(name) is None, tok
            assert secret_flags.take([tok, "v"]) == ([tok, "v"], {})
    assert taken > 10, answer  # SGLang does accept abbreviations: the test saw them
    print(f"SGLang {version}: {taken} abbreviations of secret flags, each refused")
