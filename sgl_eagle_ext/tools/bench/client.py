"""Async streaming client for SGLang's endpoints (aiohttp): OpenAI chat (default),
OpenAI completions, and SGLang's native /generate.

One `chat()` call is one request (whatever the endpoint); it never raises for what a server does
(errors, timeouts, a dropped connection, garbage in the stream): each becomes
a failed `RequestResult` with an error category, and malformed stream lines
are counted. Only cancellation (Ctrl-C) propagates.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

from sgl_eagle_ext.common import figures

try:  # SGLang depends on orjson; fall back to the standard library elsewhere
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover
    import json

    _loads = json.loads

CHAT, COMPLETIONS, GENERATE = "chat", "completions", "generate"
ENDPOINTS = {CHAT: "/v1/chat/completions", COMPLETIONS: "/v1/completions", GENERATE: "/generate"}
DEFAULT_TIMEOUT = 600.0
_IGNORED_PREFIXES = (b":", b"event:", b"id:", b"retry:")

# Error categories (RequestResult.error)
E_HTTP = "http"  # followed by the status: "http 500"
E_TIMEOUT = "timeout"
CONNECT_TIMEOUT = 10.0  # seconds to open a connection (the request timeout is separate)
E_REFUSED = "connection refused"
E_LOST = "connection lost"
E_INCOMPLETE = "stream ended early"
E_IN_STREAM = "error in stream"
E_CLIENT = "client error"


@dataclass
class RequestResult:
    index: int
    prompt_id: str
    ok: bool = False
    error: str = ""  # category, "" when ok
    detail: str = ""  # the server's message or the exception, shortened
    start: float = 0.0  # perf_counter at send
    ttft: float | None = None  # seconds to the first content chunk
    e2e: float | None = None  # seconds to the end of the stream
    chunk_times: list[float] = field(default_factory=list)  # content chunk arrivals, from start
    # tokens in each content chunk, where the stream says (/generate's running count);
    # None: not known per chunk (the OpenAI endpoints send text deltas)
    chunk_tokens: list[int] | None = None
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tokens_from_usage: bool = False  # False: counted content chunks (no usage chunk came)
    finish_reason: str | None = None
    spec_verify_ct: int | None = None  # verify cycles (sglext.spec_tokens_details)
    spec_details: dict | None = None  # the whole sglext.spec_tokens_details (histograms)
    max_tokens: int | None = None  # the tokens this request asked for
    malformed: int = 0  # stream lines that were not valid SSE/JSON chunks
    # the prompt as the load generator counts it, without the chat template (as
    # sglang.bench_serving's input lengths); set after the level (sweep.count_inputs)
    input_tokens: int | None = None
    prompt: object = field(default=None, repr=False)  # what was sent (a Prompt), for that count

    @property
    def chunk_gaps(self) -> list[float]:
        """Gaps between content chunks (with speculation a chunk carries several tokens)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def itl_exact(self) -> bool:
        """Whether itls() divides by each chunk's own token count (else: an estimate)."""
        return self.chunk_tokens is not None and len(self.chunk_tokens) == len(self.chunk_times)

    def tokens_per_gap(self) -> list[int]:
        """Tokens each chunk after the first carries: the stream's own counts where it
        gave them for every chunk (SGLang's /generate meta_info, or the OpenAI usage
        per chunk that `stream_options.continuous_usage_stats` asks for), else the
        request's completion tokens after the first chunk spread as evenly as whole
        tokens allow (they still add up to n - 1: the ITL mean stays the TPOT)."""
        gaps = len(self.chunk_times) - 1
        if gaps <= 0:
            return []
        if self.itl_exact:
            return [max(0, k) for k in self.chunk_tokens[1:]]
        n = self.completion_tokens or len(self.chunk_times)
        rest = max(gaps, n - 1)  # at least one token per chunk
        base, extra = divmod(rest, gaps)
        # the extra tokens spread evenly over the gaps (not all at the front)
        return [base + ((i + 1) * extra // gaps - i * extra // gaps) for i in range(gaps)]

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies, one per token after the first chunk, as
        sglang.bench_serving counts them with speculation: a chunk gap divided by the
        tokens that chunk carries, repeated for each of them (tokens_per_gap). A
        chunk that carries no token (text the detokenizer held back) adds its gap to
        the next one that does."""
        out: list[float] = []
        held = 0.0
        for gap, k in zip(self.chunk_gaps, self.tokens_per_gap()):
            if k <= 0:
                held += gap
                continue
            out.extend([(gap + held) / k] * k)
            held = 0.0
        return out

    @property
    def decoded_tokens(self) -> int | None:
        """Tokens this request gained in verify cycles as SGLang counts them for its
        server-wide accept length: its correct drafts plus one bonus token per cycle
        (drafts accepted past max_tokens included), where the stream reported them;
        else its completion tokens after the prefill's one."""
        drafts = (self.spec_details or {}).get("spec_num_correct_drafts")
        verify = self.spec_verify_ct
        if isinstance(drafts, int) and isinstance(verify, int) and verify > 0:
            return figures.tokens_of_cycles(drafts, verify)
        return self.completion_tokens - 1 if self.completion_tokens else None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first."""
        n = self.completion_tokens
        if not self.ok or n is None or n < 2 or self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (n - 1)

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens per second after the first: 1 / TPOT."""
        return 1 / self.tpot if self.tpot else None

    @property
    def tok_s(self) -> float | None:
        if not self.ok or not self.completion_tokens or not self.e2e:
            return None
        return self.completion_tokens / self.e2e


def _short(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


# The longest SSE line read: /generate without incremental output repeats the whole
# text so far in every chunk, a few MB for the longest outputs.
MAX_LINE = 64 << 20


class StreamParser:
    """Feeds raw bytes of an SSE chat stream into a RequestResult."""

    def __init__(self, result: RequestResult, endpoint: str = CHAT, incremental: bool = False):
        self.r = result
        self.buf = b""
        self.done = False
        self.error: str | None = None
        self.chunks = 0  # content chunks
        # /generate streams the whole text so far in every chunk unless the server runs
        # with --incremental-streaming-output; the OpenAI endpoints stream deltas.
        self.incremental = incremental
        self.seen = ""  # /generate without incremental output: the text so far
        self.chunk = {
            CHAT: self.chunk_openai,
            COMPLETIONS: self.chunk_openai,
            GENERATE: self.chunk_generate,
        }[endpoint]

    def feed(self, data: bytes, now: float) -> bool:
        """Read `data`; False when the stream must be dropped: a line past MAX_LINE
        without its end (no SSE chunk is that long; it ran to the request timeout and
        held gigabytes meanwhile)."""
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self.line(line.rstrip(b"\r"), now)
        if len(self.buf) > MAX_LINE:
            self.buf = b""
            self.error = f"a stream line longer than {MAX_LINE >> 20} MiB without a line end"
            return False
        return True

    def finish(self, now: float) -> None:
        if self.buf.strip():
            self.line(self.buf.rstrip(b"\r"), now)
        self.buf = b""

    def line(self, line: bytes, now: float) -> None:
        if not line or line.startswith(_IGNORED_PREFIXES):
            return
        if not line.startswith(b"data:"):
            self.r.malformed += 1
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = _loads(payload)
        except (ValueError, RecursionError):
            self.r.malformed += 1
            return
        if not isinstance(obj, dict):
            self.r.malformed += 1
            return
        self.chunk(obj, now)

    def in_stream_error(self, obj: dict) -> bool:
        if "error" not in obj:
            return False
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        self.error = _short(msg)
        return True

    def content(self, text: str, now: float, tokens: int | None = None) -> None:
        r = self.r
        if r.ttft is None:
            r.ttft = now - r.start
            if tokens is not None:
                r.chunk_tokens = []
        r.chunk_times.append(now - r.start)
        if r.chunk_tokens is not None:
            if tokens is None:
                r.chunk_tokens = None  # no longer known for every chunk
            else:
                r.chunk_tokens.append(tokens)
        r.text += text
        self.chunks += 1

    def chunk_openai(self, obj: dict, now: float) -> None:
        """A chat (`choices[0].delta.content`) or completions (`choices[0].text`) chunk.
        Its usage (every chunk's, with `continuous_usage_stats`) is read first: the
        running completion count says how many tokens this chunk's text holds."""
        r = self.r
        known = False
        if self.in_stream_error(obj):
            return
        before = r.completion_tokens if r.tokens_from_usage else None
        counted = False  # this chunk's usage gave the running completion count
        usage = obj.get("usage")
        if isinstance(usage, dict):
            known = True
            try:
                if usage.get("completion_tokens") is not None:
                    r.completion_tokens = int(usage["completion_tokens"])
                    r.tokens_from_usage = counted = True
                if usage.get("prompt_tokens") is not None:
                    r.prompt_tokens = int(usage["prompt_tokens"])
            except (TypeError, ValueError):
                r.malformed += 1
        choices = obj.get("choices")
        if isinstance(choices, list):
            known = True
            if choices:
                c0 = choices[0]
                if isinstance(c0, dict) and "text" in c0 and "delta" not in c0:
                    delta = {"content": c0["text"]}  # /v1/completions
                else:
                    delta = c0.get("delta") if isinstance(c0, dict) else None
                if not isinstance(delta, dict):
                    r.malformed += 1
                    return
                content = delta.get("content") or delta.get("reasoning_content")
                if content:
                    if not isinstance(content, str):
                        r.malformed += 1
                        return
                    tokens = max(0, r.completion_tokens - (before or 0)) if counted else None
                    self.content(content, now, tokens)
                if c0.get("finish_reason"):
                    r.finish_reason = c0["finish_reason"]
        ext = obj.get("sglext")
        if isinstance(ext, dict):
            known = True
            spec = ext.get("spec_tokens_details")
            if isinstance(spec, list):  # n > 1: one per choice
                spec = spec[0] if spec else None
            if isinstance(spec, dict) and isinstance(spec.get("spec_verify_ct"), int):
                r.spec_verify_ct = spec["spec_verify_ct"]
                r.spec_details = spec
        if not known and "usage" not in obj:
            r.malformed += 1

    def chunk_generate(self, obj: dict, now: float) -> None:
        """A /generate chunk: `text` and `meta_info` (token counts, finish, verify cycles)."""
        r = self.r
        if self.in_stream_error(obj):
            return
        meta, text = obj.get("meta_info"), obj.get("text")
        if not isinstance(meta, dict) or not isinstance(text, str):
            r.malformed += 1
            return
        if self.incremental:
            new = text
        else:
            new, self.seen = text[len(self.seen) :], text
        n = meta.get("completion_tokens")
        if not isinstance(n, int):
            r.malformed += 1
            return
        if n > (r.completion_tokens or 0) or new:
            self.content(new, now, max(0, n - (r.completion_tokens or 0)))
        r.completion_tokens, r.tokens_from_usage = n, True
        if isinstance(meta.get("prompt_tokens"), int):
            r.prompt_tokens = meta["prompt_tokens"]
        finish = meta.get("finish_reason")
        if finish:
            r.finish_reason = finish.get("type") if isinstance(finish, dict) else str(finish)
        if isinstance(meta.get("spec_verify_ct"), int):
            r.spec_verify_ct = meta["spec_verify_ct"]
            r.spec_details = {k: v for k, v in meta.items() if k.startswith("spec_")}


async def _read_capped(resp, cap: int) -> bytes | None:
    """A non-streamed answer's body, or None past `cap` bytes (a server that never stops
    answering must not fill the client's memory; the streamed path caps its lines)."""
    parts, size = [], 0
    async for data in resp.content.iter_any():
        size += len(data)
        if size > cap:
            return None
        parts.append(data)
    return b"".join(parts)


def whole(parser: StreamParser, raw: bytes, now: float) -> None:
    """A non-streamed answer, fed to the parser as one final chunk: its content
    arrives at once, so TTFT is the whole request (as sglang.bench_serving counts it)."""
    try:
        obj = _loads(raw)
    except (ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        parser.error = "the answer is not a JSON object: " + _short(raw.decode("utf-8", "replace"))
        return
    for c in obj.get("choices") or ():
        if isinstance(c, dict) and isinstance(c.get("message"), dict):
            c["delta"] = c.pop("message")  # chat: message -> the delta the parser reads
    parser.chunk(obj, now)
    parser.done = True


def messages_text(messages: list[dict]) -> str:
    """A chat prompt as one text for the endpoints without a chat template."""
    return "\n\n".join(str(m.get("content", "")) for m in messages)


class Client:
    """`async with Client(url) as c: await c.chat(messages, 256)`.

    endpoint: chat (the server applies the chat template), completions or generate
    (the messages' contents joined as plain text). headers: extra request headers;
    extra_body: fields merged into every request body (last word over ours).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str = "default",
        timeout: float = DEFAULT_TIMEOUT,
        spec_details_field: str | None = None,
        extra_body: dict | None = None,
        endpoint: str = CHAT,
        headers: dict[str, str] | None = None,
        incremental: bool = False,
        stream: bool = True,
        tls=None,
    ):
        self.stream = stream  # False: one JSON answer (sglang.bench_serving --disable-stream)
        self.endpoint = endpoint
        self.url = base_url.rstrip("/") + ENDPOINTS[endpoint]
        self.incremental = incremental
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.model = model
        self.timeout = timeout
        self.spec_details_field = spec_details_field
        self.extra_body = extra_body or {}
        self.session: aiohttp.ClientSession | None = None
        self.tls = tls  # an ssl.SSLContext for https (None: the system's trust store)

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(
            limit=0, ttl_dns_cache=300, ssl=self.tls if self.tls is not None else True
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT),
            headers=self.headers,
            skip_auto_headers=("User-Agent",),
        )
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    def payload(
        self,
        messages: list[dict],
        max_tokens: int,
        temperature: float,
        ignore_eos: bool,
        seed: int | None,
    ) -> dict:
        if self.endpoint == GENERATE:
            sampling = {
                "max_new_tokens": max_tokens,
                "temperature": temperature,
                "ignore_eos": ignore_eos,
            }
            if seed is not None:
                sampling["sampling_seed"] = seed
            body = {
                "text": messages_text(messages),
                "sampling_params": sampling,
                "stream": self.stream,
            }
        else:
            body = {"model": self.model}
            if self.endpoint == CHAT:
                body["messages"] = messages
            else:
                body["prompt"] = messages_text(messages)
            body.update(
                max_tokens=max_tokens,
                temperature=temperature,
                stream=self.stream,
                ignore_eos=ignore_eos,
            )
            if self.stream:
                # usage on every chunk too: each chunk's own token count, for ITL per
                # token (SGLang and vLLM honour it; the final usage chunk comes anyway)
                body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
            if seed is not None:
                body["seed"] = seed
            if self.spec_details_field:
                body[self.spec_details_field] = True
        body.update(self.extra_body)
        return body

    async def chat(
        self,
        messages: list[dict],
        max_tokens: int,
        *,
        index: int = 0,
        prompt_id: str = "",
        temperature: float = 0.0,
        ignore_eos: bool = True,
        seed: int | None = None,
    ) -> RequestResult:
        r = RequestResult(index=index, prompt_id=prompt_id, max_tokens=max_tokens)
        body = self.payload(messages, max_tokens, temperature, ignore_eos, seed)
        parser = StreamParser(r, self.endpoint, self.incremental)
        r.start = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                # a redirect is the server's answer, never followed (its headers, a
                # gateway's key among them, go nowhere else: common/http.py's rule)
                async with self.session.post(self.url, json=body, allow_redirects=False) as resp:
                    if resp.status != 200:
                        r.error = f"{E_HTTP} {resp.status}"
                        r.detail = _short(await resp.text(errors="replace"))
                        return r
                    if not self.stream:
                        raw = await _read_capped(resp, MAX_LINE)
                        if raw is None:
                            r.error = E_IN_STREAM
                            r.detail = f"an answer larger than {MAX_LINE >> 20} MiB"
                            return r
                        whole(parser, raw, time.perf_counter())
                    else:
                        async for data in resp.content.iter_any():
                            if not parser.feed(data, time.perf_counter()):
                                break  # leaving the block closes the connection
                        else:
                            parser.finish(time.perf_counter())
        except aiohttp.ServerTimeoutError as e:  # aiohttp's own: connect or socket read
            what = "connection" if "connect" in str(e).lower() else "data"
            r.error, r.detail = E_TIMEOUT, f"no {what} within {CONNECT_TIMEOUT:g} s: {_short(e)}"
        except TimeoutError:
            r.error, r.detail = E_TIMEOUT, f"no complete answer within {self.timeout:g} s"
        except aiohttp.ClientConnectorError as e:
            r.error, r.detail = E_REFUSED, _short(e)
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientPayloadError,
            aiohttp.ClientOSError,
            ConnectionError,
        ) as e:
            r.error, r.detail = E_LOST, _short(f"{type(e).__name__}: {e}")
        except aiohttp.ClientError as e:
            r.error, r.detail = E_CLIENT, _short(f"{type(e).__name__}: {e}")
        else:
            # not streamed: the answer came whole, its first token with its last
            r.e2e = time.perf_counter() - r.start if self.stream or r.ttft is None else r.ttft
            if parser.error is not None:
                r.error, r.detail = E_IN_STREAM, parser.error
            elif not parser.done:
                r.error, r.detail = E_INCOMPLETE, "the stream closed without [DONE]"
            else:
                r.ok = True
                if r.completion_tokens is None:
                    r.completion_tokens = parser.chunks
        return r
