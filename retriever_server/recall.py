"""Recall@k of an index against exact search, with the index's size: numbers to choose a compressed index by.

An approximate index (HNSW, IVF, PQ, SQ) trades recall for memory and speed. :func:`measure_recall` compares its
top-k with the exact inner-product top-k computed from the build's own ``embeddings.npy`` (blockwise, never more
than ``block_rows`` passages in memory) on a sample of queries that are *not* passages of the corpus (held out: a
questions file of the task, e.g. a dev split). ``python -m retriever_server build ... --recall-queries FILE``
reports it after a build, and ``python -m retriever_server recall --index DIR --queries FILE`` for an existing
index, e.g. to try ``--search-params nprobe=64`` before serving with it.

Definitions (``docs/retriever.md``):

- recall@k = the mean over queries of ``|approx top-k ∩ exact top-k| / k`` (1.0 for ``Flat``);
- index bytes = the size of the index file(s), which is what a search process holds in memory for Flat, IVF, PQ
  and SQ indexes (HNSW adds its graph, also in the file).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .build import EMBEDDINGS_FILE
from .cli_common import input_file, read_json_lines
from .retriever import LoadOptions, Retriever

if TYPE_CHECKING:
    import numpy as np

QUERY_FIELDS = ("question", "query", "contents", "text")


@dataclass
class RecallReport:
    """Recall of one index on one query sample.

    Attributes:
        k: Hits compared per query.
        queries: Queries measured.
        recall_at_k: Mean share of the exact top-k the index returned.
        index_bytes: Size of the index file(s).
        index_qps: Queries/s of the index on the sample (one batched call, this process's threads).
        exact_qps: Queries/s of the blockwise exact search on the same sample.
        search_params: faiss ``ParameterSpace`` string in effect (``None``: the index's defaults).
    """

    k: int
    queries: int
    recall_at_k: float
    index_bytes: int
    index_qps: float
    exact_qps: float
    search_params: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def exact_topk(
    embeddings: np.ndarray, queries: np.ndarray, k: int, *, block_rows: int = 65536
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-``k`` of ``queries`` over ``embeddings``, reading ``block_rows`` rows at a time.

    Args:
        embeddings: ``[n, d]`` float32 (a memory map is fine: only one block is read at a time).
        queries: ``[m, d]`` float32.
        k: Hits per query (at most ``n``).

    Returns:
        ``(scores, rows)`` ``[m, k]``, best first; equal scores are ordered by row id.
    """
    import numpy as np

    n = embeddings.shape[0]
    k = min(int(k), n)
    q = np.ascontiguousarray(queries, dtype=np.float32)
    best_s = np.full((len(q), 0), -np.inf, np.float32)
    best_r = np.zeros((len(q), 0), np.int64)
    for start in range(0, n, block_rows):
        block = np.asarray(embeddings[start : start + block_rows], dtype=np.float32)
        scores = np.concatenate([best_s, q @ block.T], axis=1)
        rows = np.concatenate([best_r, np.broadcast_to(np.arange(start, start + len(block)), (len(q), len(block)))], 1)
        # lexsort: last key first -> by score descending, then by row ascending
        order = np.lexsort((rows, -scores), axis=1)[:, :k]
        best_s = np.take_along_axis(scores, order, 1)
        best_r = np.take_along_axis(rows, order, 1)
    return best_s, best_r


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean over rows of ``|found[i] ∩ exact[i]| / k`` (``-1`` padding in ``found`` never counts)."""
    k = exact.shape[1]
    hits = sum(len(set(f[f >= 0].tolist()) & set(e.tolist())) for f, e in zip(found, exact, strict=True))
    return hits / (k * len(exact)) if len(exact) else 0.0


def measure_recall(
    backend: Any,
    embeddings: np.ndarray,
    query_vectors: np.ndarray,
    k: int = 3,
    *,
    index_bytes: int = 0,
    search_params: str | None = None,
) -> RecallReport:
    """Recall@k of ``backend.search`` against :func:`exact_topk` over ``embeddings`` for ``query_vectors``.

    Args:
        backend: Anything with ``search(queries, k) -> (scores, rows)`` (a :class:`~retriever_server.search.
            FaissBackend`, a sharded searcher...).
        embeddings: The indexed vectors, row ``i`` = passage ``i``.
        query_vectors: Held-out queries ``[m, d]``.
        index_bytes: Reported as is (see :func:`index_bytes_of`).
    """
    if len(query_vectors) == 0:
        raise ValueError("measure_recall needs at least one query.")
    t0 = time.perf_counter()
    _, found = backend.search(query_vectors, k)
    t1 = time.perf_counter()
    _, exact = exact_topk(embeddings, query_vectors, k)
    t2 = time.perf_counter()
    return RecallReport(
        k=k,
        queries=len(query_vectors),
        recall_at_k=round(recall_at_k(found, exact), 4),
        index_bytes=index_bytes,
        index_qps=round(len(query_vectors) / max(t1 - t0, 1e-9), 1),
        exact_qps=round(len(query_vectors) / max(t2 - t1, 1e-9), 1),
        search_params=search_params,
    )


def index_bytes_of(index_dir: str | Path) -> int:
    """Total size of the faiss index file(s) in an index directory (one file, or one per shard)."""
    return sum(p.stat().st_size for p in Path(index_dir).glob("**/*.faiss") if p.is_file())


def read_queries(path: str | Path, sample: int | None = None, seed: int = 0) -> list[str]:
    """Questions from a ``.jsonl`` file (field ``question``, ``query``, ``contents`` or ``text``) or plain lines.

    Args:
        sample: Keep a seeded random sample of at most this many (``None``: all).

    Raises:
        ValueError: A JSON line without any of those fields, or a file with no question (the message names it).
    """
    path = input_file(path, "--recall-queries")
    texts: list[str] = []
    if path.suffix in (".jsonl", ".json"):
        for lineno, record in read_json_lines(path, "--recall-queries"):
            text = next((record[f] for f in QUERY_FIELDS if isinstance(record, dict) and f in record), None)
            if not isinstance(text, str):
                raise ValueError(
                    f"{path}:{lineno}: no question text; each JSON line needs one of the fields "
                    f"{', '.join(QUERY_FIELDS)} (a string)."
                )
            texts.append(text)
    else:
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"{path} holds no question; pass a .jsonl of questions or a text file with one per line.")
    if sample is not None and sample < len(texts):
        texts = random.Random(seed).sample(texts, sample)
    return texts


def recall_of_index_dir(
    index_dir: str | Path,
    queries: list[str],
    k: int = 3,
    *,
    search_params: str | None = None,
    options: Any = None,
) -> RecallReport:
    """Encode ``queries`` with the index's own encoder and measure the index's recall@k against exact search.

    Args:
        index_dir: A folder from ``python -m retriever_server build`` (its ``embeddings.npy`` is the exact reference).
        options: :class:`~retriever_server.retriever.LoadOptions` (device, threads...); ``search_params`` wins.

    Raises:
        FileNotFoundError: No complete build, or a build without ``embeddings.npy`` (nothing to compare against).
    """
    import dataclasses

    import numpy as np

    root = Path(index_dir)
    if not (root / EMBEDDINGS_FILE).is_file():
        raise FileNotFoundError(
            f"{root / EMBEDDINGS_FILE} is missing, so exact search has nothing to run on; recall needs the build's "
            "embeddings (rebuild the index, or restore the file)."
        )
    options = options or LoadOptions()
    if search_params is not None:
        options = dataclasses.replace(options, search_params=search_params)
    retriever = Retriever.from_index_dir(root, options)
    vectors = retriever.encode_queries(queries)
    embeddings = np.load(root / EMBEDDINGS_FILE, mmap_mode="r")
    return measure_recall(
        retriever.backend, embeddings, vectors, k, index_bytes=index_bytes_of(root), search_params=search_params
    )
