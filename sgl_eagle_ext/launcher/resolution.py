"""What SGLang will actually run for one launch: its resolved server settings.

One answer per exact launch (the final SGLang argument list, the environment, the python
that will start the server). Two sources, always labelled:

  source="sglang"     the installed release's own parser and resolution hooks, asked in
                      a subprocess by the preflight probe (launcher/preflight/ask_sglang.py)
  source="predicted"  the release table's rules (common/releases.py), for dry runs where
                      that release is not installed

Readers: `launch --dry-run` and `preflight` (the "what SGLang changes on its own" view),
the arm-fairness check of `bench ab/compare`, `tune --live` and `benchmarks/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Change:
    """One setting SGLang sets on its own for this launch."""

    field: str  # ServerArgs field name, e.g. "max_running_requests"
    before: object  # the parsed value before SGLang's resolution (None: unset)
    after: object  # the value the server runs with
    by: str  # the SGLang hook that set it, e.g. "_handle_eagle_family" ("" if unknown)

    def line(self) -> str:
        before = "unset" if self.before is None else repr(self.before)
        by = f", by `{self.by}`" if self.by else ""
        return f"{self.field}: {before} -> {self.after!r}{by}"


@dataclass
class Resolution:
    """SGLang's resolved ServerArgs for one launch (JSON-able values only)."""

    version: str  # the SGLang release that resolved (or whose rules predicted) it
    source: str  # "sglang" | "predicted"
    fields: dict[str, object] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    error: str | None = None  # SGLang refused these arguments: its own message
    cached_at: str | None = None  # when SGLang gave this answer, if from the cache
    # False where the release does not record which hook changed a field (Change.by "")
    attributed: bool = True
    # the GPU host SGLang resolved as on, when not this machine (preflight/hosts.py)
    host: str | None = None

    @property
    def label(self) -> str:
        if self.source == "sglang":
            cached = f" (cached answer from {self.cached_at})" if self.cached_at else ""
            on = f" as on {self.host}" if self.host else ""
            return f"by SGLang {self.version}{on}{cached}"
        return f"predicted from the release table for SGLang {self.version}"

    def lines(self) -> list[str]:
        """The settings view: one line per setting SGLang sets on its own."""
        if self.error:
            return [f"SGLang {self.version} refuses these arguments: {self.error}"]
        out = [c.line() for c in self.changes]
        if not self.attributed and out:
            out.append(f"(SGLang {self.version} does not record which step set each)")
        return out or ["(none)"]
