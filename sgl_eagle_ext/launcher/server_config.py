"""SGLang's own `--config FILE.yaml` (after `--`), read by the launcher like any other
source of arguments: SGLang's parser turns the file into flags (its config merger, in
the python that will run the server), and those flags take the place of `--config F`
in the launch, before the file's options given on the command line (SGLang's order:
command line over file). Its secrets (api-key, admin-api-key, ...) are then taken like
`-- --api-key K`: masked everywhere, carried in the environment. Left to SGLang, the
file's keys went into its ServerArgs dump, the server log and the launcher's echo."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sgl_eagle_ext.common import proctree, safe_files
from sgl_eagle_ext.common.errors import UserError

FLAG = "--config"
TAG = "EAGLE_EXT_CONFIG "
TIMEOUT_S = 240.0  # importing SGLang's server_args on a busy CPU

# In the server's python: SGLang's prepare_server_args merges the file into its argument
# list and parses that; the parse is where it is stopped, the merged list printed.
_SCRIPT = f"""
import argparse, json, sys
class Merged(Exception):
    pass
def merged(self, args=None, namespace=None):
    raise Merged(list(args))
try:
    from sglang.srt.server_args import prepare_server_args
    argparse.ArgumentParser.parse_args = merged
    prepare_server_args(sys.argv[1:])
except Merged as m:
    print({TAG!r} + json.dumps({{"argv": m.args[0]}}))
except BaseException as e:
    print({TAG!r} + json.dumps({{"refused": f"{{type(e).__name__}}: {{e}}"}}))
"""

_ASKED: dict[tuple, list[str]] = {}


def expand(args: list[str], python: str = sys.executable) -> list[str]:
    """`args` with `--config F` replaced by the flags SGLang reads from F (first: the
    command line's own flags win); `args` itself when it has none."""
    for tok in args:
        if tok.startswith(FLAG + "="):  # SGLang itself would not read the file
            raise UserError(
                f"-- {tok}: SGLang reads its config file only from `--config FILE`.",
                fix=f"write -- --config {tok.split('=', 1)[1]}",
            )
    at = [i for i, tok in enumerate(args) if tok == FLAG]
    if not at:
        return list(args)
    asked = [t for i in at for t in args[i : i + 2]]  # every --config and its file
    for i in at:  # a FIFO would hang SGLang's reader, a missing file cost its import
        if i + 1 < len(args):
            safe_files.read_bytes("-- --config", args[i + 1])
    shown = " ".join(asked)
    key = (python, os.getcwd(), tuple(asked), tuple(_stamp(args[i + 1 : i + 2]) for i in at))
    if key not in _ASKED:
        _ASKED[key] = _ask(python, asked, shown)
    rest = [t for i, t in enumerate(args) if not any(j <= i <= j + 1 for j in at)]
    return [*_ASKED[key], *rest]


def _stamp(path: list[str]):
    try:
        st = os.stat(path[0])
        return st.st_mtime_ns, st.st_size
    except (OSError, IndexError, ValueError):
        return None


def _ask(python: str, asked: list[str], shown: str) -> list[str]:
    fix = "pass the file's options after -- instead"
    try:
        out = proctree.run_in_group([python, "-c", _SCRIPT, *asked], TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(
            f"-- {shown}: SGLang's parser reads the file, and {python} could not run it "
            f"({type(e).__name__}).",
            fix=fix,
        ) from None
    lines = [ln[len(TAG) :] for ln in out.stdout.splitlines() if ln.startswith(TAG)]
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if isinstance(answer.get("argv"), list) and all(isinstance(t, str) for t in answer["argv"]):
        return answer["argv"]
    why = answer.get("refused") or f"no answer (exit {out.returncode})"
    if "ModuleNotFoundError" in str(why) and "sglang" in str(why):
        why = f"no SGLang in {python}"
    raise UserError(f"-- {shown}: SGLang refuses it: {str(why)[:300]}.", fix=fix)
