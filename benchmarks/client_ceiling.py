"""Ceiling of the load generator: can `bench sweep` drive 250 streams without being the bottleneck?

Starts a local endpoint that streams chat tokens as fast as it can
(tests/fakes/fake_sglang.py, pinned to its own cores), then runs, each
pinned to ONE core:

  * our client:   python -m sgl_eagle_ext.bench sweep --concurrency 250 ...
  * SGLang's:     python -m sglang.bench_serving --backend sglang-oai-chat --max-concurrency 250 ...
  * SGLang's Rust client (0.5.23+): python -m sglang.benchmark.rust_client, same flags
                  (what `bench_serving --rust-client` runs); skipped where not installed

against the same endpoint with the same request count and length, and prints
streamed tokens/s and requests/s of each, their ratios, the client's CPU use,
and how busy the endpoint was (if it was saturated, the figures are floors).

    python benchmarks/client_ceiling.py [--streams 250] [--requests 2500] [--max-tokens 256]

Figures, not a test: nothing here asserts a time limit.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from sgl_eagle_ext.common import ports

PY = sys.executable
# The test double (not shipped in the wheel) beside the tests.
FAKE_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "fake_sglang.py"


def pin(cores: set[int]):
    return lambda: os.sched_setaffinity(0, cores)


def wait_up(url: str, timeout: float = 30) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the fake endpoint at {url} did not come up")


def default_tokenizer() -> str | None:
    """bench_serving needs a tokenizer for its random dataset: the tiny target's."""
    from sgl_eagle_ext.cpu import tiny_models

    root = Path(os.environ.get("EAGLE_EXT_MODELS_DIR", tiny_models.DEFAULT_DIR)).expanduser()
    target = root / f"v{tiny_models.BUILD_VERSION}" / "target"  # tiny_models.build's layout
    return str(target) if (target / "tokenizer.json").is_file() else None


def run_measured(
    cmd: list[str], core: int, server: psutil.Process
) -> tuple[float, float, float, str]:
    """Run `cmd` pinned to `core`; returns (wall s, client CPU s, server CPU s, output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = sum(server.cpu_times()[:2])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin({core}))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = sum(server.cpu_times()[:2]) - s0
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(
            f"{cmd[:4]} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        )
    return wall, client_cpu, server_cpu, out.stdout + out.stderr


def ours(
    url: str,
    a,
    core: int,
    server: psutil.Process,
    tmp: Path,
    streams: int,
    requests: int,
    max_tokens: int,
) -> dict:
    results = tmp / "ours.jsonl"
    results.unlink(missing_ok=True)
    cmd = [
        PY,
        "-m",
        "sgl_eagle_ext.bench",
        "sweep",
        "--url",
        url,
        "--concurrency",
        str(streams),
        "--num-prompts",
        str(requests),
        "--max-tokens",
        str(max_tokens),
        "--prompts-per-concurrency",
        "0",
        "--warmup",
        "1",
        "--quiet",
        "--results",
        str(results),
    ]
    wall, ccpu, scpu, _ = run_measured(cmd, core, server)
    rec = [json.loads(x) for x in results.read_text().splitlines()][-1]
    return {
        "tok_s": rec["output_tok_s"],
        "req_s": rec["request_s"],
        "completed": rec["completed"],
        "errors": sum(rec["errors"].values()),
        "tokens": rec["output_tokens"],
        "duration": rec["duration_s"],
        "wall": wall,
        "client_cpu": ccpu,
        "server_cpu": scpu,
    }


def sglang_serving(
    module: str,
    extra: list[str],
    url: str,
    a,
    core: int,
    server: psutil.Process,
    tmp: Path,
    streams: int,
    requests: int,
    max_tokens: int,
) -> dict:
    """One run of an SGLang client that takes bench_serving's flags and result line."""
    out_file = tmp / f"{module}.jsonl"
    out_file.unlink(missing_ok=True)
    cmd = [
        PY,
        "-m",
        module,
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "16",
        "--random-output-len",
        str(max_tokens),
        "--random-range-ratio",
        "1",
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(streams),
        "--warmup-requests",
        "1",
        "--disable-tqdm",
        "--output-file",
        str(out_file),
        "--seed",
        "0",
        *extra,
    ]
    if a.tokenizer:
        cmd += ["--tokenizer", a.tokenizer]
    wall, ccpu, scpu, text = run_measured(cmd, core, server)
    if not out_file.is_file():
        raise SystemExit(f"{module} wrote no result:\n{text[-3000:]}")
    rec = [json.loads(x) for x in out_file.read_text().splitlines()][-1]
    return {
        "tok_s": rec["output_throughput"],
        "req_s": rec["request_throughput"],
        "completed": rec["completed"],
        "errors": requests - rec["completed"],
        "tokens": rec["total_output_tokens"],
        "duration": rec["duration"],
        "wall": wall,
        "client_cpu": ccpu,
        "server_cpu": scpu,
    }


def sglang(*args) -> dict:
    return sglang_serving("sglang.bench_serving", [], *args)


def rust(*args) -> dict:
    # Its Tokio runtime runs in the Python process, so run_measured's rusage counts
    # every thread; pinned to one core, more workers would only time-slice it.
    return sglang_serving("sglang.benchmark.rust_client", ["--worker-threads", "1"], *args)


def rust_client_installed() -> bool:
    try:
        return importlib.util.find_spec("sglang.srt.rust_extensions._bench") is not None
    except ImportError:  # an SGLang without the rust_extensions package
        return False


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=250, help="concurrent streams (250)")
    p.add_argument("--requests", type=int, default=2500, help="requests per tool (2500)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per request (256)")
    p.add_argument(
        "--tokens-per-write",
        type=int,
        default=1,
        help="SSE events per socket write of the endpoint (1: one token per write, "
        "like SGLang at stream_interval 1)",
    )
    p.add_argument("--client-core", type=int, default=0)
    p.add_argument("--server-cores", default="", help="e.g. 1-7 (default: every other core)")
    p.add_argument(
        "--tokenizer",
        default=default_tokenizer(),
        help="tokenizer dir for bench_serving's random prompts (default: the tiny "
        "target built by the CPU harness)",
    )
    p.add_argument("--repeat", type=int, default=1, help="alternate the tools N times")
    a = p.parse_args()
    for mod, why in (
        ("sglang", "the comparison runs python -m sglang.bench_serving"),
        ("datasets", "sglang.bench_serving imports it"),
    ):
        if importlib.util.find_spec(mod) is None:
            raise SystemExit(f"client_ceiling: no module {mod!r} ({why}): pip install {mod}")

    cores = sorted(os.sched_getaffinity(0))
    if a.server_cores:
        lo, _, hi = a.server_cores.partition("-")
        server_cores = set(range(int(lo), int(hi or lo) + 1))
    else:
        server_cores = set(cores) - {a.client_core} or set(cores)
    port = ports.pick()
    url = f"http://127.0.0.1:{port}"
    model = a.tokenizer or "fake-model"
    server = subprocess.Popen(
        [
            PY,
            str(FAKE_SERVER),
            "--port",
            str(port),
            "--model",
            model,
            "--tokens-per-write",
            str(a.tokens_per_write),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=pin(server_cores),
    )
    try:
        wait_up(url)
        sp = psutil.Process(server.pid)
        print(
            f"endpoint: fake SGLang (chat streaming, 1 token per SSE event, "
            f"{a.tokens_per_write} event(s) per write) on core(s) "
            f"{','.join(map(str, sorted(server_cores)))}; clients pinned to core "
            f"{a.client_core}; {a.streams} streams, {a.requests} requests x {a.max_tokens} "
            f"tokens; {psutil.cpu_count()} CPUs, Python {sys.version.split()[0]}"
        )
        tools = [("sgl_eagle_ext.bench sweep", ours), ("sglang.bench_serving", sglang)]
        if rust_client_installed():
            tools.append(("sglang rust_client", rust))
        else:
            print("note: SGLang's Rust client is not installed (SGLang >= 0.5.23): skipped")
        rows, fixed = [], {}
        with tempfile.TemporaryDirectory() as td:
            # Start-up cost (interpreter, imports, tokenizer, one warm-up): one 1-token request.
            for name, fn in tools:
                fixed[name] = fn(url, a, a.client_core, sp, Path(td), 1, 1, 1)["client_cpu"]
            for i in range(a.repeat):
                for name, fn in tools:
                    r = fn(url, a, a.client_core, sp, Path(td), a.streams, a.requests, a.max_tokens)
                    r["name"], r["round"] = name, i + 1
                    # CPU the run itself took on the client's core: a contention-proof ceiling
                    r["run_cpu"] = max(r["client_cpu"] - fixed[name], 1e-3)
                    r["cpu_tok_s"] = r["tokens"] / r["run_cpu"]
                    r["cpu_req_s"] = r["completed"] / r["run_cpu"]
                    rows.append(r)
                    print(
                        f"  round {i + 1}: {name}: {r['tok_s']:.0f} tok/s, {r['req_s']:.1f} req/s",
                        flush=True,
                    )
        print()
        print(
            f"{'client':26} {'round':>5} {'tok/s':>8} {'req/s':>7} {'done':>5} {'err':>3} "
            f"{'run s':>6} {'run CPU s':>9} {'tok/CPU-s':>9} {'req/CPU-s':>9} "
            f"{'endpoint busy':>13}"
        )
        for r in rows:
            print(
                f"{r['name']:26} {r['round']:>5} {r['tok_s']:>8.0f} {r['req_s']:>7.1f} "
                f"{r['completed']:>5} {r['errors']:>3} {r['duration']:>6.2f} "
                f"{r['run_cpu']:>9.2f} {r['cpu_tok_s']:>9.0f} {r['cpu_req_s']:>9.0f} "
                f"{r['server_cpu'] / r['duration'] * 100:>12.0f}%"
            )
        startup = ", ".join(f"{k}: {v:.2f} s" for k, v in fixed.items())
        print(
            f"(tok/s, req/s: over the measured window (wall clock); run CPU s: the client "
            f"process's CPU time minus its start-up cost ({startup}); "
            f"tok/CPU-s, req/CPU-s: what one core sustains when the client has it to itself; "
            f"endpoint busy: endpoint CPU time / run s)"
        )
        ours_name = tools[0][0]

        def best(key, name):
            return max(r[key] for r in rows if r["name"] == name)

        print()
        for other, _ in tools[1:]:
            print(
                f"ratio ours / {other} (best round): wall clock: streamed tok/s "
                f"x{best('tok_s', ours_name) / best('tok_s', other):.2f}, requests/s "
                f"x{best('req_s', ours_name) / best('req_s', other):.2f}; per CPU-second on "
                f"one core: tok x{best('cpu_tok_s', ours_name) / best('cpu_tok_s', other):.2f}, "
                f"requests x{best('cpu_req_s', ours_name) / best('cpu_req_s', other):.2f}"
            )
        load = os.getloadavg()[0]
        if load > psutil.cpu_count() * 0.75:
            print(
                f"note: load average {load:.1f} on {psutil.cpu_count()} CPUs: other work "
                f"competed for the cores, so the wall-clock figures are floors; the "
                f"per-CPU-second figures are the steadier comparison"
            )
        busy = max(r["server_cpu"] / r["duration"] for r in rows) / len(server_cores)
        if busy > 0.85:
            print(
                f"note: the endpoint used {busy * 100:.0f}% of its core(s): it may be the "
                f"limit, so these are floors of the clients' ceilings (give it more cores "
                f"with --server-cores or raise --tokens-per-write)"
            )
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
