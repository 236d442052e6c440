"""Counting prompt tokens and building prompts of an exact token length.

Who counts, best first: the model directory's own tokenizer when it is on this
host and `transformers` imports (exact, no server round trip); the server's
`/v1/tokenize` (SGLang; exact); else an estimate of 4 characters per token. After
a run the counts are checked against the server's `usage.prompt_tokens` anyway
(`check_against_usage`), so an estimate can never pass silently.

Long prompts (1k..64k tokens and more) are cut from a source text: the prompts
the project ships (written for it) or a user's plain-text file. Each request gets
the paragraphs in its own seeded order, so no two requests share a prefix that
the server's prefix cache could reuse.
"""

from __future__ import annotations

import random
from pathlib import Path

from sgl_eagle_ext.common import http, safe_files
from sgl_eagle_ext.common.errors import UserError

CHARS_PER_TOKEN = 4.0  # the estimate when nothing can count
FIT_TOLERANCE = 0.01  # a fitted prompt is within 1% (or FIT_SLACK tokens) of its target
FIT_SLACK = 8
USAGE_TOLERANCE = 0.10  # warn when the server's count differs more than this
TEMPLATE_SLACK = 64  # chat template tokens the server adds around the content
QUESTION = "\n\nSummarize the text above in a few sentences."


class Counter:
    name = "estimate (4 characters per token)"
    exact = False

    def count(self, text: str) -> int:
        return max(1, round(len(text) / CHARS_PER_TOKEN))


class LocalTokenizer(Counter):
    exact = True

    def __init__(self, path: Path):
        from transformers import AutoTokenizer  # optional: only when the model dir is here

        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.tok.model_max_length = 1 << 30  # counting only: no "longer than the model" warning
        self.name = f"tokenizer of {path}"

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False))


class ServerTokenizer(Counter):
    exact = True

    def __init__(self, base_url: str, model: str, api_key: str | None = None):
        self.url = base_url.rstrip("/") + "/v1/tokenize"
        self.model = model
        self.api_key = api_key
        self.name = f"{self.url}"

    def count(self, text: str) -> int:
        reply = http.request(
            self.url,
            {"model": self.model, "prompt": text, "add_special_tokens": False},
            api_key=self.api_key,
            timeout=60,
        )
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.status != 200 or not isinstance(body.get("count"), int):
            raise http.HTTPFailed(f"{self.url}: HTTP {reply.status} {reply.error[:120]}")
        return body["count"]

    def works(self) -> bool:
        try:
            return self.count("hello world") > 0
        except http.HTTPFailed:
            return False


def pick_counter(tokenizer_path: str | None, base_url: str | None, model: str, api_key=None):
    """The best counter available (see the module docstring)."""
    if tokenizer_path and Path(tokenizer_path).is_dir():
        try:
            return LocalTokenizer(Path(tokenizer_path))
        except Exception:  # no transformers, or a tokenizer it cannot load
            pass
    if base_url:
        server = ServerTokenizer(base_url, model, api_key)
        if server.works():
            return server
    return Counter()


# ---------------------------------------------------------------- source text
def shipped_paragraphs() -> list[str]:
    """Every message the shipped prompt sets hold (text written for this project)."""
    from sgl_eagle_ext.tools.bench import prompts

    out = []
    for name in prompts.SHIPPED:
        for p in prompts.load(name).prompts:
            out += [c for _, c in p.messages]
    return out


def file_paragraphs(path: str) -> list[str]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--long-text {path}: no such file.", fix="give a plain-text file")
    text = safe_files.read_text("--long-text", p, cap=safe_files.DATA_CAP)  # its own errors
    paras = [" ".join(b.split()) for b in text.split("\n\n")]
    paras = [b for b in paras if b]
    if sum(len(b) for b in paras) < 200:
        raise UserError(
            f"{path}: only {sum(len(b) for b in paras)} characters of text.",
            fix="give a longer text (it is repeated as needed, but needs some variety)",
        )
    return paras


class PromptBuilder:
    """Prompts of `target` tokens (content, without the chat template) from paragraphs."""

    def __init__(self, paragraphs: list[str], counter: Counter, seed: int = 0):
        if not paragraphs:
            raise UserError("no source text for long prompts.", fix="pass --long-text FILE")
        self.paragraphs = paragraphs
        self.counter = counter
        self.seed = seed
        total = "\n\n".join(paragraphs)
        self.chars_per_token = len(total) / max(1, counter.count(total))
        self._fitted: dict[tuple[int, int], str] = {}  # levels reuse the same prompts

    def build(self, index: int, target: int) -> str:
        """A prompt of `target` counted tokens (QUESTION included), unique per index."""
        key = (index, target)
        if key not in self._fitted:
            self._fitted[key] = self._fit(index, target)
        return self._fitted[key]

    def _stream(self, index: int, chars: int) -> str:
        rng = random.Random(f"{self.seed}/{index}")
        out, size = [f"Document {index}."], 0
        while size < chars:
            order = list(self.paragraphs)
            rng.shuffle(order)
            for para in order:
                out.append(para)
                size += len(para) + 2
                if size >= chars:
                    break
        return "\n\n".join(out)

    def _fit(self, index: int, target: int) -> str:
        body_target = max(1, target - self.counter.count(QUESTION))
        source = self._stream(index, int(body_target * self.chars_per_token * 1.3) + 64)
        chars = int(body_target * self.chars_per_token)
        n = 0
        for _ in range(6):  # secant steps on the character count
            text = source[:chars]
            n = self.counter.count(text)
            if abs(n - body_target) <= max(FIT_SLACK, FIT_TOLERANCE * body_target):
                break
            chars = max(1, min(len(source), int(chars * body_target / max(1, n))))
        return source[:chars].rstrip() + QUESTION


def content_tokens(prompt, counter: Counter) -> int:
    """A prompt's tokens without the chat template (its messages' text, as the
    completions endpoints send it), counted once per counter and text."""
    from sgl_eagle_ext.tools.bench.client import messages_text

    cache = counter.__dict__.setdefault("_content_cache", {})
    key = getattr(prompt, "messages", None) or id(prompt)
    if key not in cache:
        cache[key] = counter.count(messages_text(prompt.as_messages()))
    return cache[key]


def check_against_usage(rows: list[tuple[int, int]]) -> dict:
    """(target, server prompt_tokens) pairs -> how far the server's count was.

    The server counts the chat template too, so a difference up to TEMPLATE_SLACK
    tokens above the target is expected and not counted against the fit.
    """
    if not rows:
        return {"checked": 0}
    rel = []
    for target, got in rows:
        over = got - target
        off = 0 if 0 <= over <= TEMPLATE_SLACK else (over if over < 0 else over - TEMPLATE_SLACK)
        rel.append(off / target)
    worst = max(rel, key=abs)
    return {
        "checked": len(rows),
        "mean_prompt_tokens": sum(g for _, g in rows) / len(rows),
        "mean_target": sum(t for t, _ in rows) / len(rows),
        "worst_relative_error": worst,
        "ok": abs(worst) <= USAGE_TOLERANCE,
    }
