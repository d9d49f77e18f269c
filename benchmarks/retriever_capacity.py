"""Capacity table: passages x dimension x faiss index type -> index memory, recall@3 against exact search, q/s.

Measured on synthetic *clustered* unit vectors (a mixture of ``--clusters`` random directions plus Gaussian noise,
about what a sentence encoder's embeddings look like to an index: dense regions, not a uniform sphere); the
held-out queries are fresh draws from the same mixture. Uniform random vectors would be the worst case for every
approximate index (no structure to exploit); real E5 embeddings of Wikipedia sit between the two, so measure your own
with ``python -m retriever_server recall`` before choosing.

For each size and type: the index's size (its serialized bytes = what a search process holds), recall@3 of the
index against exact inner-product search (:mod:`retriever_server.recall`'s definitions) on ``--queries`` held-out
queries, and
search throughput in queries/s for one batched call of those queries on all cores (the server's micro-batches are
of this kind). Then the memory for wiki-18 (21,015,324 passages x 768, E5-base) per shard for N = 1, 2, 4, 8,
extrapolated from the measured sizes at the largest two ``--sizes`` (a fixed part: quantizer, codebooks, which every
shard holds, plus bytes per vector).

Usage::

    python benchmarks/retriever_capacity.py [--sizes 100000 400000] [--dims 384 768] [--queries 1000]
        [--json capacity.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import time
from pathlib import Path

import numpy as np

WIKI18_PASSAGES = 21_015_324
WIKI18_DIM = 768


def clustered(n: int, d: int, clusters: int, seed: int, noise: float) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` random unit centers (float32 ``[n, d]``), generated in blocks.

    Each vector is a center plus Gaussian noise of expected norm ``noise``, normalized: at ``noise=1`` a vector's
    cosine to its center is about 0.7 (large ``noise``: uniform on the sphere).
    """
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(12345 + d).standard_normal((clusters, d)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    out = np.empty((n, d), np.float32)
    for start in range(0, n, 65536):
        m = min(65536, n - start)
        x = centers[rng.integers(0, clusters, m)] + rng.standard_normal((m, d)).astype(np.float32) * (
            noise / math.sqrt(d)
        )
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def index_types(n: int, d: int, hnsw_max: int) -> list[tuple[str, str | None]]:
    """(faiss factory string, search parameters) pairs for ``n`` vectors of width ``d``."""
    nlist = 1 << max(4, round(math.log2(4 * math.sqrt(n))))  # ~4 sqrt(n) lists, a power of two
    types: list[tuple[str, str | None]] = [("Flat", None)]
    if n <= hnsw_max:
        types.append(("HNSW32", "efSearch=64"))
    types += [
        (f"IVF{nlist},Flat", "nprobe=16"),
        (f"IVF{nlist},Flat", "nprobe=64"),
        (f"IVF{nlist},SQ8", "nprobe=64"),
        (f"IVF{nlist},PQ{d // 8}", "nprobe=64"),
    ]
    return types


def measure(
    vectors: np.ndarray,
    queries: np.ndarray,
    exact: np.ndarray,
    factory: str,
    params: str | None,
    train_rows: int,
    built: dict,
) -> dict:
    """Build (or reuse) one index, set its search parameters, and measure size, recall@3 and q/s."""
    import faiss

    from retriever_server.recall import recall_at_k

    d = vectors.shape[1]
    t0 = time.perf_counter()
    if factory in built:
        index = built[factory]
    else:
        built.clear()  # at most one built index in memory (the nprobe variants reuse it)
        index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            sample = vectors[np.random.default_rng(0).choice(len(vectors), min(train_rows, len(vectors)), False)]
            index.train(sample)
        index.add(vectors)
        built[factory] = index
    build_s = time.perf_counter() - t0
    if params:
        faiss.ParameterSpace().set_index_parameters(index, params)
    size = int(faiss.serialize_index(index).nbytes)
    index.search(queries[:16], 3)  # warm-up
    t0 = time.perf_counter()
    _, found = index.search(queries, 3)
    seconds = time.perf_counter() - t0
    return {
        "passages": len(vectors),
        "dim": d,
        "index_type": factory,
        "search_params": params,
        "index_bytes": size,
        "bytes_per_vector": round(size / len(vectors), 1),
        "recall_at_3": round(recall_at_k(found, exact), 4),
        "qps": round(len(queries) / seconds, 1),
        "build_seconds": round(build_s, 1),
    }


def kind(factory: str) -> str:
    """The design without its IVF list count (``IVF2048,PQ96`` -> ``IVF,PQ96``)."""
    return re.sub(r"IVF\d+", "IVF", factory)


def nlist_of(factory: str) -> int:
    return int(re.search(r"IVF(\d+)", factory).group(1))


def wiki18_rows(rows: list[dict], sizes: list[int]) -> list[dict]:
    """Per-shard memory for wiki-18 from the two largest measured sizes at 768-d: fixed part + bytes per vector."""
    if len(sizes) < 2:
        return []
    n1, n2 = sorted(sizes)[-2:]
    # the IVF list count grows with n, so the same design has another factory string at each size
    by_key = {(kind(r["index_type"]), r["search_params"], r["passages"]): r for r in rows if r["dim"] == WIKI18_DIM}
    nlist_21m = 1 << round(math.log2(4 * math.sqrt(WIKI18_PASSAGES)))
    out = []
    for (design, params, n), big in by_key.items():
        small = by_key.get((design, params, n1))
        if n != n2 or small is None:
            continue
        factory = big["index_type"]
        per_vector = (big["index_bytes"] - small["index_bytes"]) / (n2 - n1)
        fixed = max(0.0, big["index_bytes"] - per_vector * n2)
        if factory.startswith("IVF"):  # the coarse quantizer grows with nlist (~4 sqrt(n) lists at 21M)
            fixed *= nlist_21m / nlist_of(factory)
        out.append(
            {
                "index_type": factory.replace(f"IVF{nlist_of(factory)}", f"IVF{nlist_21m}")
                if "IVF" in factory
                else factory,
                "search_params": params,
                "bytes_per_vector": round(per_vector, 1),
                "shard_gib": {k: round((fixed + per_vector * WIKI18_PASSAGES / k) / 2**30, 2) for k in (1, 2, 4, 8)},
                "recall_at_3": big["recall_at_3"],
                "recall_measured_at": n2,
            }
        )
    return out


def main() -> int:
    import faiss

    from retriever_server.recall import exact_topk

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 400_000], help="passages (default 100k 400k)")
    p.add_argument("--dims", type=int, nargs="+", default=[384, 768], help="vector widths (default 384 768)")
    p.add_argument("--queries", type=int, default=1000, help="held-out queries (default 1000)")
    p.add_argument("--clusters", type=int, default=4096, help="mixture components (default 4096)")
    p.add_argument("--noise", type=float, default=1.0, help="noise norm around a center (default 1.0; 10: ~uniform)")
    p.add_argument("--train-rows", type=int, default=100_000, help="rows sampled to train IVF/PQ (default 100k)")
    p.add_argument("--hnsw-max", type=int, default=100_000, help="build HNSW only up to this size (slow on 2 cores)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()

    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, faiss {faiss.__version__}")
    print(
        f"# data: {args.clusters} clusters, noise {args.noise}; {args.queries} held-out queries; q/s = one batched call"
    )
    rows: list[dict] = []
    header = "| passages | dim | index | search | memory MiB | bytes/vector | recall@3 | q/s | build s |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for d in args.dims:
        queries = clustered(args.queries, d, args.clusters, seed=999, noise=args.noise)
        for n in args.sizes:
            vectors = clustered(n, d, args.clusters, seed=n + d, noise=args.noise)
            _, exact = exact_topk(vectors, queries, 3)
            built: dict = {}
            for factory, params in index_types(n, d, args.hnsw_max):
                r = measure(vectors, queries, exact, factory, params, args.train_rows, built)
                rows.append(r)
                print(
                    f"| {n:,} | {d} | {factory} | {params or '-'} | {r['index_bytes'] / 2**20:.1f} | "
                    f"{r['bytes_per_vector']} | {r['recall_at_3']:.3f} | {r['qps']:.0f} | {r['build_seconds']} |",
                    flush=True,
                )
            del vectors, built
    wiki = wiki18_rows(rows, args.sizes)
    if wiki:
        print(f"\n# wiki-18 ({WIKI18_PASSAGES:,} x {WIKI18_DIM}), memory per shard in GiB (extrapolated)")
        print("| index | search | bytes/vector | N=1 | N=2 | N=4 | N=8 | recall@3 (measured at) |")
        print("|---|---|---|---|---|---|---|---|")
        for w in wiki:
            g = w["shard_gib"]
            print(
                f"| {w['index_type']} | {w['search_params'] or '-'} | {w['bytes_per_vector']} | {g[1]} | {g[2]} | "
                f"{g[4]} | {g[8]} | {w['recall_at_3']:.3f} ({w['recall_measured_at']:,}) |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "wiki18": wiki}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
