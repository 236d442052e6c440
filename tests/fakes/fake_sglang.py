"""A local stand-in for an SGLang server that streams chat tokens as fast as it can.

It speaks the parts of SGLang's HTTP API that load generators use: the
OpenAI chat endpoint (streaming and not, `stream_options.include_usage`,
`ignore_eos`, per-request spec details in `sglext`), /v1/models, /model_info,
/server_info, /health, /metrics (generation and verify counters), /flush_cache.
Uses: measuring a client's ceiling (benchmarks/client_ceiling.py) and fault
tests (HTTP errors, malformed chunks, cut or hung streams) without a model.
A test double: it lives beside the tests, outside the shipped package.

    python tests/fakes/fake_sglang.py --port 31999 [--tokens-per-write 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from aiohttp import web

from sgl_eagle_ext.common.releases import PRIMARY

VERSION = PRIMARY.version  # the release whose API this imitates


@dataclass
class Faults:
    fail_every: int = 0  # every Nth chat request: HTTP 500
    malformed_every: int = 0  # a garbage line after every Nth token
    drop_every: int = 0  # every Nth request: the connection is cut halfway
    hang_every: int = 0  # every Nth request: stops sending halfway, never ends
    error_every: int = 0  # every Nth request: an {"error": ...} chunk halfway, then [DONE]
    short_every: int = 0  # every Nth request: stops at half length (finish "stop", like EOS)


class FakeSGLang:
    def __init__(
        self,
        model: str = "fake-model",
        tokenizer_path: str | None = None,
        accept_length: float = 0.0,
        delay_ms: float = 0.0,
        delay_per_stream_ms: float = 0.0,
        tokens_per_write: int = 1,
        faults: Faults | None = None,
        prompt_tokens: int = 16,
        token_text: str = " x",
        tokens_per_chunk: int = 1,
        chunk_pattern: tuple[int, ...] = (),
        tokenizer_words: bool = False,
        max_running: int | None = None,
    ):
        self.model = model
        self.tokenizer_path = tokenizer_path or model
        self.accept_length = accept_length
        self.delay = delay_ms / 1e3
        # A server that slows down with load: each write waits this much more per
        # stream in flight (speculation that wins alone and loses under load).
        self.per_stream = delay_per_stream_ms / 1e3
        self.per_write = max(1, tokens_per_write)
        self.faults = faults or Faults()
        self.prompt_tokens = prompt_tokens
        self.token_json = json.dumps({"content": token_text})
        self.token_text = token_text
        self.requests = 0
        self.generation_tokens = 0
        self.verify_calls = 0
        self.finished = 0  # requests counted in generation_tokens
        self.active = 0
        self.peak_active = 0  # the most streams in flight at once
        # tokens per streamed chat chunk after the first (speculation: accepted drafts
        # arrive together); the first chunk carries the prefill's one token
        self.per_chunk = max(1, tokens_per_chunk)
        # or a cycle of counts, e.g. (2, 3): 2 tokens, then 3, then 2, ...
        self.pattern = tuple(max(1, k) for k in chunk_pattern) or (self.per_chunk,)
        self.tokenizer_words = tokenizer_words  # /v1/tokenize counts words
        # /server_info's max_running_requests as SGLang's scheduler resolved it (the fake
        # does not queue: what a client does with it is all a test sees)
        self.max_running = max_running
        self.last_body: dict | None = None  # the last generation request, as sent
        self.last_headers = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.post("/v1/chat/completions", self.chat),
                web.post("/v1/completions", self.completions),
                web.post("/generate", self.generate),
                web.get("/v1/models", self.models),
                web.get("/model_info", self.model_info),
                web.get("/get_model_info", self.model_info),
                web.get("/server_info", self.server_info),
                web.get("/get_server_info", self.server_info),
                web.get("/health", self.health),
                web.get("/health_generate", self.health),
                web.get("/metrics", self.metrics),
                web.route("*", "/flush_cache", self.flush),
                web.post("/v1/tokenize", self.tokenize),
            ]
        )
        return app

    async def models(self, _req):
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "owned_by": "fake", "root": self.model}
                ],
            }
        )

    async def model_info(self, _req):
        return web.json_response(
            {"model_path": self.model, "tokenizer_path": self.tokenizer_path, "is_generation": True}
        )

    async def server_info(self, _req):
        spec = (
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 4,
            }
            if self.accept_length
            else {"speculative_algorithm": None}
        )
        # SGLang's server-wide figure is decode-only: each request's prefill token left out
        decoded = self.generation_tokens - self.finished
        avg = decoded / self.verify_calls if self.verify_calls else None
        return web.json_response(
            {
                "version": VERSION,
                "model_path": self.model,
                "tokenizer_path": self.tokenizer_path,
                **spec,
                "max_running_requests": None,  # not given: SGLang's own choice
                "internal_states": [
                    {"avg_spec_accept_length": avg, "max_running_requests": self.max_running}
                ],
            }
        )

    async def tokenize(self, req: web.Request):
        """SGLang's /v1/tokenize with a word tokenizer (one token per word), when the
        fake is told to count (`tokenizer_words`); else 404 like a server without it."""
        if not self.tokenizer_words:
            return web.json_response({"error": {"message": "not found"}}, status=404)
        body = await req.json()
        words = str(body.get("prompt", "")).split()
        return web.json_response({"tokens": list(range(len(words))), "count": len(words)})

    async def health(self, _req):
        return web.Response(text="")

    async def flush(self, _req):
        return web.Response(text="Cache flushed.")

    async def metrics(self, _req):
        lab = f'{{model_name="{self.model}"}}'
        lines = [
            "# TYPE sglang:generation_tokens_total counter",
            f"sglang:generation_tokens_total{lab} {float(self.generation_tokens)}",
            "# TYPE sglang:num_requests_total counter",
            f"sglang:num_requests_total{lab} {float(self.requests)}",
        ]
        if self.accept_length:
            lines += [
                "# TYPE sglang:spec_verify_calls_total counter",
                f"sglang:spec_verify_calls_total{lab} {float(self.verify_calls)}",
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _every(self, n: int, k: int | None = None) -> bool:
        """Request number `k` (default: the latest) is an Nth one."""
        k = self.requests if k is None else k
        return n > 0 and k % n == 0

    def verify_for(self, tokens: int) -> int:
        """Verify cycles of a request of `tokens`: its first token comes from the prefill,
        the rest at `accept_length` per cycle (SGLang's decode-only convention)."""
        return math.ceil(max(0, tokens - 1) / self.accept_length) if self.accept_length else 0

    def _finish(self, tokens: int) -> int | None:
        self.generation_tokens += tokens
        self.finished += 1
        if not self.accept_length:
            return None
        verify = self.verify_for(tokens)
        self.verify_calls += verify
        return verify or None

    async def _body(self, req: web.Request) -> dict | None:
        try:
            body = await req.json()
        except ValueError:
            return None
        self.requests += 1
        self.last_body, self.last_headers = body, req.headers
        return body

    async def completions(self, req: web.Request):
        """/v1/completions, streaming only: `choices[0].text` deltas, then usage."""
        body = await self._body(req)
        if body is None or not isinstance(body.get("prompt"), str) or not body.get("stream"):
            return web.json_response({"error": {"message": "want a streamed prompt"}}, status=400)
        if self._every(self.faults.fail_every):
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        n = int(body.get("max_tokens") or 16)

        def chunk(sent: int, last: bool) -> dict:
            c = {"index": 0, "text": self.token_text, "finish_reason": "length" if last else None}
            return {"id": "c", "object": "text_completion", "choices": [c]}

        usage = (body.get("stream_options") or {}).get("include_usage")
        spec = bool(body.get("return_spec_tokens_details"))
        return await self._stream_simple(req, body, n, chunk, usage, spec)

    async def generate(self, req: web.Request):
        """SGLang's /generate, streaming only: the whole text so far and meta_info per chunk."""
        body = await self._body(req)
        if body is None or not isinstance(body.get("text"), str) or not body.get("stream"):
            return web.json_response({"error": {"message": "want a streamed text"}}, status=400)
        if self._every(self.faults.fail_every):
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        n = int((body.get("sampling_params") or {}).get("max_new_tokens") or 16)

        def chunk(sent: int, last: bool) -> dict:
            meta = {
                "id": "g",
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": sent,
                "finish_reason": {"type": "length", "length": sent} if last else None,
            }
            if self.accept_length:
                meta["spec_verify_ct"] = self.verify_for(sent)
            return {"text": self.token_text * sent, "meta_info": meta, "index": 0}

        return await self._stream_simple(req, body, n, chunk, usage=False)

    async def _stream_simple(
        self, req: web.Request, body: dict, n: int, chunk, usage: bool, spec: bool = False
    ):
        """One event per token from `chunk(tokens so far, last)`; no fault injection."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        for sent in range(1, n + 1):
            await resp.write(f"data: {json.dumps(chunk(sent, sent == n))}\n\n".encode())
            if self.delay:
                await asyncio.sleep(self.delay)
        verify = self._finish(n)
        if spec and verify:
            ext = {"spec_tokens_details": {"spec_verify_ct": verify}}
            await resp.write(f"data: {json.dumps({'choices': [], 'sglext': ext})}\n\n".encode())
        if usage:
            u = {"prompt_tokens": self.prompt_tokens, "completion_tokens": n}
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': u})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def chat(self, req: web.Request):
        body = await self._body(req)
        if body is None:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        if self._every(self.faults.fail_every):
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        finish = "length"
        if self._every(self.faults.short_every):
            n, finish = max(1, n // 2), "stop"
        if not body.get("stream"):
            verify = self._finish(n)
            meta = {"spec_verify_ct": verify} if verify else {}
            return web.json_response(
                {
                    "id": uuid.uuid4().hex,
                    "object": "chat.completion",
                    "model": self.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": self.token_text * n},
                            "finish_reason": "length",
                            "meta_info": meta,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": self.prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": self.prompt_tokens + n,
                    },
                }
            )
        return await self._stream(req, body, n, finish, self.requests)

    async def _stream(self, req: web.Request, body: dict, n: int, finish: str, k: int):
        rid = uuid.uuid4().hex
        head = (
            f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":'
            f'{int(time.time())},"model":"{self.model}","choices":[{{"index":0,"delta":'
        )
        token = (head + self.token_json + ',"logprobs":null,"finish_reason":null}]}\n\n').encode()
        first = (
            head + '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        ).encode()
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        # `k`: this request's number, taken before any await (requests arriving
        # meanwhile do not shift which one is faulted)
        f = self.faults
        hang, drop, err = (
            self._every(f.hang_every, k),
            self._every(f.drop_every, k),
            self._every(f.error_every, k),
        )
        cut = n // 2 if (hang or drop or err) else -1
        await resp.prepare(req)
        self.active += 1
        self.peak_active = max(self.peak_active, self.active)
        try:
            await resp.write(first)
            sent, batch, chunks = 0, [], 0
            continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
            while sent < n:
                if sent == cut:
                    if batch:
                        await resp.write(b"".join(batch))
                        batch = []
                    if hang:
                        await asyncio.sleep(3600)
                    if drop:
                        req.transport.close()
                        return resp
                    if err:
                        await resp.write(
                            b'data: {"error": {"message": "injected error", "code": 500}}\n\n'
                        )
                        break
                k = 1 if sent == 0 else min(self.pattern[chunks % len(self.pattern)], n - sent)
                if sent:
                    chunks += 1
                if k == 1 and not continuous:
                    batch.append(token)
                else:
                    content = json.dumps({"content": self.token_text * k})
                    usage = ""
                    if continuous:  # stream_options.continuous_usage_stats: usage per chunk
                        usage = (
                            f',"usage":{{"prompt_tokens":{self.prompt_tokens},'
                            f'"completion_tokens":{sent + k},'
                            f'"total_tokens":{self.prompt_tokens + sent + k}}}'
                        )
                    batch.append(
                        (
                            head + content + ',"logprobs":null,"finish_reason":null}]'
                            f"{usage}}}\n\n"
                        ).encode()
                    )
                sent += k
                if f.malformed_every and sent % f.malformed_every == 0:
                    batch.append(b"data: {not json\n\nthis is not sse\n\n")
                if len(batch) >= self.per_write or sent == n:
                    await resp.write(b"".join(batch))
                    batch = []
                    if (self.delay or self.per_stream) and sent < n:  # the tail follows at once
                        await asyncio.sleep(self.delay + self.per_stream * self.active)
            verify = self._finish(sent)
            tail = [head + '{},"logprobs":null,"finish_reason":"' + finish + '"}]}\n\n']
            if verify and body.get("return_spec_tokens_details"):
                tail.append(
                    f'data: {{"id":"{rid}","object":"chat.completion.chunk","choices":[],'
                    f'"usage":null,"sglext":{{"spec_tokens_details":{{"spec_verify_ct":'
                    f'{verify},"spec_accept_length":{sent / verify}}}}}}}\n\n'
                )
            if (body.get("stream_options") or {}).get("include_usage"):
                tail.append(
                    f'data: {{"id":"{rid}","object":"chat.completion.chunk","choices":[],'
                    f'"usage":{{"prompt_tokens":{self.prompt_tokens},"completion_tokens":'
                    f'{sent},"total_tokens":{self.prompt_tokens + sent}}}}}\n\n'
                )
            tail.append("data: [DONE]\n\n")
            await resp.write("".join(tail).encode())
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.active -= 1
        return resp


class Background:
    """A FakeSGLang on 127.0.0.1 in a thread of this process (tests)."""

    def __init__(self, fake: FakeSGLang, port: int = 0, tls=None):
        self.fake = fake
        self.port = port
        self.tls = tls  # an ssl.SSLContext (server side): served over https
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(
            self.fake.app(), access_log=None, handle_signals=False, shutdown_timeout=0.1
        )
        self.loop.run_until_complete(runner.setup())
        # Bind the socket here: port 0 picks a free port that we can read back.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self.loop.run_until_complete(web.SockSite(runner, sock, ssl_context=self.tls).start())
        self.runner = runner
        self._started.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> Background:
        self._thread.start()
        self._started.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python tests/fakes/fake_sglang.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=31999)
    p.add_argument(
        "--model",
        default="fake-model",
        help="model id (a path works as tokenizer for bench_serving)",
    )
    p.add_argument(
        "--tokens-per-write",
        type=int,
        default=1,
        help="SSE events (one token each) per socket write (default 1)",
    )
    p.add_argument("--delay-ms", type=float, default=0.0, help="pause after each write")
    p.add_argument(
        "--accept-length",
        type=float,
        default=0.0,
        help="pretend to speculate: verify counters and sglext at this accept length",
    )
    for name in ("fail", "malformed", "drop", "hang", "error", "short"):
        p.add_argument(f"--{name}-every", type=int, default=0)
    a = p.parse_args(argv)
    faults = Faults(
        a.fail_every, a.malformed_every, a.drop_every, a.hang_every, a.error_every, a.short_every
    )
    fake = FakeSGLang(
        a.model,
        accept_length=a.accept_length,
        delay_ms=a.delay_ms,
        tokens_per_write=a.tokens_per_write,
        faults=faults,
    )
    print(f"fake SGLang on http://{a.host}:{a.port}", flush=True)
    web.run_app(fake.app(), host=a.host, port=a.port, access_log=None, print=None, backlog=1024)


if __name__ == "__main__":
    main()
