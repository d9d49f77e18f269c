"""What the HTTP layer costs per request: the server's CPU per ``POST /retrieve`` with the model taken out.

At 64 closed-loop clients every batch is followed by a gap in which the event loop writes 64 answers and reads 64
new requests while the encoder waits, so the server's CPU per request is paid once per request in that gap. This
script serves the real app (``create_app`` under the same uvicorn settings as ``python -m retriever_server serve``:
the connection guard, the head limit, the POST endpoints, FastAPI for the rest) over the real passage store, with a
service that answers every job at once (rows 0..k-1, no encoder, no search). What is left per request is HTTP
parsing, the app, the wire format and rendering of 3 passages.

Measured per run, at ``--clients`` keep-alive clients x 1 query: requests/s, and CPU time per request of the server
process and of the load generator (this process), from ``/proc`` CPU times over the window. The median of
``--repeats`` runs is printed. ``--no-fast-post`` serves as ``serve --no-fast-post`` does: the POST endpoints through
the ASGI app (``PostEndpoints``) instead of on the connection.

Usage::

    python benchmarks/retriever_http.py [--clients 64] [--seconds 4] [--repeats 3] [--no-fast-post]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retriever_load import drive, free_port, make_queries, minilm, run_loop, synthetic_index

SERVE = "--serve"


def serve(port: int, index_dir: str, fast_post: bool = True) -> None:
    """Serve the app over ``index_dir`` with the instant service (the child process)."""
    import numpy as np
    import uvicorn

    from retriever_server.app import ServerConfig, create_app
    from retriever_server.batching import JobResult
    from retriever_server.http_guard import uvicorn_config
    from retriever_server.retriever import Retriever

    retriever = Retriever.from_index_dir(Path(index_dir))

    class InstantService:
        """Answers a job at once: rows 0..topk-1 with falling scores (what a search returns, without one)."""

        async def submit(self, job):
            n, k = len(job.queries), job.topk or 1
            rows = np.tile(np.arange(k, dtype=np.int64), (n, 1))
            return JobResult(np.zeros((n, 1), np.float32), (1.0 - 0.01 * rows).astype(np.float32), rows)

        def stats(self):
            return {}

    config = ServerConfig(port=port, fast_post=fast_post)
    app = create_app(retriever, config, service=InstantService())
    uvicorn.Server(uvicorn_config(app, config, log_level="warning")).run()


def measure(port: int, pid: int, clients: int, seconds: float) -> dict[str, float]:
    import psutil

    server = psutil.Process(pid)
    queries = make_queries(256)
    run_loop(drive(port, clients, 1, queries, 1.0, 0.5))  # warm-up
    s0, c0 = server.cpu_times(), resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    stats = run_loop(drive(port, clients, 1, queries, seconds, 0.0))
    wall = time.perf_counter() - t0
    s1, c1 = server.cpu_times(), resource.getrusage(resource.RUSAGE_SELF)
    # Requests served over the whole drive (its window plus the requests around it) at the measured rate.
    requests = stats["qps"] * wall
    return {
        "req_per_s": stats["qps"],
        "server_us_per_req": 1e6 * (s1.user + s1.system - s0.user - s0.system) / requests,
        "client_us_per_req": 1e6 * (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / requests,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64, help="closed-loop clients (default 64)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured window per run (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="runs; the median is printed (default 3)")
    parser.add_argument("--passages", type=int, default=2000, help="passages in the synthetic index (default 2000)")
    parser.add_argument(
        "--no-fast-post", dest="fast_post", action="store_false", help="POST through the ASGI app (serve's switch)"
    )
    args = parser.parse_args()
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        index_dir = synthetic_index(Path(tmp), args.passages, minilm())
        port = free_port()
        child = [sys.executable, __file__, SERVE, str(port), str(index_dir), *([] if args.fast_post else ["asgi"])]
        proc = subprocess.Popen(child)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except httpx.HTTPError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the server did not start") from None
                    time.sleep(0.2)
            runs = [measure(port, proc.pid, args.clients, args.seconds) for _ in range(args.repeats)]
        finally:
            proc.terminate()
            proc.wait()
    path = "answered by the connection" if args.fast_post else "through the ASGI app (--no-fast-post)"
    print(f"{args.clients} clients x 1 query, instant service, POST {path}, median of {args.repeats} runs:")
    for key in ("req_per_s", "server_us_per_req", "client_us_per_req"):
        values = [r[key] for r in runs]
        print(f"  {key:18s} {statistics.median(values):9.1f}   runs {[round(v, 1) for v in values]}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == SERVE:
        serve(int(sys.argv[2]), sys.argv[3], fast_post=sys.argv[4:] != ["asgi"])
    else:
        sys.exit(main())
