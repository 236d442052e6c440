"""The one registry of what the project installs inside SGLang's processes.

Each in-process feature declares itself next to its code (instrumentor style, as
OpenTelemetry's instrumentations do), e.g. in in_sglang/adaptive_backoff.py:

    FEATURE = registry.register(registry.Feature(
        ADAPTIVE_BACKOFF_ENV,
        enabled=lambda env: bool(env.get(ADAPTIVE_BACKOFF_ENV)),
        hooks={registry.SCHEDULER: lambda ctx: install_from_env(ctx.env)},
        order=registry.CONTROL,
    ))

and both entry points read this registry, never a list of their own: the launcher's
server (in_sglang/serve.py: stages SERVER, LAUNCH, EXIT; in_sglang/scheduler_entry.py:
SCHEDULER) and SGLang's plugin entry point (in_sglang/plugin.py, stock launch_server on
0.5.13+: SCHEDULER, features with plugin=True). in_sglang/features.py imports every
module that declares one.

A feature's stage runs once per process, in `order`, only when its switch (read from
the environment, cheap) is on. A hook that raises costs that feature only: one line
on stderr, and SGLang goes on without it (fail closed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# Where a hook runs.
SERVER = "server"  # the HTTP server process, before SGLang is imported
LAUNCH = "launch"  # the HTTP server process, SGLang imported, before the server starts
EXIT = "exit"  # the HTTP server process on its way out, schedulers still alive
SCHEDULER = "scheduler"  # first thing in every scheduler (TP rank) process
STAGES = (SERVER, LAUNCH, EXIT, SCHEDULER)

# Order bands (lower runs first): what a rank reports before anything can hang it, test
# faults, platform fixes SGLang must have before its workers load, measurement, controls.
REPORT, FAULT, PLATFORM, MEASURE, CONTROL = 0, 10, 20, 50, 60


@dataclass(frozen=True)
class Context:
    """What a hook gets: the process environment and, in a scheduler, its rank and
    SGLang's ServerArgs (None where the entry point cannot see them)."""

    env: Mapping[str, str]
    tp_rank: object = "?"
    server_args: object = None


@dataclass(frozen=True)
class Feature:
    name: str  # its switch or tag: what its lines start with
    enabled: Callable[[Mapping[str, str]], bool]  # the switch, from the environment only
    hooks: Mapping[str, Callable[[Context], object]]  # stage -> hook
    order: int = MEASURE
    plugin: bool = True  # also through SGLang's plugin entry point (stock launch_server)

    def __post_init__(self):
        unknown = set(self.hooks) - set(STAGES)
        if unknown:
            raise ValueError(f"{self.name}: unknown stage(s) {sorted(unknown)}")


@dataclass
class Registry:
    features: dict[str, Feature] = field(default_factory=dict)
    ran: set[tuple[str, str]] = field(default_factory=set)  # (feature, stage) in this process

    def register(self, feature: Feature) -> Feature:
        self.features[feature.name] = feature  # a re-imported module replaces its own
        return feature

    def ordered(self, stage: str) -> list[Feature]:
        return sorted(
            (f for f in self.features.values() if stage in f.hooks),
            key=lambda f: (f.order, f.name),
        )

    def run(
        self,
        stage: str,
        env: Mapping[str, str] | None = None,
        *,
        tp_rank: object = "?",
        server_args: object = None,
        via_plugin: bool = False,
    ) -> list[str]:
        """Run `stage` of every switched-on feature not yet run here; their names."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        env = os.environ if env is None else env
        ctx = Context(env, tp_rank, server_args)
        done = []
        for feature in self.ordered(stage):
            key = (feature.name, stage)
            if key in self.ran or (via_plugin and not feature.plugin):
                continue
            try:
                if not feature.enabled(env):
                    continue
                self.ran.add(key)
                feature.hooks[stage](ctx)
            except Exception as e:  # never into SGLang: this feature is off, the rest go on
                print(
                    f"sgl_eagle_ext: {feature.name}: {stage} hook failed "
                    f"({type(e).__name__}: {e}); serving without it",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            done.append(feature.name)
        return done


REGISTRY = Registry()
register = REGISTRY.register
run = REGISTRY.run
