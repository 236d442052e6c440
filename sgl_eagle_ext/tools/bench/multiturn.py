"""Multi-turn replay: conversations played turn by turn with a growing context.

At concurrency c, c conversations are in flight; each sends its turns one after
another, every turn carrying the whole history: the system prompt, each earlier
user turn and the server's own earlier answer (as an agent's loop would), then
the next user turn. A failed turn ends its conversation (the rest would replay a
history that never happened). Output lengths per turn: the dataset reply's length
or --output-len.
"""

from __future__ import annotations

import asyncio
import random
import time

from sgl_eagle_ext.common import interrupts
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench.datasets import Conversation, out_len
from sgl_eagle_ext.tools.bench.lengths import LengthSpec
from sgl_eagle_ext.tools.bench.tokens import Counter


def plan_turns(
    convs: list[Conversation],
    output_len: LengthSpec,
    counter: Counter,
    default_output: int,
    seed: int,
) -> list[list[int]]:
    """Output length of every turn of every conversation (drawn once, same for every arm)."""
    rng = random.Random(seed)
    return [
        [max(1, out_len(output_len, rng, counter, t.reply, default_output)) for t in c.turns]
        for c in convs
    ]


async def replay(
    client: cl.Client,
    convs: list[Conversation],
    out_lens: list[list[int]],
    concurrency: int,
    *,
    temperature: float = 0.0,
    ignore_eos: bool = True,
    bar=None,
) -> tuple[list[cl.RequestResult], list[dict], float, bool]:
    """Play the conversations. Returns (results, per-result {conversation, turn,
    context_messages}, seconds, interrupted); results are in send order."""
    results: list[cl.RequestResult] = []
    meta: list[dict] = []
    queue = iter(range(len(convs)))
    counter = iter(range(1 << 62))

    async def worker() -> None:
        for k in queue:
            c = convs[k]
            history = [{"role": "system", "content": c.system}] if c.system else []
            for turn, (t, n) in enumerate(zip(c.turns, out_lens[k])):
                history.append({"role": "user", "content": t.user})
                r = await client.chat(
                    list(history),
                    n,
                    index=next(counter),
                    prompt_id=f"{c.id}/{turn}",
                    temperature=temperature,
                    ignore_eos=ignore_eos,
                )
                results.append(r)
                meta.append({"conversation": c.id, "turn": turn, "context_messages": len(history)})
                if bar is not None:
                    bar.update(1)
                if not r.ok:
                    break
                history.append({"role": "assistant", "content": r.text})

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(convs))))]
    interrupted = await interrupts.gather_or_cancel(tasks)
    order = sorted(range(len(results)), key=lambda i: results[i].index)
    return (
        [results[i] for i in order],
        [meta[i] for i in order],
        time.perf_counter() - t0,
        interrupted,
    )
