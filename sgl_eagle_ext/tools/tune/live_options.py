"""tune live's options, typed, each field its own flag (common/declared_flags.py): the
parser of its command line (tools/tune/cli.py) is built from this class and read back
into it, and the run (live.py, live_driver.py) reads only it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.cli_args import integer, number
from sgl_eagle_ext.common.declared_flags import flag
from sgl_eagle_ext.common.server_flags import ServerFlags

REQUIRED = ("model_path", "draft_model_path")  # of ServerFlags' (cli.live_parser)


@dataclass(frozen=True)
class LiveOptions(ServerFlags):
    preset_file: Path | None = flag(  # None: eagle3-adaptive
        "--preset-file", type=Path, help="your preset (default: eagle3-adaptive)"
    )
    levels: str = flag(  # concurrencies, as given (checked by the run)
        "--levels", default="1,2,4,8,16,32,64", help="concurrencies (1,2,4,...,64)"
    )
    max_steps: int = flag(
        "--max-steps", default=5, type=integer(), help="largest chain step count (5)"
    )
    steps: str | None = flag(  # None: 0..max_steps
        "--steps", help="step counts to measure (default 0..--max-steps)"
    )
    budget_minutes: float | None = flag(
        "--budget-minutes", type=number(0, strict=True), help="plan to fit this"
    )
    results: Path = flag("--results", default=Path("tune-live/results.jsonl"), type=Path, help=None)
    baseline_arm: bool = flag(
        "--baseline-arm", default=False, action="store_true", help="also a plain baseline server"
    )
    also_trees: bool = flag(
        "--also-trees", default=False, action="store_true", help="also the tree presets' servers"
    )
    max_tokens: int = flag(
        "--max-tokens", default=256, type=integer(), help="output tokens per request"
    )
    warmup_tokens: int = flag(
        "--warmup-tokens", default=16, type=integer(), help="per warm-up request"
    )
    request_cycles: int = flag(
        "--request-cycles", default=300, type=integer(), help="per cell (see above)"
    )
    max_rounds: int = flag(
        "--max-rounds", default=8, type=integer(), help="rounds per cell at most"
    )
    validation_rounds: int = flag(
        "--validation-rounds",
        default=2,
        type=integer(),
        help="validation: at least this many adaptive/pinned round pairs per level, "
        "their order alternating (2)",
    )
    prompts: str = flag("--prompts", default="mixed", help="shipped set or JSONL file (mixed)")
    seed: int = flag("--seed", default=0, type=integer(), help=None)
