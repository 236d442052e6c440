"""A starting SGLang server's phase, read from its own log lines (every supported
release), and which lines are not progress at all.

The launcher's watchdog (launcher/readiness.py) names the phase a stall happened in,
and bench names an arm's phase the same way (tools/bench/startup.py).
"""

from __future__ import annotations

import re

FIRST = "starting Python / importing SGLang"
HTTP_UP = "HTTP up; warm-up generation"
ADAPTIVE = "building adaptive runtime states"
DRAFT_EXTEND = "capturing draft-extend CUDA graphs"
DRAFT = "capturing draft CUDA graphs"
CAPTURED = "CUDA graphs captured"

# The first pattern that matches a line sets the phase.
PHASES: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), name)
    for p, name in (
        (r"fired up and ready to roll", "warm-up generation done"),
        (r"uvicorn running|application startup complete", HTTP_UP),
        # --speculative-adaptive: one state (verify, draft and draft-extend graphs) per
        # candidate step count; eagle_worker_v2.build_adaptive_runtime_state logs only
        # this line, after each state (0.5.13.post1+)
        (r"built adaptive runtime state steps=", ADAPTIVE),
        (r"capture .*draft.extend .*graph.*begin", DRAFT_EXTEND),
        (r"capture .*draft .*graph.*begin", DRAFT),
        (r"capture .*graph.*begin", "capturing target CUDA graphs"),
        (r"capture .*graph.*end", CAPTURED),
        (r"kv cache is allocated|memory pool end", "KV cache allocated"),
        (r"load weight end", "weights loaded"),
        (r"load weight begin|loading safetensors", "loading weights"),
        (r"init torch distributed", "initialising torch.distributed / NCCL"),
    )
)
_BUILT = re.compile(r"built adaptive runtime state steps=(\d+)", re.IGNORECASE)
_CAPTURES = {name for _, name in PHASES if name.startswith("capturing") or "captured" in name}

# Lines that the launcher's own polling causes: uvicorn's access log of the health
# endpoints it (and the image's health check) polls every few seconds, and SGLang's
# answer to a health probe that found no live rank. They are logged, but they are not
# progress: counted as such, a server stuck after HTTP is up would look alive forever.
PROBE_LINE = re.compile(
    r'"(?:GET|HEAD|POST) /health(?:_generate)?(?:\?[^" ]*)? HTTP/[\d.]+"'
    r"|Health check failed|Health check request received during shutdown"
)


def is_probe_line(line: str) -> bool:
    return PROBE_LINE.search(line) is not None


class StartupPhase:
    """The phase so far. `adaptive_states`: the extra runtime states the launch builds
    (launcher/runtime_states.py), for "2 of 5 built"; None when unknown or not adaptive."""

    def __init__(self, adaptive_states: int | None = None):
        self.phase = FIRST
        self.expected = adaptive_states
        self.built = 0
        self._adaptive = False  # inside the adaptive state builds
        self._drafts_seen: set[str] = set()  # draft capture kinds begun so far

    def feed(self, line: str) -> str:
        built = _BUILT.search(line)
        if built:
            self.built += 1
            self._adaptive = True
            self.phase = f"{ADAPTIVE} ({self._count()} built, last steps={built[1]})"
            return self.phase
        for pattern, name in PHASES:
            if not pattern.search(line):
                continue
            if name in (DRAFT, DRAFT_EXTEND):
                # the startup state captures each kind once; again means the next state
                if name in self._drafts_seen and self.expected:
                    self._adaptive = True
                self._drafts_seen.add(name)
            if self._adaptive and name in _CAPTURES:
                # a state's target-verify graphs may be captured without a line: after
                # an "end", say only which state is being built
                name = f"{ADAPTIVE} ({self._count()} built)" + (
                    "" if name == CAPTURED else f": {name}"
                )
            elif name in (HTTP_UP, "warm-up generation done"):
                self._adaptive = False
            self.phase = name
            break
        return self.phase

    def _count(self) -> str:
        return f"{self.built} of {self.expected}" if self.expected else str(self.built)
