"""Counts that must be whole numbers >= 1 (>= 0 where zero means something): a
`--tp-size 0`, a `num_hidden_layers` of 4.5 or a `draft_vocab_size` of -1 would be
truncated, ignored or crash SGLang far from the cause; here each is one finding
naming the flag or field."""

from __future__ import annotations

from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher.preflight.findings import ERROR, Finding

SIZE_FLAGS = ("--tp-size", "--pp-size", "--dp-size", "--ep-size", "--nnodes")
# Config fields SGLang sizes the model by (top level, or under text_config).
SIZE_FIELDS = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "draft_vocab_size",
    "max_position_embeddings",
)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def check(target, draft, server_args: list[str]) -> list[Finding]:
    found, argv = [], ServerArgv.of(server_args)
    for flag in SIZE_FLAGS:
        text = argv.value(flag)
        if text is None:
            continue
        try:
            ok = int(text) >= 1
        except ValueError:
            ok = False
        if not ok:
            found.append(
                Finding(
                    "args.size",
                    ERROR,
                    f"{flag} {text}: must be a whole number >= 1.",
                    f"pass {flag} 1 or more (the GPUs or nodes it spans)",
                )
            )
    for md in (target, draft):
        cfg = getattr(md, "config", None)
        if not isinstance(cfg, dict):
            continue
        where = str(getattr(md, "path", "") or "") + "/config.json"
        tables = [("", cfg)]
        if isinstance(cfg.get("text_config"), dict):
            tables.append(("text_config.", cfg["text_config"]))
        for prefix, table in tables:
            for name in SIZE_FIELDS:
                if name in table and table[name] is not None and not _whole(table[name]):
                    found.append(
                        Finding(
                            "config.size",
                            ERROR,
                            f"{table[name]!r} is not a whole number >= 1; SGLang would "
                            f"truncate or misuse it.",
                            "correct the config (compare with the model's published config.json)",
                            file=where,
                            field=prefix + name,
                        )
                    )
    return found
