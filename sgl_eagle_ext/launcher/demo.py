"""The CPU demo's client side: a few greedy prompts, their answers, the accept length."""

from __future__ import annotations

from sgl_eagle_ext.common import http

MAX_NEW_TOKENS = 16


def server_accept_length(base_url: str, api_key: str | None) -> float | None:
    """SGLang's own running average (/server_info internal_states)."""
    reply = http.request(f"{base_url}/server_info", api_key=api_key, timeout=30)
    if reply.status != 200 or not isinstance(reply.body, dict):
        return None
    values = [s.get("avg_spec_accept_length") for s in reply.body.get("internal_states", [])]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def run(base_url: str, api_key: str | None) -> None:
    from sgl_eagle_ext.cpu.tiny_models import DEMO_PROMPTS

    outs = http.generate(base_url, list(DEMO_PROMPTS), MAX_NEW_TOKENS, api_key=api_key)
    print("\n=== demo: greedy answers of the tiny target (random weights: text is noise) ===")
    for prompt, out in zip(DEMO_PROMPTS, outs):
        acc = http.accept_length(out.get("meta_info", {}))
        shown = "n/a (no speculation)" if acc is None else f"{acc:.2f}"
        print(f"> {prompt}\n  {out['text']!r}\n  accept length {shown}")
    avg = server_accept_length(base_url, api_key)
    if avg is not None:
        print(f"=== SGLang's average accept length: {avg:.2f} tokens per verify cycle ===")
