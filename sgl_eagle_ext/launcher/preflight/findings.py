"""Findings and the report that collects them (text and JSON renderings)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import asdict, dataclass
from pathlib import Path

from sgl_eagle_ext.common.server_argv import ServerArgv

ERROR, WARNING, INFO = "error", "warning", "info"
_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass
class Finding:
    id: str  # stable, dotted: "context.draft-shorter"; --skip takes it (or a prefix: "host")
    severity: str  # error (stops the launch), warning, info
    message: str
    fix: str | None = None
    file: str | None = None  # the file the finding is about
    field: str | None = None  # the field in it, dotted ("text_config.max_position_embeddings")
    waived: bool = False  # --skip: reported, never stops the launch
    data: dict = dataclasses.field(default_factory=dict)  # machine-readable details (--json)

    def render(self) -> str:
        tag = "WAIVED" if self.waived else self.severity.upper()
        where = ": ".join(x for x in (self.file, self.field) if x)
        head = f"{tag:7} {self.id}  " + (f"{where}: " if where else "") + self.message
        return head + (f"\n        fix: {self.fix}" if self.fix else "")


def matches(finding_id: str, pattern: str) -> bool:
    """--skip ID waives that id, or every id under it ("aux" waives "aux.duplicates")."""
    return finding_id == pattern or finding_id.startswith(pattern.rstrip(".") + ".")


@dataclass
class Report:
    release: str
    target: str | None
    draft: str | None
    findings: list[Finding] = dataclasses.field(default_factory=list)
    overlay: Path | None = None  # --fix: the draft directory to launch with instead

    def add(self, *found: Finding | None) -> None:
        self.findings.extend(f for f in found if f is not None)

    def waive(self, skip) -> None:
        for f in self.findings:
            if any(matches(f.id, s) for s in skip):
                f.waived = True
        ids = sorted({f.id for f in self.findings})
        for s in skip:  # a typo waives nothing: say so, with the nearest id of this run
            if not any(matches(i, s) for i in ids):
                near = difflib.get_close_matches(s, ids, n=1)
                self.add(
                    Finding(
                        "preflight.skip-unmatched",
                        WARNING,
                        f"--skip {s} matched no finding of this run"
                        + (f"; did you mean {near[0]}?" if near else "."),
                        "the ids are the second column of this report (a group: its prefix)",
                    )
                )

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR and not f.waived]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def draft_model_path(self) -> str | None:
        """What --speculative-draft-model-path should be: the overlay after --fix."""
        return str(self.overlay) if self.overlay else self.draft

    def retarget(self, server_args: list[str]) -> list[str]:
        """`server_args` with the draft path pointed at the overlay (if --fix wrote one)."""
        if not self.overlay:
            return list(server_args)
        argv = ServerArgv.of(server_args)
        return list(argv.with_value("speculative-draft-model-path", str(self.overlay)))

    def summary(self) -> str:
        count = {
            s: sum(1 for f in self.findings if f.severity == s and not f.waived) for s in _ORDER
        }
        waived = sum(f.waived for f in self.findings)
        parts = [
            f"{count[ERROR]} error(s)",
            f"{count[WARNING]} warning(s)",
            f"{count[INFO]} note(s)",
        ]
        if waived:
            parts.append(f"{waived} waived")
        verdict = "OK" if self.ok else "STOP"
        return f"preflight {verdict} (SGLang {self.release}): " + ", ".join(parts)

    def render(self, notes: bool = True) -> str:
        shown = [f for f in self.findings if notes or f.severity != INFO or f.waived]
        shown.sort(key=lambda f: (f.waived, _ORDER.get(f.severity, 3)))
        lines = [f.render() for f in shown]
        if self.overlay:
            lines.append(f"overlay: launch with --speculative-draft-model-path {self.overlay}")
        lines.append(self.summary())
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "release": self.release,
            "target": self.target,
            "draft": self.draft,
            "overlay": str(self.overlay) if self.overlay else None,
            "ok": self.ok,
            "findings": [asdict(f) for f in self.findings],
        }
