"""Sharded search on Ray Serve: q/s and RSS per shard for 1, 2 and 4 shards of a synthetic 1M-vector Flat index.

What it does:

1. writes ``--rows`` random unit vectors of ``--dim`` (default 1,000,000 x 384, MiniLM's width; 1.5 GB) to
   ``WORK/embeddings.npy`` (kept for reruns). No corpus and no encoder: search speed does not depend on what the
   vectors mean, and query encoding is the encoder deployment's business, not the shards';
2. for each shard count N, writes the shard files with the build's own writer
   (:func:`retriever_server.build.write_index_files`: the ``shards/shard-XXX-of-YYY.faiss`` layout, row ranges on
   faiss's BLAS blocks), then deploys N shard deployments of :mod:`retriever_server.ray_app` on Ray Serve (each
   loading only its file) and a small ingress deployment that does what the HTTP ingress does after encoding:
   the project's micro-batcher, one :class:`~retriever_server.ray_app.Fanout` call to every shard at once, and
   :func:`~retriever_server.sharded.merge_topk`. The driver calls the ingress through a deployment handle (no
   HTTP: the HTTP layer is the same as the unsharded app's and is measured by ``benchmarks/retriever_load.py``);
3. measures, per N: q/s of sequential 64-query requests; q/s and p50 of sequential 1-query requests; q/s of
   ``--concurrent`` 1-query requests all in flight at once (the ingress micro-batches them); the RSS of every
   shard replica process (read by the replica from ``/proc/self/statm``) and of the ingress; and whether the merged
   top-k equals the unsharded faiss top-k of the same query batches, computed in this process from ``index.faiss``
   (N = 1's file): rows and scores for the 64-query batches, rows for the 1-query requests;
4. prints the table, and the computed Flat memory of wiki-18 (21,015,324 passages x 768 float32, E5-base) per shard
   for N = 1, 2, 4, 8.

Each shard replica reserves ``2 / N`` CPUs of the 2-CPU Ray instance (Ray then sets its OpenMP threads, so faiss's,
to ``max(1, floor(2 / N))``). On a 2-core machine sharding divides memory, not time: every shard scans its rows on
the same two cores.

Usage::

    python benchmarks/retriever_shards.py [--rows 1000000] [--dim 384] [--shards 1 2 4] [--work DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIKI18_ROWS, WIKI18_DIM = 21_015_324, 768
BATCH = 64


def write_vectors(path: Path, rows: int, dim: int, seed: int = 0) -> None:
    """Random unit vectors, written chunk by chunk (memory: one chunk)."""
    if path.is_file():
        existing = np.load(path, mmap_mode="r")
        if existing.shape == (rows, dim) and existing.dtype == np.float32:
            return
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
    step = 1 << 16
    for start in range(0, rows, step):
        x = rng.standard_normal((min(step, rows - start), dim), dtype=np.float32)
        out[start : start + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    out.flush()
    del out


def unit_queries(n: int, dim: int, seed: int = 1) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def shard_files(emb: Path, out: Path, rows: int, dim: int, shards: int) -> list[dict]:
    """The build's shard files for ``shards`` (reused when a previous run wrote them)."""
    from retriever_server.build import write_index_files

    record = out / "records.json"
    if record.is_file():
        records = json.loads(record.read_text())
        if all((out / r["name"]).is_file() and (out / r["name"]).stat().st_size == r["bytes"] for r in records):
            return records
    out.mkdir(parents=True, exist_ok=True)
    records = write_index_files(emb, out, n=rows, dim=dim, index_type="Flat", shards=shards, chunk_size=1 << 16)
    record.write_text(json.dumps(records))
    return records


def ingress_class():
    """The benchmark's ingress: micro-batcher + fan-out + merge, over query vectors instead of texts."""
    from ray import serve

    @serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    class VectorIngress:
        def __init__(self, shards: list, specs: list[dict]):
            from retriever_server.batching import MicroBatcher
            from retriever_server.ray_app import Fanout
            from retriever_server.sharded import ShardSpec

            self.fanout = Fanout(None, list(zip([ShardSpec(**s) for s in specs], shards, strict=True)))
            self.batcher = MicroBatcher(self._run, max_batch_size=BATCH)

        def _run(self, jobs):
            from retriever_server.batching import JobResult

            q = np.concatenate([np.stack(job.queries) for job in jobs])
            k = max(job.topk for job in jobs)
            scores, rows = self.fanout.search(q, k)
            out, start = [], 0
            for job in jobs:
                stop = start + len(job.queries)
                out.append(JobResult(q[start:stop], scores[start:stop, : job.topk], rows[start:stop, : job.topk]))
                start = stop
            return out

        async def search(self, queries: np.ndarray, k: int):
            from retriever_server.batching import Job

            result = await self.batcher.submit(Job(list(queries), k))
            return result.scores, result.rows

        def info(self) -> dict:
            from retriever_server.ray_app import _rss_bytes

            return {"pid": os.getpid(), "rss_bytes": _rss_bytes(), "fanout": self.fanout.counters}

    return VectorIngress


def measure(handle, queries: np.ndarray, k: int, singles: int, concurrent: int) -> dict:
    """Timings and results through the ingress handle."""
    handle.search.remote(queries[:BATCH], k).result()  # warm-up: first calls pay connection setup
    handle.search.remote(queries[:1], k).result()
    batches = len(queries) // BATCH
    t0 = time.perf_counter()
    batch_results = [handle.search.remote(queries[b * BATCH : (b + 1) * BATCH], k).result() for b in range(batches)]
    batch_s = time.perf_counter() - t0
    single_lat, single_rows = [], []
    for i in range(singles):
        t = time.perf_counter()
        single_rows.append(handle.search.remote(queries[i : i + 1], k).result()[1][0])
        single_lat.append(time.perf_counter() - t)
    t0 = time.perf_counter()
    responses = [handle.search.remote(queries[i : i + 1], k) for i in range(concurrent)]
    concurrent_rows = [r.result()[1][0] for r in responses]
    concurrent_s = time.perf_counter() - t0
    return {
        "batch64_qps": batches * BATCH / batch_s,
        "batch_results": batch_results,
        "single_qps": singles / sum(single_lat),
        "single_p50_ms": 1000 * statistics.median(single_lat),
        "single_rows": np.stack(single_rows),
        "concurrent_qps": concurrent / concurrent_s,
        "concurrent_rows": np.stack(concurrent_rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--queries", type=int, default=256, help="queries sent as 64-query requests (default 256)")
    parser.add_argument("--singles", type=int, default=32, help="sequential 1-query requests (default 32)")
    parser.add_argument("--concurrent", type=int, default=256, help="1-query requests in flight at once")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance (default 2)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "agentrag_shards_bench"))
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    import faiss
    from ray import serve

    from agentrag_verl.testing import local_ray
    from retriever_server.ray_app import deployment_classes
    from retriever_server.search import import_faiss
    from retriever_server.sharded import ShardSpec

    import_faiss()  # the project's BLAS threshold
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    emb = work / "embeddings.npy"
    t0 = time.perf_counter()
    write_vectors(emb, args.rows, args.dim)
    print(f"vectors: {args.rows} x {args.dim} float32 in {emb} ({time.perf_counter() - t0:.1f} s)", flush=True)
    queries = unit_queries(args.queries, args.dim)
    k = args.k

    # the unsharded reference: N = 1's index.faiss, searched here with the same query batches, once per BLAS thread
    # count (BLAS rounds the last bit differently with another number of threads; shards run with fewer)
    one = shard_files(emb, work / "n1", args.rows, args.dim, 1)
    whole = faiss.read_index(str(work / "n1" / one[0]["name"]))
    refs = {}
    for threads in sorted({1, args.cpus}):
        faiss.omp_set_num_threads(threads)
        t0 = time.perf_counter()
        batches = [whole.search(queries[b : b + BATCH], k) for b in range(0, len(queries) // BATCH * BATCH, BATCH)]
        batch_qps = len(batches) * BATCH / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        singles = [whole.search(queries[i : i + 1], k)[1][0] for i in range(args.singles)]
        single_qps = args.singles / (time.perf_counter() - t0)
        refs[threads] = {
            "batches": batches,
            "batch_qps": batch_qps,
            "singles": np.stack(singles),
            "single_qps": single_qps,
            "concurrent": whole.search(queries[: args.concurrent], k)[1],
        }
    del whole

    rows_out = []
    with local_ray(num_cpus=args.cpus):
        shard_cls = serve.deployment(deployment_classes()["shard"])
        for n in args.shards:
            records = shard_files(emb, work / f"n{n}", args.rows, args.dim, n)
            specs = [
                ShardSpec(str(work / f"n{n}"), i, n, r["rows"][0], r["rows"][1], r["name"])
                for i, r in enumerate(records)
            ]
            cpus = args.cpus / n
            shards = [
                shard_cls.options(name=f"shard-{s.number}", ray_actor_options={"num_cpus": cpus}).bind(
                    dataclasses.asdict(s)
                )
                for s in specs
            ]
            t0 = time.perf_counter()
            handle = serve.run(ingress_class().bind(shards, [dataclasses.asdict(s) for s in specs]), name=f"bench{n}")
            deploy_s = time.perf_counter() - t0
            infos = [
                serve.get_deployment_handle(f"shard-{s.number}", f"bench{n}").info.remote().result() for s in specs
            ]
            m = measure(handle, queries, k, args.singles, args.concurrent)
            ingress = handle.info.remote().result()
            serve.delete(f"bench{n}")
            threads = infos[0]["threads"]
            ref = refs.get(threads) or refs[max(refs)]
            same_rows = all(
                np.array_equal(got[1], want[1]) for got, want in zip(m["batch_results"], ref["batches"], strict=True)
            )
            same_scores = all(
                np.array_equal(got[0], want[0]) for got, want in zip(m["batch_results"], ref["batches"], strict=True)
            )
            row = {
                "shards": n,
                "rows_per_shard": max(s.rows for s in specs),
                "file_mb_per_shard": max(r["bytes"] for r in records) / 2**20,
                "rss_mb_per_shard": [i["rss_bytes"] / 2**20 for i in infos],
                "ingress_rss_mb": ingress["rss_bytes"] / 2**20,
                "load_s_per_shard": [i["load_seconds"] for i in infos],
                "deploy_s": deploy_s,
                "cpus_per_shard": cpus,
                "batch64_qps": m["batch64_qps"],
                "single_qps": m["single_qps"],
                "single_p50_ms": m["single_p50_ms"],
                "concurrent_qps": m["concurrent_qps"],
                "threads_per_shard": threads,
                "identical_batch64_rows": same_rows,
                "identical_batch64_scores": same_scores,
                "identical_single_rows": bool(np.array_equal(m["single_rows"], ref["singles"])),
                "identical_concurrent_rows": bool(np.array_equal(m["concurrent_rows"], ref["concurrent"])),
                "fanout": ingress["fanout"],
            }
            rows_out.append(row)
            print(json.dumps(row), flush=True)

    print()
    print(
        f"Flat, {args.rows:,} random unit vectors x {args.dim} (float32), k = {k}, Ray Serve on "
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), {args.cpus} Ray CPUs"
    )
    for threads, ref in sorted(refs.items()):
        print(
            f"in-process unsharded faiss, {threads} thread(s), no Ray: 64-query batches {ref['batch_qps']:.0f} q/s, "
            f"1-query {ref['single_qps']:.1f} q/s"
        )
    header = (
        "| shards | rows/shard | threads/shard | file MB/shard | RSS MB per shard process | ingress RSS MB | "
        f"64-query req q/s | 1-query req q/s (p50 ms) | {args.concurrent} concurrent 1-query q/s | "
        "top-k = unsharded |"
    )
    print(header)
    print("|---" * 10 + "|")
    for r in rows_out:
        checks = [
            ("rows", r["identical_batch64_rows"] and r["identical_single_rows"] and r["identical_concurrent_rows"]),
            ("scores", r["identical_batch64_scores"]),
        ]
        same = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in checks)
        rss = " / ".join(f"{x:.0f}" for x in r["rss_mb_per_shard"])
        print(
            f"| {r['shards']} | {r['rows_per_shard']:,} | {r['threads_per_shard']} | {r['file_mb_per_shard']:.0f} | "
            f"{rss} | {r['ingress_rss_mb']:.0f} | {r['batch64_qps']:.0f} | "
            f"{r['single_qps']:.1f} ({r['single_p50_ms']:.0f}) | {r['concurrent_qps']:.0f} | {same} |"
        )
    print()
    wiki_gib = WIKI18_ROWS * WIKI18_DIM * 4 / 2**30
    print(f"wiki-18 Flat (computed): {WIKI18_ROWS:,} x {WIKI18_DIM} float32 = {wiki_gib:.1f} GiB")
    print("| shards | vectors per shard | GiB per shard |")
    print("|---|---|---|")
    for n in (1, 2, 4, 8):
        per = -(-WIKI18_ROWS // n)
        print(f"| {n} | {per:,} | {per * WIKI18_DIM * 4 / 2**30:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows_out}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
