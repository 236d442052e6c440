"""What the benchmark asks a running server outside the measured requests.

Reachability, the served model id, /server_info (resolved args, version), the
release row that says which counters and stream fields exist, the Prometheus
counters whose deltas give the accept length of one load level, and cache flushes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from sgl_eagle_ext.common import figures, http, releases
from sgl_eagle_ext.common.errors import UserError

PROBE_TIMEOUT = 10.0


# /server_info fields SGLang writes as text, read as such by the tools.
TEXT_FIELDS = ("version", "model_path", "tokenizer_path", "served_model_name", "launch_command")


@dataclass(frozen=True)
class Counters:
    """SGLang's counters: a snapshot, or the window between two (None: not counted, the
    release or the server has no such counter)."""

    generation_tokens: float | None = None
    verify_calls: float | None = None
    requests: float | None = None  # finished requests: one prefill token each

    @property
    def accept_length(self) -> float | None:
        """Prefill-inclusive: generated tokens / verify calls."""
        return figures.from_counts(self.generation_tokens, self.verify_calls)

    def decode_only(self, past_end: int, finished: int) -> float | None:
        """SGLang's /server_info figure: each finished request's prefill token left out
        (`finished` when the server has no request counter), and the drafts it accepted
        past a request's end (`past_end`, counted by the server, not in the client's
        tokens) kept in."""
        gen = self.generation_tokens
        done = self.requests if self.requests is not None else finished
        return figures.decode_only(None if gen is None else gen + past_end, self.verify_calls, done)


def parse_prometheus(text: str, names: set[str]) -> dict[str, float]:
    """Sum each wanted sample over all its label sets (prometheus_client's parser:
    labels, escapes and a sample's optional timestamp read as the format says).
    A page it cannot parse gives {}: no counters rather than a partial sum."""
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names:
                    out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return {}
    return out


def server_root(base_url: str) -> str:
    """The server's root URL: scheme added, trailing `/` and OpenAI's `/v1` removed
    (users paste `http://h:p/v1` from OpenAI clients; every path here starts at the root)."""
    url = base_url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


class Server:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        tls=None,
    ):
        url = http.check_url("--url", server_root(base_url))
        parts = urlsplit(url)
        self.base_url = url
        self.headers = dict(headers or {})
        self.tls = tls  # http.tls_context's answer for https (None: the system's trust)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.api_key = api_key
        self.info: dict = {}
        self.model_id = "default"
        self.tokenizer: str | None = None  # a tokenizer directory the user named
        self.release: releases.Release = releases.PRIMARY
        self.release_how = ""

    def get(self, path: str, timeout: float = PROBE_TIMEOUT) -> http.Reply:
        return self._call(path, timeout)

    def _call(self, path: str, timeout: float, body: dict | None = None) -> http.Reply:
        return http.request(
            self.base_url + path,
            body,
            api_key=self.api_key,
            timeout=timeout,
            headers=self.headers,
            tls=self.tls,
        )

    def get_text(self, path: str, timeout: float = PROBE_TIMEOUT) -> str | None:
        """A text (non-JSON) page such as /metrics; None unless HTTP 200."""
        reply = self.get(path, timeout)
        return reply.text if reply.status == 200 else None

    def post(self, path: str, timeout: float = PROBE_TIMEOUT) -> http.Reply:
        return self._call(path, timeout, {})

    def connect(self) -> Server:
        """Check the server answers; learn its model, args and release. Raises UserError."""
        reply = self.get("/v1/models")
        if reply.status == 0 and reply.error.startswith(http.TLS_FAILED):
            raise UserError(
                f"{self.base_url}: {reply.error.split(':')[0]}.",
                fix=http.TLS_FIX,
            )
        if reply.status == 0:
            raise UserError(
                f"nothing answers at {self.base_url} ({reply.error}).",
                fix="start a server first (python -m sgl_eagle_ext.launch --preset "
                "NAME ...) and wait for READY, or check --url",
            )
        if reply.status in (401, 403):
            raise UserError(
                f"{self.base_url} refused the request (HTTP {reply.status}).",
                fix="pass --api-key (or set EAGLE_EXT_API_KEY or OPENAI_API_KEY)",
            )
        if reply.status != 200:
            raise UserError(
                f"{self.base_url}/v1/models answered HTTP {reply.status}: {reply.error[:200]}",
                fix="is this an SGLang server? check --url",
            )
        # the server's answers are untrusted input: anything not shaped as SGLang
        # shapes it is treated as not said
        data = reply.body.get("data") if isinstance(reply.body, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        if isinstance(first, dict) and isinstance(first.get("id"), str) and first["id"]:
            self.model_id = first["id"]
        self.info = self.server_info() or {}
        version = self.info.get("version")
        if not isinstance(version, str) or len(version) > 100:
            version = self.info["version"] = None
        if version:
            try:
                self.release, self.release_how = releases.resolve(version, force=True)
            except UserError:  # not a version number: the primary release's rules
                self.release = releases.PRIMARY
                self.release_how = "server's version unreadable; assumed"
        else:
            self.release, self.release_how = releases.PRIMARY, "server did not say; assumed"
        return self

    def server_info(self) -> dict | None:
        """/server_info, its text fields kept only where they are text (an object as
        `model_path` went into the tokenizer lookup and raised a TypeError)."""
        for path in ("/server_info", "/get_server_info"):
            reply = self.get(path)
            if reply.status == 200 and isinstance(reply.body, dict):
                return {
                    k: v
                    for k, v in reply.body.items()
                    if k not in TEXT_FIELDS or isinstance(v, str)
                }
        return None

    def token_counter(self):
        """Who counts prompt tokens for this server (tokens.pick_counter: its own
        tokenizer on this host, its /v1/tokenize, else an estimate), asked once."""
        if getattr(self, "_counter", None) is None:
            from sgl_eagle_ext.tools.bench import tokens

            self._counter = tokens.pick_counter(
                self.tokenizer  # bench sweep --tokenizer
                or self.info.get("tokenizer_path")
                or self.info.get("model_path"),
                self.base_url,
                self.model_id,
                self.api_key,
            )
        return self._counter

    @property
    def version(self) -> str | None:
        return self.info.get("version")

    def alive(self) -> bool:
        return self.get("/health", timeout=5).status == 200

    def flush_cache(self) -> bool:
        return self.post("/flush_cache").status == 200

    def counters(self) -> Counters | None:
        """The release's token and verify counters from /metrics (None: no metrics)."""
        rel = self.release
        names = {rel.metric_generation_tokens, rel.metric_requests}
        if rel.metric_spec_verify_calls:
            names.add(rel.metric_spec_verify_calls)
        text = self.get_text("/metrics")
        if text is None:
            return None
        values = parse_prometheus(text, names)
        if rel.metric_generation_tokens not in values:
            return None
        verify = values.get(rel.metric_spec_verify_calls) if rel.metric_spec_verify_calls else None
        return Counters(
            values[rel.metric_generation_tokens], verify, values.get(rel.metric_requests)
        )

    def counters_after(
        self, before: Counters | None, expected_tokens: int, settle: float = 3.0
    ) -> Counters | None:
        """Counters once they include `expected_tokens` more generated tokens.

        SGLang bumps its counters when a request finishes, which can land just
        after the client saw the end of the stream: poll briefly.
        """
        deadline = time.monotonic() + settle
        while True:
            now = self.counters()
            if (
                now is None
                or before is None
                or now.generation_tokens - before.generation_tokens >= expected_tokens
                or time.monotonic() > deadline
            ):
                return now
            time.sleep(0.1)


def accept_from_counters(before: Counters | None, after: Counters | None) -> Counters:
    """The counters' window between two snapshots."""
    if before is None or after is None:
        return Counters()

    def diff(name):
        a, b = getattr(before, name), getattr(after, name)
        return None if a is None or b is None else b - a

    return Counters(diff("generation_tokens"), diff("verify_calls"), diff("requests"))
