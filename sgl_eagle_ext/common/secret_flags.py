"""SGLang's secret-bearing flags (releases.SECRET_SERVER_FLAGS) on their way to the
server: taken off the command line by the launcher, carried in the environment
(EAGLE_EXT_<FLAG>, e.g. EAGLE_EXT_ADMIN_API_KEY), and put back into SGLang's
arguments inside the server process (in_sglang/serve.py), where no `ps` sees them."""

from __future__ import annotations

import re

from sgl_eagle_ext.common import redaction
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.paths import read_secret_file
from sgl_eagle_ext.common.releases import SECRET_SERVER_FLAGS
from sgl_eagle_ext.common.server_argv import ServerArgv

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The keys SGLang compares with a request's Bearer token (its utils/auth.py).
COMPARED = ("api-key", "admin-api-key")


def env_name(flag: str) -> str:
    """`admin-api-key` -> `EAGLE_EXT_ADMIN_API_KEY` (api-key: contract.API_KEY_ENV)."""
    return "EAGLE_EXT_" + flag.upper().replace("-", "_")


def check_value(flag: str, value: str, shown: str | None = None) -> str:
    """A secret no HTTP client could send (CR, LF, NUL in a header) is refused now:
    the server would start and every request, readiness included, would fail. A
    non-ASCII API key likewise: SGLang compares keys with secrets.compare_digest,
    which raises TypeError for non-ASCII text, so the server dies at its warm-up request,
    after the whole model load. Accepted values are remembered for masking.
    `shown`: how the message names where the value came from (default `--flag`)."""
    where = shown or f"--{flag}"
    if not value:
        raise UserError(f"{where}: empty value.", fix=f"give --{flag} a value or drop it")
    if CONTROL.search(value):
        raise UserError(
            f"{where}: the value holds a control character (CR, LF, NUL, ...), which no "
            f"HTTP header can carry.",
            fix="write the secret without line breaks or control characters",
        )
    if flag in COMPARED and not value.isascii():
        raise UserError(
            f"{where}: the value holds non-ASCII characters; SGLang compares keys as "
            f"ASCII text and its server would fail at its first request, after the "
            f"whole model load.",
            fix="use a key of ASCII letters, digits and punctuation",
        )
    redaction.remember(value)
    return value


def refuse_abbreviations(args: list[str]) -> None:
    """argparse (SGLang's parser) takes `--api-k` for `--api-key`: an abbreviated secret
    flag would slip past `take` onto the command line, so it is refused, naming the
    full flag, before its value is printed or passed anywhere."""
    for tok in args:
        if not tok.startswith("--") or tok == "--":
            continue
        full = redaction.abbreviates_secret(tok[2:].split("=", 1)[0])
        if full:
            shown = tok.split("=", 1)[0]
            raise UserError(
                f"{shown}: an abbreviation of the secret flag --{full}; it would put the "
                f"secret on the server's command line and in its log.",
                fix=f"write --{full} in full (it is then passed in the environment, not "
                f"on a command line), or use --api-key-file / EAGLE_EXT_* variables",
            )


def take(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """`args` without any secret flag, and {flag: value} of those removed (checked);
    an abbreviated secret flag is refused."""
    refuse_abbreviations(args)
    argv, found = ServerArgv(args), {}
    for flag in SECRET_SERVER_FLAGS:
        argv, value = argv.without(flag)
        if value is not None:
            found[flag] = check_value(flag, value)
    return list(argv), found


def from_environment(environ: dict[str, str]) -> dict[str, str]:
    """{flag: value} of the secret variables set in `environ` (checked)."""
    return {
        flag: check_value(flag, environ[env_name(flag)])
        for flag in SECRET_SERVER_FLAGS
        if environ.get(env_name(flag))
    }


def gather(args: list[str], api_key_file: str | None, environ) -> tuple[list[str], dict]:
    """The launcher's secrets: `-- --flag V` first, then --api-key-file, then the
    EAGLE_EXT_* variables; returns `args` without them and {flag: value}."""
    args, found = take(args)
    key = read_secret_file("--api-key-file", api_key_file)
    if key:
        found.setdefault("api-key", check_value("api-key", key))
    for flag, value in from_environment(environ).items():
        found.setdefault(flag, value)
    return args, found


def to_environment(found: dict[str, str]) -> dict[str, str]:
    return {env_name(flag): value for flag, value in found.items()}


def argv_from_environment(environ) -> list[str]:
    """In the server process: the secret flags as SGLang arguments, their variables
    removed from `environ` (SGLang's children need not inherit them)."""
    out = []
    for flag in SECRET_SERVER_FLAGS:
        value = environ.pop(env_name(flag), None)
        if value:
            out += [f"--{flag}", value]
    return out
