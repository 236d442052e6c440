"""The names EAGLE3_PROFILE is known by, defined once: the switch and its
settings (environment variables), the log line's tag and the logger.

Imported by the recorder (inside SGLang's scheduler ranks), the code that
installs it there (in_sglang/), the report and the tests. Plain constants: no
import cost in SGLang's processes.
"""

from sgl_eagle_ext.common.contract import (  # noqa: F401 (the flush contract, re-exported)
    FLUSH_GRACE_S,
    FLUSH_SIGNAL_NAME,
    PROFILE_ENV,
    SCHEDULER_TITLE,
    profile_enabled,
)

# Log lines: "EAGLE3_PROFILE v=1 rank=0 ..." (profiling/record.py), and the
# on/disabled announcements, all through this logger.
TAG = PROFILE_ENV  # the switch and the tag are one word
LOGGER = "sgl_eagle_ext.profile"

# Environment switches (read once per scheduler process; profiling/recorder/config.py).
ENV = PROFILE_ENV  # "1": profile; anything else: nothing is patched
ENV_RANKS = "EAGLE3_PROFILE_RANKS"
ENV_INTERVAL_S = "EAGLE3_PROFILE_INTERVAL_S"
ENV_CYCLES = "EAGLE3_PROFILE_CYCLES"
ENV_FILE = "EAGLE3_PROFILE_FILE"
ENV_SYNC_CHECK = "EAGLE3_PROFILE_SYNC_CHECK"


enabled = profile_enabled  # the one test of the switch (common/contract.py)
