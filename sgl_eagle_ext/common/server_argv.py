"""ServerArgv: an SGLang argument list, parsed once, read through typed accessors.

The one place that reads flags back out of an argument list (the launch plan's
final argv, the preflight's, a server's command line found by the health check):

    argv = ServerArgv(["--model-path", "M", "--port=30001", "--disable-cuda-graph"])
    argv.value("port")          -> "30001"   (`--flag V` or `--flag=V`; the last one wins)
    argv.has("disable-cuda-graph") -> True
    argv.port, argv.host, argv.model_path, argv.tp_size, argv.num_steps ...

Names are given without dashes (a leading `--` is accepted too). It reads a value as
argparse does for a flag that takes one: the next token, whatever it looks like.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000
TP_NAMES = ("tp-size", "tp", "tensor-parallel-size")


def _name(flag: str) -> str:
    return flag[2:] if flag.startswith("--") else flag


class ServerArgv(Sequence[str]):
    """An immutable argument list and every `--flag` occurrence in it."""

    __slots__ = ("_items", "_seen", "tokens")

    def __init__(self, tokens: Iterable[str] = ()):
        self.tokens: tuple[str, ...] = tuple(str(t) for t in tokens)
        items: list[tuple[str, str | None]] = []
        for i, tok in enumerate(self.tokens):
            if not tok.startswith("--"):
                continue
            name, eq, inline = tok[2:].partition("=")
            if eq:
                value: str | None = inline
            else:
                value = self.tokens[i + 1] if i + 1 < len(self.tokens) else None
            items.append((name, value))
        self._items = tuple(items)
        seen: dict[str, list[str | None]] = {}
        for name, value in items:
            seen.setdefault(name, []).append(value)
        self._seen = seen

    @classmethod
    def of(cls, args: Iterable[str]) -> ServerArgv:
        return args if isinstance(args, ServerArgv) else cls(args)

    # -- the sequence of tokens --
    def __getitem__(self, i):
        return self.tokens[i]

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other) -> bool:
        if isinstance(other, ServerArgv):
            return self.tokens == other.tokens
        if isinstance(other, (list, tuple)):
            return list(self.tokens) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ServerArgv({list(self.tokens)!r})"

    # -- reading flags --
    def has(self, flag: str) -> bool:
        """The flag appears (bare, with a value, or `--flag=V`)."""
        return _name(flag) in self._seen

    def items(self) -> tuple[tuple[str, str | None], ...]:
        """(name, value) of every `--flag` in order of appearance."""
        return self._items

    def values(self, flag: str) -> list[str | None]:
        """Every occurrence's value in order (None: the last token, bare)."""
        return list(self._seen.get(_name(flag), ()))

    def value(self, *flags: str) -> str | None:
        """The value argparse keeps for the first of `flags` that has one (last wins)."""
        for flag in flags:
            found = [v for v in self._seen.get(_name(flag), ()) if v is not None]
            if found:
                return found[-1]
        return None

    def last_of(self, *spellings: str) -> str | None:
        """The value at the last occurrence of any spelling (argparse aliases of one
        flag: the last on the line wins); None when that one is bare at the end."""
        names = {_name(s) for s in spellings}
        last = None
        for i, tok in enumerate(self.tokens):
            if tok.startswith("--") and tok[2:].partition("=")[0] in names:
                last = i
        if last is None:
            return None
        tok = self.tokens[last]
        if "=" in tok:
            return tok.partition("=")[2]
        return self.tokens[last + 1] if last + 1 < len(self.tokens) else None

    def switch(self, flag: str) -> str | None:
        """A flag that may be bare: None absent, "" bare (or followed by another
        flag), else its value."""
        if not self.has(flag):
            return None
        value = self.value(flag)
        return "" if value is None or value.startswith("--") else value

    def ints(self, *flags: str) -> list[int]:
        """The integers after the last of `flags` (a list flag: `--cuda-graph-bs 1 2 4`);
        [] when absent or not all integers."""
        found: list[str] = []
        names = {_name(f) for f in flags}
        for i, tok in enumerate(self.tokens):
            name, eq, inline = tok[2:].partition("=")
            if not tok.startswith("--") or name not in names:
                continue
            found, j = ([inline] if eq else []), i + 1
            while not eq and j < len(self.tokens) and not self.tokens[j].startswith("--"):
                found.append(self.tokens[j])
                j += 1
        try:
            return [int(v) for v in found]
        except ValueError:
            return []

    def number(self, *flags: str, default: int | None = None) -> int | None:
        """`value(*flags)` as an int; `default` when absent or not a number."""
        try:
            text = self.value(*flags)
            return int(text) if text is not None else default
        except ValueError:
            return default

    # -- the settings everybody asks for --
    @property
    def host(self) -> str:
        return self.value("host") or DEFAULT_HOST

    @property
    def tls_certfile(self) -> str | None:
        """--ssl-certfile: SGLang serves https:// when it is given (its ServerArgs.url)."""
        return self.value("ssl-certfile")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_certfile else "http"

    @property
    def port_text(self) -> str:
        """The port as given (checked by the caller: http.parse_port)."""
        return self.value("port") or str(DEFAULT_PORT)

    @property
    def model_path(self) -> str | None:
        return self.value("model-path")

    @property
    def draft_model_path(self) -> str | None:
        return self.value("speculative-draft-model-path")

    @property
    def tp_size(self) -> int:
        return self.number(*TP_NAMES, default=1)

    @property
    def speculative_algorithm(self) -> str | None:
        return self.value("speculative-algorithm")

    @property
    def num_steps(self) -> int | None:
        return self.number("speculative-num-steps")

    @property
    def topk(self) -> int | None:
        return self.number("speculative-eagle-topk")

    @property
    def num_draft_tokens(self) -> int | None:
        return self.number("speculative-num-draft-tokens")

    def with_value(self, flag: str, value: str) -> ServerArgv:
        """This list with every `--flag V` / `--flag=V` set to `value` (nothing added)."""
        out, skip = [], False
        flag = "--" + _name(flag)
        for i, tok in enumerate(self.tokens):
            if skip:
                skip = False
            elif tok == flag and i + 1 < len(self.tokens):
                out += [flag, value]
                skip = True
            elif tok.startswith(flag + "="):
                out.append(f"{flag}={value}")
            else:
                out.append(tok)
        return ServerArgv(out)

    def without(self, flag: str) -> tuple[ServerArgv, str | None]:
        """This list without `--flag V` / `--flag=V`, and the (last) value removed."""
        out, value, skip = [], None, False
        flag = "--" + _name(flag)
        for i, tok in enumerate(self.tokens):
            if skip:
                skip = False
            elif tok == flag and i + 1 < len(self.tokens):
                value, skip = self.tokens[i + 1], True
            elif tok.startswith(flag + "="):
                value = tok.split("=", 1)[1]
            else:
                out.append(tok)
        return ServerArgv(out), value
