"""Workload datasets: what each request of a run sends and how many tokens it asks for.

    --dataset shipped      the prompt set of --prompts (coding, encyclopedic, mixed, JSONL)
    --dataset sharegpt:F   ShareGPT conversations, F is .json (a list) or .jsonl (one per
                           line): {"conversations": [{"from": "human", "value": "..."}, ...]}
    --dataset random       synthetic text cut to --input-len from the long-prompt source
    --dataset long         the long-prompt source (shipped text or --long-text FILE) at
                           --input-len tokens: 1k..64k-token prompts

`--multi-turn` replays each ShareGPT conversation turn by turn, every turn carrying
the whole history so far (the server's own earlier answers included): an agent-like
workload whose context grows. A bad file is one UserError naming file, line and field.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import prompts as prompts_mod
from sgl_eagle_ext.tools.bench.lengths import LengthSpec
from sgl_eagle_ext.tools.bench.tokens import Counter, PromptBuilder

SHIPPED, SHAREGPT, RANDOM, LONG = "shipped", "sharegpt", "random", "long"
KINDS = (SHIPPED, SHAREGPT, RANDOM, LONG)
ROLE_OF = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
SHAPE = '{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}'


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str = ""  # the dataset's own answer (its length sets the output length)


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]
    system: str = ""


@dataclass(frozen=True)
class WorkRequest:
    """One request: its messages, and the token counts asked for (None: not fixed)."""

    id: str
    messages: tuple[tuple[str, str], ...]
    output_len: int | None = None
    input_len: int | None = None  # target prompt tokens (content), when fitted
    conversation: str = ""
    turn: int = 0

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def parse_spec(text: str) -> tuple[str, str | None]:
    kind, _, path = text.partition(":")
    if kind not in KINDS or (kind == SHAREGPT) != bool(path):
        raise UserError(
            f"--dataset {text}: unknown.",
            fix="use shipped, random, long or sharegpt:FILE (.json or .jsonl)",
        )
    return kind, path or None


# ---------------------------------------------------------------- ShareGPT
def _conversation(obj, where: str, index: int) -> Conversation | None:
    """One ShareGPT item -> Conversation (None: nothing to ask, e.g. it starts with gpt)."""
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}.", fix=SHAPE)
    conv = obj.get("conversations", obj.get("conversation"))
    if not isinstance(conv, list):
        raise UserError(f"{where}: needs a 'conversations' list.", fix=SHAPE)
    system, turns, pending = "", [], None
    for j, m in enumerate(conv):
        if not isinstance(m, dict):
            raise UserError(f"{where}: conversations[{j}] is not an object.", fix=SHAPE)
        role = ROLE_OF.get(str(m.get("from", m.get("role", ""))).lower())
        value = m.get("value", m.get("content"))
        if role is None:
            raise UserError(
                f"{where}: conversations[{j}].from is {m.get('from', m.get('role'))!r}.",
                fix="use human/user, gpt/assistant or system",
            )
        if not isinstance(value, str):
            raise UserError(f"{where}: conversations[{j}].value must be a string.", fix=SHAPE)
        if role == "system":
            system = value
        elif role == "user":
            if pending is not None:  # two user messages in a row: one turn
                pending = pending + "\n\n" + value
            else:
                pending = value
        elif pending is not None:
            turns.append(Turn(pending, value))
            pending = None
    if pending is not None:
        turns.append(Turn(pending, ""))
    turns = [t for t in turns if t.user.strip()]
    if not turns:
        return None
    cid = obj.get("id", f"conv-{index}")
    return Conversation(str(cid), tuple(turns), system)


def _json_items(text: str, source: str):
    """(item, line) of a JSON array, each with the line it starts on."""
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if not text[pos:].startswith("["):
        raise UserError(f"{source}: a .json dataset must be a JSON list.", fix=f"[{SHAPE}, ...]")
    pos += 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise UserError(f"{source}: the JSON list is not closed.", fix="end it with ]")
        if text[pos] == "]":
            return
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError as e:
            raise UserError(
                f"{source}:{text.count(chr(10), 0, e.pos) + 1}: not valid JSON ({e.msg}).",
                fix="fix the file (ShareGPT: a JSON list of conversations)",
            ) from None
        yield obj, line


def load_sharegpt(path: str) -> list[Conversation]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--dataset sharegpt:{path}: no such file.", fix="give a .json or .jsonl")
    try:
        text = safe_files.read_text("--dataset", p, cap=safe_files.DATA_CAP)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}).", fix="save as UTF-8") from None
    convs = []
    if text.lstrip().startswith("["):
        items = _json_items(text, str(p))
    else:
        items = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((json.loads(line), i))
            except ValueError as e:
                raise UserError(
                    f"{p}:{i}: not valid JSON ({e.msg} at column {e.colno}).",
                    fix=f"one conversation per line: {SHAPE}",
                ) from None
    for k, (obj, line) in enumerate(items):
        c = _conversation(obj, f"{p}:{line}", k)
        if c is not None:
            convs.append(c)
    if not convs:
        raise UserError(f"{p}: no conversation with a user turn.", fix=SHAPE)
    return convs


def file_sha256(path: str) -> str:
    import hashlib

    return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()


# ---------------------------------------------------------------- building requests
@dataclass
class Workload:
    name: str
    requests: list[WorkRequest]  # single-turn (or every conversation's first turn)
    conversations: list[Conversation]  # for --multi-turn
    input_len: LengthSpec
    output_len: LengthSpec
    counter: Counter
    sha256: str = ""


def _out_len(spec: LengthSpec, rng, counter: Counter, reply: str, default: int) -> int:
    n = spec.sample(rng)
    if n is not None:
        return n
    return counter.count(reply) if reply.strip() else default


def build(
    kind: str,
    path: str | None,
    n: int,
    *,
    input_len: LengthSpec,
    output_len: LengthSpec,
    default_output: int,
    counter: Counter,
    seed: int,
    prompt_set: str = prompts_mod.MIXED,
    builder: PromptBuilder | None = None,
) -> Workload:
    """`n` requests from a dataset, lengths drawn from the specs with `seed`."""
    rng = random.Random(seed)
    if kind in (RANDOM, LONG):
        if input_len.own:
            raise UserError(
                f"--dataset {kind} needs --input-len (a count or LOW:HIGH).",
                fix=f"e.g. --dataset {kind} --input-len 4096",
            )
        reqs = []
        for i in range(n):
            target = input_len.sample(rng)
            fitted = builder.build(i if kind == LONG else 1_000_000 + i, target)
            reqs.append(
                WorkRequest(
                    f"{kind}-{i}",
                    (("user", fitted.text),),
                    output_len.sample(rng) or default_output,
                    target,
                )
            )
        return Workload(kind, reqs, [], input_len, output_len, counter)
    if kind == SHAREGPT:
        convs = load_sharegpt(path)
        rng.shuffle(convs)
        convs = [convs[i % len(convs)] for i in range(n)]
        reqs, seen = [], {}
        for c in convs:
            seen[c.id] = seen.get(c.id, 0) + 1
            t = c.turns[0]
            msgs = ((("system", c.system),) if c.system else ()) + (("user", t.user),)
            reqs.append(
                WorkRequest(
                    c.id if seen[c.id] == 1 else f"{c.id}#{seen[c.id]}",
                    msgs,
                    _out_len(output_len, rng, counter, t.reply, default_output),
                    None,
                    c.id,
                    0,
                )
            )
        if not input_len.own:
            reqs = _refit(reqs, input_len, rng, builder)
        return Workload(
            f"sharegpt:{Path(path).name}",
            reqs,
            convs,
            input_len,
            output_len,
            counter,
            file_sha256(path),
        )
    ps = prompts_mod.load(prompt_set)
    reqs = [
        WorkRequest(p.id, p.messages, output_len.sample(rng) or default_output)
        for p in ps.take(n, seed)
    ]
    if not input_len.own:
        reqs = _refit(reqs, input_len, rng, builder)
    return Workload(ps.name, reqs, [], input_len, output_len, counter, ps.sha256)


def _refit(reqs, spec: LengthSpec, rng, builder: PromptBuilder | None) -> list[WorkRequest]:
    """A dataset's prompts at a fixed input length: its question after source text."""
    out = []
    for i, r in enumerate(reqs):
        target = spec.sample(rng)
        last = r.messages[-1][1]
        own = builder.counter.count(last)
        fill = builder.build(i, max(1, target - own)) if target > own else None
        text = (fill.text.rsplit("\n\n", 1)[0] + "\n\n" + last) if fill else last
        out.append(
            WorkRequest(
                r.id,
                (*r.messages[:-1], ("user", text)),
                r.output_len,
                target,
                r.conversation,
                r.turn,
            )
        )
    return out
