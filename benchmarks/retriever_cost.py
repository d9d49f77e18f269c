"""A 1-query request's latency while the largest request the server's limits allow is being served, beside an idle
server's.

The limits of ``python -m retriever_server serve`` bound a request's cost (``--max-request-tokens``, ``--max-hits``)
and the encoder's micro-batches (``--max-batch-tokens``), so that such a request delays a concurrent 1-query request by
about one micro-batch. This script starts the server with its default limits over the synthetic index of
``retriever_load.py`` (MiniLM, ``--passages`` passages, Flat) and measures, with one closed-loop client sending
1-query requests over a keep-alive connection:

- idle: nothing else runs;
- maximal: a second client sends the largest request the limits allow, again as soon as it is answered. By default
  512 queries of 4,088 characters (each read as the encoder's 256 tokens: 131,072 tokens, ``--max-request-tokens``) at
  topk 64 (32,768 hits, ``--max-hits``) with scores: every limit at once. The 1-query requests in flight at some time
  while a maximal request was count.

With ``--queries-only`` a third row serves the same load with micro-batches bounded by queries alone
(``--max-batch-tokens`` above any batch: the scheduling before token budgets), for comparison.

Reported per row: the 1-query requests' p50 and p99 latency and count, the maximal request's own time, the median and
longest micro-batch (the server's ``/health`` counters over the row), and the CPU other processes used meanwhile ("other
load", in cores: the machine may be shared). Latest figures: ``benchmarks/README.md``.

Usage::

    python benchmarks/retriever_cost.py [--passages 20000] [--maximal 2] [--idle-seconds 10] [--queries-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from retriever_load import (
    Connection,
    ForeignCpu,
    add_index_options,
    make_queries,
    minilm,
    percentile,
    print_machine,
    run_loop,
    running_server,
    synthetic_index,
)

LONG_QUERY = "xxxxxxx " * 511
"""4,088 characters (``--max-query-chars`` is 4,096): 2,046 MiniLM tokens, of which the encoder reads 256."""


async def one_query_loop(port: int, queries: list[str], stop: asyncio.Event, latencies: list[tuple[float, float]]):
    """Closed loop of 1-query requests until ``stop``; ``(sent, answered)`` per request."""
    conn = await Connection.open(port)
    i = 0
    while not stop.is_set():
        body = json.dumps({"queries": [queries[i % len(queries)]], "topk": 3, "return_scores": True}).encode()
        t0 = time.perf_counter()
        status, payload = await conn.post("/retrieve", body)
        if status != 200:
            raise RuntimeError(f"1-query request: HTTP {status}: {payload[:200]!r}")
        latencies.append((t0, time.perf_counter()))
        i += 1
    conn.close()


async def maximal_loop(port: int, body: bytes, count: int, spans: list[tuple[float, float]]) -> None:
    """``count`` maximal requests back to back; ``(sent, answered)`` per request."""
    conn = await Connection.open(port)
    for _ in range(count):
        t0 = time.perf_counter()
        status, payload = await conn.post("/retrieve", body)
        if status != 200:
            raise RuntimeError(f"maximal request: HTTP {status}: {payload[:300]!r}")
        spans.append((t0, time.perf_counter()))
    conn.close()


async def measure(port: int, queries: list[str], maximal: bytes | None, count: int, idle_seconds: float) -> dict:
    stop = asyncio.Event()
    small: list[tuple[float, float]] = []
    spans: list[tuple[float, float]] = []
    small_task = asyncio.create_task(one_query_loop(port, queries, stop, small))
    if maximal is None:
        await asyncio.sleep(idle_seconds)
    else:
        await maximal_loop(port, maximal, count, spans)
    stop.set()
    await small_task
    if spans:  # only the 1-query requests in flight at some time while a maximal request was
        small = [(s, a) for s, a in small if any(s < t1 and a > t0 for t0, t1 in spans)]
    latencies = sorted(a - s for s, a in small)
    if not latencies:
        raise RuntimeError("no 1-query request was answered in the window")
    return {
        "p50_ms": 1000 * percentile(latencies, 0.5),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "max_ms": 1000 * latencies[-1],
        "requests": len(latencies),
        "maximal_s": [round(t1 - t0, 2) for t0, t1 in spans],
    }


def served(port: int) -> dict:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).json()["served"]


def run_row(index_dir: Path, queries: list[str], maximal: bytes | None, args, extra: list[str]) -> dict:
    with running_server(index_dir, extra) as (port, proc):
        run_loop(measure(port, queries, None, 0, 2.0))  # warm-up: every kernel the 1-query path meets
        before = served(port)
        with ForeignCpu(proc.pid) as foreign:
            stats = run_loop(measure(port, queries, maximal, args.maximal, args.idle_seconds))
        after = served(port)
    batches = after["batches"] - before["batches"]
    compute = after["compute_seconds"] - before["compute_seconds"]
    return {
        **stats,
        "batches": batches,
        "mean_batch_ms": 1000 * compute / batches if batches else 0.0,
        "longest_batch_ms": 1000 * after["longest_batch_seconds"],
        "largest_batch_tokens": after["largest_batch_tokens"],
        "other_load_cores": round(foreign.cores, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_index_options(parser)
    parser.add_argument("--maximal", type=int, default=2, help="maximal requests per loaded row (default 2)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="length of the idle row (default 10)")
    parser.add_argument("--queries", type=int, default=512, help="queries of the maximal request (default 512)")
    parser.add_argument("--topk", type=int, default=64, help="topk of the maximal request (default 64)")
    parser.add_argument("--queries-only", action="store_true", help="also run micro-batches bounded by queries alone")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    info = print_machine()
    queries = make_queries(512)
    maximal = json.dumps({"queries": [LONG_QUERY] * args.queries, "topk": args.topk, "return_scores": True}).encode()
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="retriever-cost-") as tmp:
        if args.model is None:
            args.model = minilm()
        index_dir = synthetic_index(Path(tmp), args.passages, args.model)
        plan = [("idle", None, []), ("maximal request", maximal, [])]
        if args.queries_only:
            plan.append(("maximal request, batches by queries alone", maximal, ["--max-batch-tokens", "100000000"]))
        for name, body, extra in plan:
            rows[name] = run_row(index_dir, queries, body, args, extra)
            r = rows[name]
            print(
                f"{name}: 1-query p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
                f"({r['requests']} requests); maximal request {r['maximal_s']} s; micro-batch mean "
                f"{r['mean_batch_ms']:.1f} ms, longest {r['longest_batch_ms']:.1f} ms ({r['largest_batch_tokens']} "
                f"tokens); other load {r['other_load_cores']:.2f} cores",
                flush=True,
            )
    print()
    print(
        f"maximal request: {args.queries} queries x {len(LONG_QUERY)} characters (256 tokens each), topk {args.topk}, "
        f"return_scores; {args.passages} passages, Flat"
    )
    print("| server | 1-query p50 ms | p99 ms | requests | maximal request s | micro-batch mean / longest ms |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        spans = ", ".join(f"{s:.1f}" for s in r["maximal_s"]) or "-"
        print(
            f"| {name} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['requests']} | {spans} | "
            f"{r['mean_batch_ms']:.0f} / {r['longest_batch_ms']:.0f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
