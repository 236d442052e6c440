"""Workload datasets: what each request of a run sends and how many tokens it asks for.

    --dataset shipped      the prompt set of --prompts (coding, encyclopedic, mixed, JSONL)
    --dataset sharegpt:F   ShareGPT conversations, F is .json (a list) or .jsonl (one per
                           line): {"conversations": [{"from": "human", "value": "..."}, ...]}
    --dataset random       synthetic text cut to --input-len from the long-prompt source
    --dataset long         the long-prompt source (shipped text or --long-text FILE) at
                           --input-len tokens: 1k..64k-token prompts
    --dataset shared-prefix:N  every request starts with the same N-token system prompt
                           (prefix-cache reuse), then its own question: the --prompts
                           set's, or --input-len tokens of source text
    --dataset trace:FILE   a request trace (traces.py: Mooncake .jsonl, BurstGPT .csv):
                           each row's input/output lengths; replayed at its timestamps
                           unless --concurrency or --request-rate is given
    --dataset hf:PATH      a Hugging Face dataset on disk (hf_data.py: a save_to_disk
                           folder or .parquet), read like ShareGPT

`--multi-turn` replays each ShareGPT conversation turn by turn, every turn carrying
the whole history so far (the server's own earlier answers included): an agent-like
workload whose context grows. A bad file is one UserError naming file, line and field.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import prompts as prompts_mod
from sgl_eagle_ext.tools.bench.lengths import MAX_LEN, LengthSpec
from sgl_eagle_ext.tools.bench.tokens import Counter, PromptBuilder

SHIPPED, SHAREGPT, RANDOM, LONG = "shipped", "sharegpt", "random", "long"
SHARED_PREFIX, TRACE, HF = "shared-prefix", "trace", "hf"
MAX_PREFIX = MAX_LEN  # shared-prefix:N tokens: the bound of --input-len
KINDS = (SHIPPED, SHAREGPT, RANDOM, LONG, SHARED_PREFIX, TRACE, HF)
WITH_ARG = (SHAREGPT, SHARED_PREFIX, TRACE, HF)  # KIND:ARG
CONVERSATIONS = (SHAREGPT, HF)  # datasets of conversations (--multi-turn)
# index spaces of PromptBuilder text, apart from the requests' own (0.., 1_000_000..)
PREFIX_INDEX = 3_000_000
BLOCK_INDEX = 4_000_000
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

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def parse_spec(text: str) -> tuple[str, str | None]:
    kind, _, path = text.partition(":")
    if kind not in KINDS or (kind in WITH_ARG) != bool(path):
        raise UserError(
            f"--dataset {text}: unknown.",
            fix="use shipped, random, long, sharegpt:FILE (.json or .jsonl), shared-prefix:N, "
            "trace:FILE (Mooncake .jsonl or BurstGPT .csv) or hf:PATH (save_to_disk folder "
            "or .parquet)",
        )
    if kind == SHARED_PREFIX and not (
        path.isascii() and path.isdigit() and len(path) <= 8 and 1 <= int(path) <= MAX_PREFIX
    ):
        raise UserError(
            f"--dataset {text[:40]}: N must be a token count >= 1 and at most {MAX_PREFIX} "
            f"(beyond any model's context; the prompt is built in memory).",
            fix="e.g. --dataset shared-prefix:2048",
        )
    return kind, path or None


def strip_question(text: str) -> str:
    """A builder prompt without its closing question (a block of a longer prompt)."""
    return text.rsplit("\n\n", 1)[0]


def load_hf(path: str) -> list[Conversation]:
    from sgl_eagle_ext.tools.bench import hf_data

    convs = []
    for k, row in enumerate(hf_data.rows(path)):
        c = _conversation(hf_data.as_sharegpt(row, f"{path} row {k}"), f"{path} row {k}", k)
        if c is not None:
            convs.append(c)
    if not convs:
        raise UserError(f"{path}: no row with a user turn.", fix="check the dataset's columns")
    return convs


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


def _once_per_file(read):
    """`read(path)` once while the file is unchanged: a sweep reads its dataset when it
    plans, when it attaches to the server and whenever a level needs more requests.
    A failed read is not kept; each call gets its own copy of a list."""

    @functools.lru_cache(maxsize=8)
    def kept(path: str, _where: tuple):
        return read(path)

    @functools.wraps(read)
    def once(path: str):
        p = Path(path).expanduser()
        try:
            st = p.stat()
        except OSError:
            return read(path)  # its own message
        return copy.copy(kept(path, (str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)))

    return once


@_once_per_file
def load_sharegpt(path: str) -> list[Conversation]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--dataset sharegpt:{path}: no such file.", fix="give a .json or .jsonl")
    text = safe_files.read_text("--dataset", p, cap=safe_files.DATA_CAP)  # its own errors
    convs = []
    if text.lstrip().startswith("["):
        try:  # the decoder recurses per bracket: a deep file is refused before it
            nesting.check(text)
        except nesting.TooDeep as e:
            raise UserError(f"{p}: {e}.", fix=f"a JSON list of conversations: {SHAPE}") from None
        items = _json_items(text, str(p))
    else:
        items = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append((nesting.json_loads(line), i))
            except ValueError as e:  # JSONDecodeError, or nesting.TooDeep (no position)
                why = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else e
                raise UserError(
                    f"{p}:{i}: not valid JSON ({why}).",
                    fix=f"one conversation per line: {SHAPE}",
                ) from None
    for k, (obj, line) in enumerate(items):
        c = _conversation(obj, f"{p}:{line}", k)
        if c is not None:
            convs.append(c)
    if not convs:
        raise UserError(f"{p}: no conversation with a user turn.", fix=SHAPE)
    return convs


@_once_per_file
def trace_rows(path: str) -> list:
    """A trace's rows (tools/bench/traces.py), read once while the file is unchanged."""
    from sgl_eagle_ext.tools.bench import traces

    return traces.load(path)


@_once_per_file
def file_sha256(path: str) -> str:
    import hashlib

    return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()


# ---------------------------------------------------------------- building requests
@dataclass
class Workload:
    name: str
    requests: list[WorkRequest]  # single-turn (or every conversation's first turn)
    conversations: list[Conversation]  # for --multi-turn
    sha256: str = ""
    source_count: int | None = None  # the file's conversations or rows (None: generated)


def out_len(spec: LengthSpec, rng, counter: Counter, reply: str, default: int) -> int:
    """A request's output length: drawn from the spec, else its reply's, else `default`."""
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
                    (("user", fitted),),
                    output_len.sample(rng) or default_output,
                    target,
                )
            )
        return Workload(kind, reqs, [])
    if kind == SHARED_PREFIX:
        return _shared_prefix(
            int(path),
            n,
            input_len,
            output_len,
            default_output,
            rng,
            seed,
            prompt_set,
            builder,
        )
    if kind == TRACE:
        return _trace(path, n, output_len, builder)
    if kind in CONVERSATIONS:
        convs = load_sharegpt(path) if kind == SHAREGPT else load_hf(path)
        rng.shuffle(convs)
        source_count = len(convs)
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
                    out_len(output_len, rng, counter, t.reply, default_output),
                )
            )
        if not input_len.own:
            reqs = _refit(reqs, input_len, rng, builder)
        return Workload(
            f"{kind}:{Path(path).name}",
            reqs,
            convs,
            file_sha256(path) if Path(path).is_file() else "",
            source_count,
        )
    ps = prompts_mod.load(prompt_set)
    reqs = [
        WorkRequest(p.id, p.messages, output_len.sample(rng) or default_output)
        for p in ps.take(n, seed)
    ]
    if not input_len.own:
        reqs = _refit(reqs, input_len, rng, builder)
    return Workload(ps.name, reqs, [], ps.sha256, len(ps.prompts))


def _shared_prefix(
    prefix_len, n, input_len, output_len, default_output, rng, seed, prompt_set, builder
) -> Workload:
    """The same `prefix_len`-token system prompt on every request, then its own question:
    --input-len tokens of source text, else the next prompt of the --prompts set."""
    prefix = strip_question(builder.build(PREFIX_INDEX, prefix_len))
    if input_len.own:
        qs = [(p.id, p.messages[-1][1], None) for p in prompts_mod.load(prompt_set).take(n, seed)]
    else:
        qs = []
        for i in range(n):
            q = input_len.sample(rng)
            qs.append((f"q-{i}", builder.build(1_000_000 + i, q), q))
    reqs = [
        WorkRequest(
            f"shared-{qid}",
            (("system", prefix), ("user", text)),
            output_len.sample(rng) or default_output,
            prefix_len + q if q else None,
        )
        for qid, text, q in qs
    ]
    return Workload(f"shared-prefix:{prefix_len}", reqs, [])


def _trace(path: str, n: int, output_len: LengthSpec, builder) -> Workload:
    """The trace's first `n` rows (cycling when it has fewer), each at its own input and
    output length; a Mooncake row's prompt is made of one text block per hash id, so
    rows sharing leading ids share that prefix (as the trace's own requests did)."""
    from sgl_eagle_ext.tools.bench import traces

    rows = trace_rows(path)
    reqs = []
    for i in range(n):
        row = rows[i % len(rows)]
        if row.hash_ids:
            full = row.hash_ids[:-1]
            blocks = [
                strip_question(builder.build(BLOCK_INDEX + h, traces.MOONCAKE_BLOCK)) for h in full
            ]
            tail = max(1, row.input_len - traces.MOONCAKE_BLOCK * len(full))
            blocks.append(builder.build(BLOCK_INDEX + row.hash_ids[-1], tail))
            text = "\n\n".join(blocks)
        else:
            text = builder.build(2_000_000 + i, row.input_len)
        reqs.append(
            WorkRequest(
                f"trace-{i}",
                (("user", text),),
                output_len.sample(random.Random(i)) or row.output_len,
                row.input_len,
            )
        )
    return Workload(f"trace:{Path(path).name}", reqs, [], file_sha256(path), len(rows))


def trace_times(path: str) -> list[float]:
    """Arrival times (seconds from the first) of a trace's rows, in order."""

    return [r.at for r in trace_rows(path)]


def _refit(reqs, spec: LengthSpec, rng, builder: PromptBuilder | None) -> list[WorkRequest]:
    """A dataset's prompts at a fixed input length: its question after source text."""
    out = []
    for i, r in enumerate(reqs):
        target = spec.sample(rng)
        last = r.messages[-1][1]
        own = builder.counter.count(last)
        fill = builder.build(i, max(1, target - own)) if target > own else None
        text = (strip_question(fill) + "\n\n" + last) if fill else last
        out.append(replace(r, messages=(*r.messages[:-1], ("user", text)), input_len=target))
    return out
