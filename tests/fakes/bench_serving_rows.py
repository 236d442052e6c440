"""sglang.bench_serving's own reading of its flags, for the README's "Coming from
bench_serving" table: run in a subprocess of the SGLang venv (it imports torch).

    python tests/fakes/bench_serving_rows.py SPEC.json  ->  one JSON line on stdout

SPEC: {"parse": [argv, ...], "run": argv or null}. Each `parse` argv goes through
bench_serving's own argument parser (its cli_main, stopped right after parse_args);
the line holds each namespace and what bench_serving derives from it (its headers,
goodput SLOs, random lengths). `run` runs bench_serving for real (against a fake
endpoint). bench_serving imports `datasets` at module level for the HF datasets only;
where it is not installed a stub stands in (the random dataset never calls it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import types


class _Parsed(Exception):
    pass


def _stub_datasets() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        stub = types.ModuleType("datasets")

        def load_dataset(*_a, **_k):
            raise RuntimeError("the `datasets` stub of tests/fakes/bench_serving_rows.py")

        stub.load_dataset = load_dataset
        sys.modules["datasets"] = stub


def _safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _safe(x) for k, x in v.items()}
    return v if isinstance(v, (str, int, float, bool, type(None))) else str(v)


def parse(serving, argv: list[str]) -> dict:
    import numpy as np
    from sglang.benchmark.datasets.common import compute_random_lens
    from sglang.benchmark.utils import parse_custom_headers

    real = argparse.ArgumentParser.parse_args
    got = {}

    def capture(self, args=None, namespace=None):
        got["ns"] = real(self, args, namespace)
        raise _Parsed

    argparse.ArgumentParser.parse_args = capture
    sys.argv = ["bench_serving", *argv]
    try:
        serving.cli_main()
    except _Parsed:
        pass
    except SystemExit as e:  # its parser refused the argv
        return {"refused": True, "code": e.code}
    finally:
        argparse.ArgumentParser.parse_args = real
    ns = got["ns"]
    np.random.seed(0)
    lens = compute_random_lens(ns.random_input_len, ns.random_range_ratio, 2000)
    return {
        "args": _safe(vars(ns)),
        "headers": parse_custom_headers(ns.header) if ns.header else {},
        "goodput": dict(ns.goodput) if ns.goodput else {},
        "random_input_lens": [min(lens), max(lens)],
    }


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    _stub_datasets()
    from sglang.benchmark import serving

    out = {"parse": [parse(serving, argv) for argv in spec.get("parse", [])]}
    if spec.get("run"):
        sys.argv = ["bench_serving", *spec["run"]]
        serving.cli_main()
        out["ran"] = True
    print(json.dumps(out))


if __name__ == "__main__":
    main()
