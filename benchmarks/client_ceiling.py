"""Ceiling of the load generator: can `bench sweep` drive 250 streams without being the bottleneck?

Starts a local endpoint that streams chat tokens as fast as it can
(sgl_eagle_ext.bench.fake_server, pinned to its own cores), then runs, each
pinned to ONE core:

  * our client:   python -m sgl_eagle_ext.bench sweep --concurrency 250 ...
  * SGLang's:     python -m sglang.bench_serving --backend sglang-oai-chat --max-concurrency 250 ...

against the same endpoint with the same request count and length, and prints
streamed tokens/s and requests/s of each, their ratio, the client's CPU use,
and how busy the endpoint was (if it was saturated, both figures are floors).

    python benchmarks/client_ceiling.py [--streams 250] [--requests 2500] [--max-tokens 256]

Figures, not a test: nothing here asserts a time limit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    root = Path(os.environ.get("EAGLE_EXT_MODELS_DIR", "~/.cache/sgl-eagle-ext/tiny-models"))
    target = root.expanduser() / "target"
    return str(target) if (target / "tokenizer.json").is_file() else None


def run_measured(cmd: list[str], core: int, server: psutil.Process) -> tuple[float, float, float,
                                                                             str]:
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
        raise SystemExit(f"{cmd[:4]} failed ({out.returncode}):\n{out.stdout[-2000:]}\n"
                         f"{out.stderr[-3000:]}")
    return wall, client_cpu, server_cpu, out.stdout + out.stderr


def ours(url: str, a, core: int, server: psutil.Process, tmp: Path) -> dict:
    results = tmp / "ours.jsonl"
    cmd = [PY, "-m", "sgl_eagle_ext.bench", "sweep", "--url", url, "--concurrency",
           str(a.streams), "--num-prompts", str(a.requests), "--max-tokens", str(a.max_tokens),
           "--prompts-per-concurrency", "0", "--warmup", "1", "--quiet", "--results", str(results)]
    wall, ccpu, scpu, _ = run_measured(cmd, core, server)
    rec = [json.loads(x) for x in results.read_text().splitlines()][-1]
    return {"tok_s": rec["output_tok_s"], "req_s": rec["request_s"],
            "completed": rec["completed"], "errors": sum(rec["errors"].values()),
            "duration": rec["duration_s"], "wall": wall, "client_cpu": ccpu, "server_cpu": scpu}


def sglang(url: str, a, core: int, server: psutil.Process, tmp: Path) -> dict:
    out_file = tmp / "sglang.jsonl"
    cmd = [PY, "-m", "sglang.bench_serving", "--backend", "sglang-oai-chat", "--base-url", url,
           "--dataset-name", "random-ids", "--random-input-len", "16", "--random-output-len",
           str(a.max_tokens), "--random-range-ratio", "1", "--num-prompts", str(a.requests),
           "--max-concurrency", str(a.streams), "--warmup-requests", "1", "--disable-tqdm",
           "--output-file", str(out_file), "--seed", "0"]
    if a.tokenizer:
        cmd += ["--tokenizer", a.tokenizer]
    wall, ccpu, scpu, text = run_measured(cmd, core, server)
    if not out_file.is_file():
        raise SystemExit(f"bench_serving wrote no result:\n{text[-3000:]}")
    rec = [json.loads(x) for x in out_file.read_text().splitlines()][-1]
    return {"tok_s": rec["output_throughput"], "req_s": rec["request_throughput"],
            "completed": rec["completed"], "errors": a.requests - rec["completed"],
            "duration": rec["duration"], "wall": wall, "client_cpu": ccpu, "server_cpu": scpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=250, help="concurrent streams (250)")
    p.add_argument("--requests", type=int, default=2500, help="requests per tool (2500)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per request (256)")
    p.add_argument("--tokens-per-write", type=int, default=1,
                   help="SSE events per socket write of the endpoint (1: one token per write, "
                        "like SGLang at stream_interval 1)")
    p.add_argument("--client-core", type=int, default=0)
    p.add_argument("--server-cores", default="", help="e.g. 1-7 (default: every other core)")
    p.add_argument("--tokenizer", default=default_tokenizer(),
                   help="tokenizer dir for bench_serving's random prompts (default: the tiny "
                        "target built by the CPU harness)")
    p.add_argument("--repeat", type=int, default=1, help="alternate the two tools N times")
    a = p.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    if a.server_cores:
        lo, _, hi = a.server_cores.partition("-")
        server_cores = set(range(int(lo), int(hi or lo) + 1))
    else:
        server_cores = set(cores) - {a.client_core} or set(cores)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    model = a.tokenizer or "fake-model"
    server = subprocess.Popen(
        [PY, "-m", "sgl_eagle_ext.bench.fake_server", "--port", str(port), "--model", model,
         "--tokens-per-write", str(a.tokens_per_write)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pin(server_cores))
    try:
        wait_up(url)
        sp = psutil.Process(server.pid)
        print(f"endpoint: fake SGLang (chat streaming, 1 token per SSE event, "
              f"{a.tokens_per_write} event(s) per write) on core(s) "
              f"{','.join(map(str, sorted(server_cores)))}; clients pinned to core "
              f"{a.client_core}; {a.streams} streams, {a.requests} requests x {a.max_tokens} "
              f"tokens; {psutil.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        rows = []
        with tempfile.TemporaryDirectory() as td:
            for i in range(a.repeat):
                for name, fn in (("sgl_eagle_ext.bench sweep", ours),
                                 ("sglang.bench_serving", sglang)):
                    r = fn(url, a, a.client_core, sp, Path(td))
                    r["name"], r["round"] = name, i + 1
                    rows.append(r)
                    print(f"  round {i + 1}: {name}: {r['tok_s']:.0f} tok/s, {r['req_s']:.1f} "
                          f"req/s", flush=True)
        print()
        print(f"{'client':28} {'round':>5} {'tok/s':>9} {'req/s':>7} {'done':>5} {'err':>4} "
              f"{'run s':>6} {'client CPU s':>12} {'endpoint busy':>13}")
        for r in rows:
            print(f"{r['name']:28} {r['round']:>5} {r['tok_s']:>9.0f} {r['req_s']:>7.1f} "
                  f"{r['completed']:>5} {r['errors']:>4} {r['duration']:>6.2f} "
                  f"{r['client_cpu']:>12.2f} {r['server_cpu'] / r['duration'] * 100:>12.0f}%")
        print("(run s: the measured window; client CPU s: the whole client process, start-up "
              "and imports included; endpoint busy: endpoint CPU time / run s, over its cores)")
        best = {n: max(r["tok_s"] for r in rows if r["name"] == n) for n in
                ("sgl_eagle_ext.bench sweep", "sglang.bench_serving")}
        best_req = {n: max(r["req_s"] for r in rows if r["name"] == n) for n in best}
        ratio = best["sgl_eagle_ext.bench sweep"] / best["sglang.bench_serving"]
        rratio = best_req["sgl_eagle_ext.bench sweep"] / best_req["sglang.bench_serving"]
        print(f"\nratio ours / bench_serving (best round): streamed tok/s x{ratio:.2f}, "
              f"requests/s x{rratio:.2f}")
        busy = max(r["server_cpu"] / r["duration"] for r in rows) / len(server_cores)
        if busy > 0.85:
            print(f"note: the endpoint used {busy * 100:.0f}% of its core(s): it may be the "
                  f"limit, so these are floors of both clients' ceilings (give it more cores "
                  f"with --server-cores or raise --tokens-per-write)")
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
