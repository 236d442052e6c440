"""Prompt sets: the shipped ones and user JSONL files, as chat messages.

A prompt file is JSONL, one prompt per line (blank lines are skipped):

    {"id": "q1", "messages": [{"role": "system", "content": "..."}, {"role": "user", ...}]}
    {"prompt": "plain text, sent as one user message"}

`id` and `category` are optional. The chat endpoint applies the server's chat
template, so the same file fits any model.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError

SHIPPED_DIR = resources.files("sgl_eagle_ext.tools.bench") / "prompt_sets"
SHIPPED = ("coding", "encyclopedic")
MIXED = "mixed"  # the two shipped sets, interleaved
ROLES = {"system", "user", "assistant"}


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    category: str = ""

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass(frozen=True)
class PromptSet:
    name: str  # shipped name or the file path
    prompts: tuple[Prompt, ...]
    sha256: str  # of the canonical JSON of every prompt, in file order

    def take(self, n: int, seed: int, offset: int = 0) -> list[Prompt]:
        """`n` prompts in a seeded order (the same for every arm of an A/B), cycling when
        the set is smaller."""
        order = list(self.prompts)
        random.Random(seed).shuffle(order)
        return [order[(offset + i) % len(order)] for i in range(n)]


def one_of(ps: PromptSet, seed: int) -> PromptSet:
    """The first prompt of the seeded order alone: every request the same prompt."""
    return PromptSet(ps.name, tuple(ps.take(1, seed)), ps.sha256)


def _parse_line(text: str, where: str, index: int) -> Prompt:
    try:
        obj = nesting.json_loads(text)
    except (ValueError, RecursionError) as e:
        why = (
            f"{e.msg} at column {e.colno}"
            if isinstance(e, json.JSONDecodeError)
            else "nested too deeply"
            if isinstance(e, nesting.TooDeep | RecursionError)
            else str(e).split(";")[0]
        )
        raise UserError(
            f"{where}: not valid JSON ({why}).",
            fix='one JSON object per line, e.g. {"prompt": "..."}',
        ) from None
    if not isinstance(obj, dict):
        raise UserError(
            f"{where}: expected a JSON object, got {type(obj).__name__}.",
            fix='one JSON object per line, e.g. {"prompt": "..."}',
        )
    pid = obj.get("id", f"line-{index}")
    category = obj.get("category", "")
    if not isinstance(pid, (str, int)) or not isinstance(category, str):
        raise UserError(
            f"{where}: 'id' must be a string or number and 'category' a string.",
            fix="fix or drop those fields",
        )
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise UserError(
                f"{where}: 'messages' must be a non-empty list.",
                fix='e.g. "messages": [{"role": "user", "content": "..."}]',
            )
        pairs = []
        for j, m in enumerate(msgs):
            if (
                not isinstance(m, dict)
                or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)
                or not m["content"]
            ):
                raise UserError(
                    f"{where}: messages[{j}] needs a role ({', '.join(sorted(ROLES))}) "
                    f"and a non-empty string content.",
                    fix='e.g. {"role": "user", "content": "..."}',
                )
            pairs.append((m["role"], m["content"]))
        if pairs[-1][0] == "assistant":
            raise UserError(
                f"{where}: the last message is the assistant's; nothing to answer.",
                fix="end with a user message",
            )
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise UserError(f"{where}: 'prompt' must be a non-empty string.", fix="fix the line")
        pairs = [("user", obj["prompt"])]
    else:
        raise UserError(
            f"{where}: needs a 'prompt' string or a 'messages' list.",
            fix='e.g. {"prompt": "Explain ..."}',
        )
    return Prompt(str(pid), tuple(pairs), category)


def parse_jsonl(text: str, source: str) -> list[Prompt]:
    prompts = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            prompts.append(_parse_line(line, f"{source}:{i}", i))
    if not prompts:
        raise UserError(f"{source}: no prompts in the file.", fix="one JSON object per line")
    return prompts


def digest(prompts: list[Prompt] | tuple[Prompt, ...]) -> str:
    canon = json.dumps(
        [[p.id, p.category, [list(m) for m in p.messages]] for p in prompts],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canon.encode()).hexdigest()


def _shipped(name: str) -> list[Prompt]:
    file = SHIPPED_DIR / f"{name}.jsonl"
    return parse_jsonl(file.read_text(encoding="utf-8"), f"{name}.jsonl (shipped)")


def load(spec: str) -> PromptSet:
    """`coding`, `encyclopedic`, `mixed`, or a path to a JSONL file."""
    if spec in SHIPPED:
        prompts = _shipped(spec)
    elif spec == MIXED:
        a, b = (_shipped(n) for n in SHIPPED)
        prompts = [p for pair in zip(a, b) for p in pair] + a[len(b) :] + b[len(a) :]
    else:
        path = Path(spec).expanduser()
        if path.exists() and not path.is_file():
            safe_files.check_regular("--prompts", path)  # a FIFO, a device: says which
        if not path.is_file():
            raise UserError(
                f"--prompts {spec}: no such file, and not a shipped set.",
                fix=f"use one of {', '.join((*SHIPPED, MIXED))} or a JSONL file path",
            )
        text = safe_files.read_text("--prompts", path, cap=safe_files.DATA_CAP)  # its own errors
        prompts = parse_jsonl(text, str(path))
        spec = str(path.resolve())
    return PromptSet(spec, tuple(prompts), digest(prompts))
