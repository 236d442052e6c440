"""What the bench flags' texts mean: the checks options.py's fields name (headers,
a JSON body, the API key, the SLO with its aliases). One UserError per bad value."""

from __future__ import annotations

from dataclasses import replace

from sgl_eagle_ext.common import nesting, redaction, secret_flags
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import loads

BODY_FIX = "e.g. --extra-body '{\"top_p\": 0.9}'"


def request_headers(texts) -> dict[str, str]:
    """--header values as a dict: `NAME=VALUE` (as sglang.bench_serving and vLLM take
    them) or `NAME: VALUE` (as curl does); the first `=` or `:` ends the name."""
    out = {}
    for h in texts:
        cut = min((i for i in (h.find("="), h.find(":")) if i >= 0), default=-1)
        name, value = (h[:cut], h[cut + 1 :]) if cut >= 0 else (h, "")
        if cut < 0 or not name.strip() or any(c.isspace() for c in name.strip()):
            shown = name.strip() if cut >= 0 else f"{h.split()[0] if h.split() else h} (no = or :)"
            raise UserError(
                f"--header {shown}: not NAME=VALUE or NAME: VALUE.",
                fix="e.g. --header X-Team=bench or --header 'X-Team: bench'",
            )
        out[name.strip()] = value.strip()
    return out


def check_headers(headers: dict[str, str]) -> None:
    """Refuse what no HTTP header can carry; remember secret-named values for masking."""
    for name, value in headers.items():
        if secret_flags.CONTROL.search(value) or secret_flags.CONTROL.search(name):
            raise UserError(
                f"--header {name[:40]}: holds a control character (CR, LF, NUL, ...), "
                f"which no HTTP header can carry.",
                fix="write the header on one line, without control characters",
            )
        if redaction.is_secret_name(name) or name.lower() in ("authorization", "cookie"):
            redaction.remember(value)


def headers(_name: str, texts) -> dict[str, str]:
    headers = request_headers(texts or [])
    check_headers(headers)
    return headers


def extra_body(text: str | None) -> dict:
    """--extra-body: a JSON object ({} when not given)."""
    if not text:
        return {}
    try:
        obj = nesting.json_loads(text)
    except (ValueError, RecursionError) as e:
        raise UserError(f"--extra-body: not valid JSON ({e}).", fix=BODY_FIX) from None
    if not isinstance(obj, dict):
        raise UserError("--extra-body: must be a JSON object.", fix=BODY_FIX)
    return obj


def api_key(_name: str, key: str | None) -> str | None:
    # one HTTP header cannot carry, or SGLang cannot compare
    return secret_flags.check_value("api-key", key) if key else key


def slo(goals_text: list[str] | None, ttft_ms: float | None, tpot_ms: float | None) -> loads.SLO:
    """The sweep's SLO: --slo (--goodput) KEY=MS..., or the aliases --slo-ttft-ms and
    --slo-tpot-ms."""
    from sgl_eagle_ext.tools.bench import goodput

    goals = goodput.parse_slo(goals_text)
    for key, alias in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        if alias is not None and key in goals and goals[key] != alias:
            raise UserError(
                f"--slo {key}={goals[key]:g} and --slo-{key}-ms {alias:g} disagree.",
                fix=f"give the {key} goal once (--slo-{key}-ms is an alias of --slo {key}=MS)",
            )
        if alias is not None:
            goals[key] = alias
    return replace(loads.SLO.of(goals), source="given")
