"""tune --live's measuring side: the bench client's rounds against the live server, the
profile windows they produced (EAGLE3_PROFILE_FILE, rank 0) and the server tree's CPU
time, summed per measurement."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.profiling.aggregate import Cell, Profile
from sgl_eagle_ext.profiling.record import Window, iter_records
from sgl_eagle_ext.profiling.recorder.profiler import IDLE_FLUSH_S
from sgl_eagle_ext.tools.bench import client as cl
from sgl_eagle_ext.tools.bench import loads, probe
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.tune.live_options import LiveOptions

# At most this long for the idle flush after a round (it comes IDLE_FLUSH_S after the
# last batch; a few seconds later on a loaded 2-core host).
FLUSH_WAIT_S = 15.0
MIN_CYCLES = 8  # per cell, whatever the request-cycle count


class ProfileTail:
    """New EAGLE3_PROFILE records of rank 0 (EAGLE3_PROFILE_FILE), from an offset."""

    def __init__(self, path: Path | None):
        self.path = path  # None: an unprofiled server (a separate arm): nothing to read

    def offset(self) -> int:
        return self.path.stat().st_size if self.path and self.path.exists() else 0

    def records(self, start: int) -> list[Window]:
        if not self.path or not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(start)
            data = f.read()
        # the profile record's own reader: a NaN or cut line is skipped, never averaged in
        return list(iter_records(data.decode("utf-8", "replace").splitlines()))

    async def settle(self, since: int | None = None) -> None:
        """Until the idle server has written the last windows of the round that began
        at offset `since` and has just ended. The recorder also writes windows while
        busy (every few seconds), and its last flush comes once idle for IDLE_FLUSH_S,
        seconds later on a loaded host: a fixed wait, or "the file grew", let that
        flush land in the next cell (seen under load: cells without cycles, or with
        another step count's). So: wait for a window written after the round ended
        (its `ts`), then for the file to stay still; at most FLUSH_WAIT_S without one."""
        if self.path is None:
            return
        ended = time.time()
        t0 = time.monotonic()
        last, grown_at = self.offset(), t0
        while True:
            await asyncio.sleep(0.1)
            now, new = time.monotonic(), self.offset()
            if new != last:
                last, grown_at = new, now
            if now - grown_at < 0.3:
                continue  # being written
            if since is None:
                if now - t0 > IDLE_FLUSH_S + 0.9:
                    return  # nothing ran: whatever was pending has been written
                continue
            if any((r.ts or 0) >= ended for r in self.records(since)):
                return  # the idle flush after the round, written whole
            if now - t0 > FLUSH_WAIT_S:
                return  # it flushed before the round's end was seen (a slow client)


# -- one measurement -----------------------------------------------------------------


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by `pid` and every process under it: on a
    shared CPU host, what the server's work cost, whatever else ran beside it."""
    try:
        root = psutil.Process(pid)
        total = 0.0
        for p in [root, *root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue  # gone between listing and reading
        return total
    except psutil.Error:
        return None


class Driver:
    def __init__(
        self, server: probe.Server, opts: LiveOptions, prompt_set, tail: ProfileTail, pid=None
    ):
        self.server, self.opts, self.prompts, self.tail = server, opts, prompt_set, tail
        self.pid = pid  # the launcher: the server tree's CPU time per round
        self.client: cl.Client | None = None  # open during measure()
        self.client_args = dict(
            model=server.model_id,
            api_key=server.api_key,  # the key the run's server was started with
            spec_details_field=server.release.chat_spec_details_field,
            incremental=bool(server.info.get("incremental_streaming_output")),
            tls=server.tls,
        )
        self.console = Console(quiet=True)
        self.spec = {"speculative_eagle_topk": server.info.get("speculative_eagle_topk")}

    async def _round(self, level: int, tokens: int, seed: int) -> sw.Level:
        lv = await sw.run_level(
            self.server,
            self.client,
            self.prompts,
            level,
            level,
            loads.Load(tokens, seed=seed),
            self.console,
        )
        if lv.interrupted:
            raise sw.Interrupted(f"at concurrency {level}")
        if lv.server_gone:
            raise UserError(f"the server stopped answering at concurrency {level}.", code=1)
        return lv

    def session(self):
        """The bench client, open for the with-block."""
        driver = self

        class _Session:
            async def __aenter__(self):
                self.c = cl.Client(driver.server.base_url, **driver.client_args)
                driver.client = await self.c.__aenter__()

            async def __aexit__(self, *exc):
                driver.client = None
                await self.c.__aexit__(*exc)

        return _Session()

    async def warm_up(self, level: int, tokens: int | None = None) -> None:
        """c short requests (not measured), then the windows they made are flushed."""
        tokens = self.opts.warmup_tokens if tokens is None else tokens
        start = self.tail.offset()
        if tokens > 0:
            await self._round(level, tokens, self.opts.seed + 10_000)
        await self.tail.settle(start if tokens > 0 else None)

    async def into(self, tally: Tally) -> None:
        """One round of c requests of --max-tokens; its windows go to `tally`."""
        start = self.tail.offset()
        cpu0 = tree_cpu_s(self.pid) if self.pid else None
        lv = await self._round(tally.level, self.opts.max_tokens, self.opts.seed + tally.rounds)
        cpu1 = tree_cpu_s(self.pid) if self.pid else None  # before the idle wait
        if cpu0 is not None and cpu1 is not None:
            tally.cpu_s += cpu1 - cpu0
        await self.tail.settle(start)
        tally.add(lv.fields, self.tail.records(start), self.spec)

    async def measure(
        self,
        level: int,
        rounds_at_most: int | None = None,
        *,
        rounds_at_least: int = 1,
        reference: tuple[int, object] | None = None,
        setup=None,
        warmup_tokens: int | None = None,
    ) -> dict:
        """Whatever steps the server runs at `level` (a separate server, or SGLang's
        controller): warm-up, then rounds until the windows hold enough request-cycles
        (`rounds_at_most`: exactly that many). `reference` (steps, pin): alternate each
        round with one pinned at those steps (`pin` and `setup` switch while idle), so
        both figures share the host's conditions."""
        async with self.session():
            t0 = time.monotonic()
            await self.warm_up(level, warmup_tokens)
            main = Tally(level, None)
            ref = Tally(level, reference[0]) if reference is not None else None
            while main.rounds < (rounds_at_most or max(self.opts.max_rounds, rounds_at_least)):
                if ref is None:
                    await self.into(main)
                else:  # A B, B A, A B ...: the order within a pair alternates, so an
                    # order effect (measured on the CPU harness: the first round of a
                    # pair ran ~20% faster) and a steady drift cancel over pairs
                    pair = [(setup, main), (reference[1], ref)]
                    for switch, tally in pair if main.rounds % 2 == 0 else pair[::-1]:
                        switch()  # idle: every rank sees it at the same batch
                        await self.into(tally)
                done = main.enough(self.opts.request_cycles) and (
                    ref is None or ref.enough(self.opts.request_cycles)
                )
                if done and not rounds_at_most and main.rounds >= rounds_at_least:
                    break
            rec = main.record(time.monotonic() - t0, self.opts.max_tokens)
            if ref is not None:
                rec["reference"] = ref.record(None, self.opts.max_tokens)
            return rec


class Tally:
    """One measurement's rounds: the client's figures and the windows at (level, steps)."""

    def __init__(self, level: int, steps: int | None):
        self.level, self.steps = level, steps
        self.profile = Profile()  # the windows of its rounds, in the one aggregator
        self.tokens = self.duration = self.requests = self.failed = self.rounds = 0
        self.cpu_s = 0.0  # the server tree's CPU seconds over the rounds

    def add(self, f: dict, records: list[Window], spec: dict) -> None:
        self.tokens += f["output_tokens"]
        self.duration += f["duration_s"]
        self.requests += f["requests"]
        self.failed += f["requests"] - f["completed"]
        self.rounds += 1
        self.profile.spec = self.profile.spec or dict(spec)  # a chain's steps, where unsaid
        for w in records:
            self.profile.add(w)

    @property
    def cell(self) -> Cell:
        return self.profile.cell(self.level, self.steps)

    def enough(self, request_cycles: int) -> bool:
        """At least MIN_CYCLES cycles, and `request_cycles` verified request-cycles."""
        c = self.cell
        return c.cycles >= MIN_CYCLES and c.cycles * self.level >= request_cycles

    def record(self, wall_s: float | None, max_tokens: int) -> dict:
        cell = self.cell
        cells = self.profile.cells()
        return {
            "level": self.level,
            "steps": self.steps,
            "rounds": self.rounds,
            "wall_s": wall_s,
            "ts": time.time(),
            "client": {
                "output_tok_s": self.tokens / self.duration if self.duration > 0 else None,
                "output_tokens": self.tokens,
                "duration_s": self.duration,
                "requests": self.requests,
                "failed": self.failed,
                "max_tokens": max_tokens,
                "server_cpu_s": self.cpu_s or None,
                "tok_per_server_cpu_s": self.tokens / self.cpu_s if self.cpu_s > 0 else None,
            },
            "profile": {
                "cycles": cell.cycles,
                "request_cycles": cell.cycles * self.level,
                "accept_len": cell.accept_len,
                "cycle_ms": cell.mean("cycle") if cell.cycles else None,
                "decode_tok_s": cell.tok_s,
                "host_ms": cell.mean("host") if cell.cycles else None,
                "correct_drafts_hist": {str(k): v for k, v in cell.hist.items()},
                "steps_mix": {
                    str(s): c.cycles
                    for (bs, s), c in cells.items()
                    if bs == self.level and c.cycles
                },
            },
        }
