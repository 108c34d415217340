"""The search server under load: N clients for T seconds against `python -m kitm.search`, requests a second,
latency percentiles, status counts and the server's memory, with and without dynamic batching.

Each client keeps one HTTP/1.1 connection and sends its next request when the last is answered (a closed loop, as a
page's users do): 70% `POST /api/search/text` with a query of 2-8 consecutive words of one of the index's captions,
30% `GET /api/search/image/<n>` for a random indexed image, k = 10 (`--text_share`, `--k`). The clients are asyncio
coroutines on raw sockets in this process (a client library's own cost would be measured instead of the server's),
on the same machine as the server: on 2 cores they compete with it, so the figures are a floor.

    python benchmarks/bench_search_load.py --index=indexes/demo                     # 1, 50, 200 clients, batched
    python benchmarks/bench_search_load.py --index=indexes/demo --modes=unbatched,batched --seconds=30
    python benchmarks/bench_search_load.py --index=indexes/demo --clients=50 --seconds=600   # memory over time
    python benchmarks/bench_search_load.py --quick --index=...                      # 2 s a row, 1 and 8 clients

`unbatched` serves with `--max_batch=1` (each query its own model call: the server before batching); `batched` with
the defaults of `kitm.search.settings`. The table goes to stdout; `--json` writes every row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODES = {"unbatched": ["--max_batch=1", "--batch_window_ms=0"], "batched": []}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _queries(index_dir: str, count: int, seed: int) -> tuple[list[str], int]:
    """`count` text queries (2-8 consecutive words of the index's captions) and the number of indexed images."""
    manifest = json.loads((pathlib.Path(index_dir) / "manifest.json").read_text())
    captions_file = pathlib.Path(index_dir) / "captions.json"
    rng = random.Random(seed)
    words = [caption["text"].rstrip(".").split() for caption in json.loads(captions_file.read_text())] \
        if captions_file.is_file() else [["a", "dog", "in", "a", "park"]]
    queries = []
    for _ in range(count):
        caption = rng.choice(words)
        length = rng.randint(2, 8)
        start = rng.randint(0, max(0, len(caption) - length))
        queries.append(" ".join(caption[start:start + length]))
    return queries, int(manifest["num_images"])


class _Client:
    """One keep-alive connection sending one request at a time."""

    def __init__(self, port: int):
        self.port = port
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes = b"") -> int:
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n"
                    "Content-Type: application/json\r\n\r\n").encode()
            try:
                self.writer.write(head + body)
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionError("closed")
                status, length, close = int(status_line.split()[1]), 0, False
                while True:
                    line = await self.reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "connection" and value.strip().lower() == "close":
                        close = True
                await self.reader.readexactly(length)
                if close:
                    self.close()
                return status
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                self.close()
                if attempt:
                    return 0  # no answer: counted as status 0
        return 0

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _load(port: int, clients: int, seconds: float, warmup: float, queries: list[str], num_images: int,
                text_share: float, k: int, seed: int, server_pid: int | None = None) -> dict:
    latencies: list[float] = []
    rss_at_start: list[float] = []
    statuses: dict[int, int] = {}
    measuring_from = time.perf_counter() + warmup
    stop_at = measuring_from + seconds

    async def one(number: int):
        rng = random.Random(seed * 1000 + number)
        client = _Client(port)
        while (now := time.perf_counter()) < stop_at:
            if rng.random() < text_share:
                body = json.dumps({"query": rng.choice(queries), "k": k}).encode()
                status = await client.request("POST", "/api/search/text", body)
            else:
                status = await client.request("GET", f"/api/search/image/{rng.randrange(num_images)}?k={k}")
            done = time.perf_counter()
            if now >= measuring_from and done <= stop_at:
                latencies.append(done - now)
                statuses[status] = statuses.get(status, 0) + 1
            if status == 503:
                await asyncio.sleep(0.05)  # a refused client backs off a little (Retry-After says 1 s)
        client.close()

    async def measure_memory():
        await asyncio.sleep(max(0.0, measuring_from - time.perf_counter()))
        if server_pid is not None:
            rss_at_start.append(_rss_mb(server_pid))  # after the warm-up: the model's first calls have allocated

    await asyncio.gather(measure_memory(), *(one(number) for number in range(clients)))
    served = statuses.get(200, 0)
    ms = np.asarray(latencies) * 1000 if latencies else np.zeros(1)
    return {"clients": clients, "seconds": seconds, "requests": len(latencies),
            "requests_per_s": len(latencies) / seconds,
            "served_per_s": served / seconds, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
            "statuses": {str(key): value for key, value in sorted(statuses.items())},
            "rss_at_start_mb": rss_at_start[0] if rss_at_start else None}


def _start_server(index: str, port: int, flags: list[str], log) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen([sys.executable, "-m", "kitm.search", f"--index={index}", f"--port={port}", *flags],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"kitm.search stopped: see {log.name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("kitm.search did not start within 300 s")


def _info(port: int) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=30) as response:
        return json.loads(response.read())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True, help="an index folder (python -m kitm.index)")
    parser.add_argument("--clients", default="1,50,200", help="client counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds a row")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each row")
    parser.add_argument("--modes", default="batched", help=f"comma-separated, of {sorted(MODES)}")
    parser.add_argument("--text_share", type=float, default=0.7)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--server_flags", default="", help="more kitm.search flags, space-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--quick", action="store_true", help="2 s rows of 1 and 8 clients (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds, args.warmup = "1,8", 2.0, 0.5
    queries, num_images = _queries(args.index, 5000, args.seed)
    rows = []
    print(f"kitm.search under load: {args.index} ({num_images:,} images), {args.text_share:.0%} text queries, "
          f"k={args.k}; load average {os.getloadavg()[0]:.2f}", flush=True)
    print("| mode | clients | requests/s | served/s | p50 ms | p99 ms | max ms | statuses "
          "| RSS after warm-up -> end MB | mean batch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        port = _free_port()
        log_path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_search_load_{port}.log"
        with open(log_path, "w") as log:
            server = _start_server(args.index, port, MODES[mode] + args.server_flags.split(), log)
            try:
                for clients in (int(c) for c in args.clients.split(",")):
                    calls_before = _info(port).get("batching", {}).get("text", {})
                    row = asyncio.run(_load(port, clients, args.seconds, args.warmup, queries, num_images,
                                            args.text_share, args.k, args.seed, server.pid))
                    text = _info(port).get("batching", {}).get("text", {})
                    calls = text.get("calls", 0) - calls_before.get("calls", 0)
                    queries_done = text.get("queries", 0) - calls_before.get("queries", 0)
                    row.update(mode=mode, rss_after_mb=_rss_mb(server.pid),
                               mean_text_batch=round(queries_done / calls, 2) if calls else None)
                    rows.append(row)
                    statuses = ", ".join(f"{key}: {value}" for key, value in row["statuses"].items())
                    print(f"| {mode} | {clients} | {row['requests_per_s']:.0f} | {row['served_per_s']:.0f} | "
                          f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['max_ms']:.0f} | {statuses} | "
                          f"{row['rss_at_start_mb']:.0f} -> {row['rss_after_mb']:.0f} | {row['mean_text_batch']} |",
                          flush=True)
            finally:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
