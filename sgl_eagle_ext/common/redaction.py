"""Secrets out of every output: by name (a variable, flag or field that says key,
token, secret, password, credential or auth) and by value (a key this process
knows, wherever it turns up: SGLang's /server_info echoes its own command line).
One rule for the launcher, bench, router and every record."""

from __future__ import annotations

import functools
import json
import re
import shlex
import sys
import urllib.parse
from contextlib import contextmanager

from sgl_eagle_ext.common import render

# A name part (between - or _) that says secret: HF_TOKEN, --api-key, ssl_keyfile_password,
# GCP_CREDENTIALS, PROXY_AUTH; not --max-tokens or TOKENIZERS_PARALLELISM.
SECRET = re.compile(
    r"(?:^|[-_])(?:key|token|secret|password|passwd|credentials?|auth)(?:[-_]|$)", re.IGNORECASE
)
REDACTED = "***"


# The secret flags of SGLang's server (releases.SECRET_SERVER_FLAGS, repeated here to
# keep this module free of imports) and the full flags that are prefixes of them:
# argparse takes any unambiguous prefix (`--api-k`), so a prefix hides its value too.
SECRET_FLAGS = ("api-key", "admin-api-key", "ssl-keyfile-password")
NOT_SECRET_PREFIXES = ("ssl-keyfile",)


def abbreviates_secret(name: str) -> str | None:
    """The secret flag `name` (no dashes) is an argparse abbreviation of, or None."""
    if name in NOT_SECRET_PREFIXES or name in SECRET_FLAGS:
        return None
    return next((f for f in SECRET_FLAGS if len(name) >= 1 and f.startswith(name)), None)


def is_secret_name(name: str) -> bool:
    return bool(SECRET.search(name.lstrip("-")))


def redact_env(env: dict[str, str], keep=lambda name: True) -> dict[str, str]:
    """The variables `keep` selects, sorted, secret-named ones replaced."""
    return {k: REDACTED if is_secret_name(k) else v for k, v in sorted(env.items()) if keep(k)}


def _header(value: str) -> str:
    """`Name: value` -> `Name: ***`: header values often carry credentials."""
    name, sep, _ = value.partition(":")
    return f"{name}:{REDACTED}" if sep else REDACTED


def redact_args(args: list[str]) -> list[str]:
    """`--api-key X` / `--api-key=X` (any secret-named flag) -> `--api-key ***`;
    `--header K:V` -> `--header K:***`."""
    out, hide_next, header_next = [], False, False
    for tok in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if header_next:
            out.append(_header(tok))
            header_next = False
            continue
        if tok == "--header":
            out.append(tok)
            header_next = True
            continue
        if tok.startswith("--header="):
            out.append("--header=" + _header(tok.split("=", 1)[1]))
            continue
        flag = tok[2:].split("=", 1)[0]
        if tok.startswith("--") and (is_secret_name(flag) or abbreviates_secret(flag)):
            if "=" in tok:
                out.append(tok.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(tok)
                hide_next = True
            continue
        out.append(tok)
    return out


def redact_command(text: str) -> str:
    """A command line given as one string (SGLang's `launch_command`)."""
    try:
        return " ".join(
            t if t.endswith(REDACTED) else shlex.quote(t) for t in redact_args(shlex.split(text))
        )
    except ValueError:  # unbalanced quotes: hide whatever follows a secret-named flag
        return re.sub(r"(--[\w-]*(?:key|token|secret|password|auth)[\w-]*[= ])\S+", r"\1***", text)


# A secret shorter than this is masked only as a whole token: a 1-3 character key
# replaced wherever its characters occur would turn every record into `***`.
SUBSTRING_MIN = 8
_WORD = r"[A-Za-z0-9_]"


@functools.lru_cache(maxsize=64)  # masking runs on every printed line: forms made once
def written_forms(secret: str) -> tuple[str, ...]:
    """Every way a logger or a server may write `secret`: raw, repr-escaped (SGLang
    logs its ServerArgs repr), JSON-escaped, JSON inside JSON, URL-encoded, and its
    UTF-8 bytes read back as Latin-1 or cp1252 (mojibake); longest first."""
    forms = {secret, repr(secret)[1:-1], secret.encode("unicode_escape").decode("ascii")}
    js = json.dumps(secret)[1:-1]
    forms |= {js, json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(js)[1:-1]}
    forms |= {urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    raw = secret.encode("utf-8", "surrogatepass")
    for codec in ("latin-1", "cp1252"):
        mojibake = raw.decode(codec, "replace")
        forms |= {mojibake, json.dumps(mojibake)[1:-1]}
    return tuple(sorted(forms, key=len, reverse=True))


# Secrets this process knows (an API key given to the tool): masked in every line it
# prints (masked_output) and every record it writes, whoever forgot to pass them.
_KNOWN: list[str] = []


def remember(*secrets: str | None) -> None:
    for s in secrets:
        if s and isinstance(s, str) and s not in _KNOWN:
            _KNOWN.append(s)


def known() -> tuple[str, ...]:
    return tuple(_KNOWN)


def _cut_tail(text: str, secret: str) -> str:
    """A reply cut short (an error body kept to 300 characters) may end inside the
    secret: a tail of text that starts one of its forms is masked too."""
    if len(secret) < SUBSTRING_MIN:
        return text
    for form in written_forms(secret):
        for n in range(min(len(form) - 1, len(text)), SUBSTRING_MIN - 1, -1):
            if text.endswith(form[:n]):
                return text[:-n] + REDACTED
    return text


def redact_text(text: str, secrets: list[str] | tuple[str, ...]) -> str:
    """`text` with every known secret value replaced, in any of its written forms."""
    for s in secrets:
        if not s or not isinstance(text, str):
            continue
        for form in written_forms(s):
            if len(s) >= SUBSTRING_MIN:
                text = text.replace(form, REDACTED)
            elif form in text:
                text = re.sub(
                    f"(?<!{_WORD}){re.escape(form)}(?!{_WORD})", lambda _m: REDACTED, text
                )
        text = _cut_tail(text, s)
    return text


class _Masking:
    """A text stream that masks the known secrets in whatever is written to it, and
    shows terminal controls (ESC ...) escaped (common/render.py)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        if isinstance(text, str):
            if _KNOWN:
                text = redact_text(text, _KNOWN)
            text = render.terminal(text)  # no value printed drives the terminal (ANSI)
        return self._stream.write(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextmanager
def masked_output():
    """sys.stdout and sys.stderr masked for the duration (the CLI entry wrapper)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (_Masking(s) if s is not None else s for s in saved)
    try:
        yield
    finally:
        # put back only what is still ours (a test's redirect may have replaced it)
        if isinstance(sys.stdout, _Masking):
            sys.stdout = saved[0]
        if isinstance(sys.stderr, _Masking):
            sys.stderr = saved[1]


def redact_tree(obj, secrets: list[str] | tuple[str, ...] = ()):
    """A JSON-like value with secret-named fields hidden, command-line strings
    redacted and every known secret value replaced, at any depth."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if is_secret_name(str(k)) and v not in (None, "", False):
                out[k] = REDACTED
            elif isinstance(v, str) and "command" in str(k):
                out[k] = redact_text(redact_command(v), secrets)
            else:
                out[k] = redact_tree(v, secrets)
        return out
    if isinstance(obj, (list, tuple)):
        return (
            redact_args([redact_tree(v, secrets) for v in obj])
            if _all_str(obj)
            else [redact_tree(v, secrets) for v in obj]
        )
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    return obj


def redact_values(obj, secrets: list[str] | tuple[str, ...]):
    """A JSON-like value with every known secret value replaced, at any depth
    (names untouched: a record's own fields such as `level_key` are not secrets)."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return obj
    if isinstance(obj, dict):
        return {k: redact_values(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_values(v, secrets) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    return obj


def _all_str(seq) -> bool:
    return bool(seq) and all(isinstance(v, str) for v in seq)
