"""tune live's options, typed: what its command line (tools/tune/cli.py) is mapped onto
at the edge, and all that the run (live.py, live_driver.py) reads. The defaults here
are the command line's defaults (its parser takes them from this class)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LiveOptions:
    model_path: str
    draft_model_path: str
    preset_file: Path | None = None  # None: eagle3-adaptive
    levels: str = "1,2,4,8,16,32,64"  # concurrencies, as given (checked by the run)
    max_steps: int = 5
    steps: str | None = None  # None: 0..max_steps
    budget_minutes: float | None = None
    results: Path = Path("tune-live/results.jsonl")
    baseline_arm: bool = False
    also_trees: bool = False
    allow_unequal: bool = False
    max_tokens: int = 256
    warmup_tokens: int = 16
    request_cycles: int = 300
    max_rounds: int = 8
    validation_rounds: int = 2
    prompts: str = "mixed"
    seed: int = 0
    cpu: bool = False
    sglang_version: str | None = None
    force: bool = False
    startup_timeout: float = 3600.0
