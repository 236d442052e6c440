"""`--input-len` / `--output-len`: a fixed value, a uniform range, or the dataset's own.

--input-len 4096        every request: 4096 prompt tokens
--input-len 512:2048    uniform in [512, 2048], drawn per request from the seed
--input-len dataset     whatever the dataset's text is (the default)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sgl_eagle_ext.common.errors import UserError

DATASET = "dataset"
MAX_LEN = 1 << 20  # a million tokens: past any context window, so surely a typo


@dataclass(frozen=True)
class LengthSpec:
    low: int | None = None  # None: the dataset's own length
    high: int | None = None

    @classmethod
    def parse(cls, text: str | None, flag: str) -> LengthSpec:
        fix = f"e.g. {flag} 1024, {flag} 512:2048 (uniform) or {flag} {DATASET}"
        if text is None or str(text).strip() in ("", DATASET):
            return cls()
        lo, sep, hi = str(text).strip().partition(":")
        try:
            low, high = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise UserError(
                f"{flag} {text}: not a token count, a LOW:HIGH range or '{DATASET}'.", fix=fix
            ) from None
        if not 1 <= low <= high <= MAX_LEN:
            raise UserError(
                f"{flag} {text}: lengths must be 1..{MAX_LEN} with LOW <= HIGH.", fix=fix
            )
        return cls(low, high)

    @property
    def own(self) -> bool:
        return self.low is None

    def sample(self, rng: random.Random) -> int | None:
        if self.low is None:
            return None
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def describe(self) -> str:
        if self.low is None:
            return "the dataset's own"
        return str(self.low) if self.low == self.high else f"uniform {self.low}..{self.high}"

    def as_record(self) -> str:
        if self.low is None:
            return DATASET
        return str(self.low) if self.low == self.high else f"{self.low}:{self.high}"
