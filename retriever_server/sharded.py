"""Sharded search: an index split into contiguous row ranges, searched shard by shard and merged into one top-k.

This module is the search backend only: the shard layout (:func:`plan_shards`), loading one shard
(:func:`load_shard`), the merge (:func:`merge_topk`) and :class:`ShardedBackend`, which searches every shard in one
process and merges (``serve`` without ``--ray``, ``query --index``; it holds every shard in the one process, like the
unsharded index). Serving a sharded folder on Ray Serve (``serve --ray``, ``serve run
retriever_server.ray_app:build_app index=DIR``: one deployment per shard that loads only its rows, an encoder
deployment, and an HTTP ingress that fans each batch out to every shard and merges) is composed in
:mod:`retriever_server.ray_app` from these parts.

Decisions:

- Shards return global row ids (their first row + the local row), so the ingress and the passage store never see
  local ids. The merge orders hits by score, highest first, and equal scores by row id, highest first: that is
  the order faiss's Flat search gives tied rows inside its top-k, so for a Flat index the merged top-k is the
  unsharded one, rows and scores: shard boundaries fall on faiss's 1024-row BLAS blocks
  (:func:`~retriever_server.build.shard_alignment`), so each shard computes bit-identical inner products, given the
  same number of BLAS threads (with another thread count BLAS splits the products differently and scores of 4 or
  more queries per call may differ in the last bit, sharded or not; the rows stay the same but for such near-ties).
  Which of
  several tied rows falls off the end at rank ``k`` is decided by faiss's heap in the unsharded search, so it
  cannot be reproduced in general; the merge keeps the highest row ids, deterministically.
- Approximate indexes (HNSW, IVF, PQ) merge the same way; the result is then the union of per-shard approximate
  top-k lists, not the unsharded approximate result (for IVF with shards sharing one trained quantizer, each
  shard probes the same lists over its own rows, so recall is at least the unsharded recall at the same nprobe).
- The passage store stays whole and lives with the ingress (it renders hits by global row); it is memory-mapped
  and read by offset, so it costs page cache, not resident memory.
- A folder built with M shards is served as M shards. An unsharded Flat folder can be served as N shards
  (``shards=N``): each shard copies its rows out of ``embeddings.npy`` into an exact flat index, so nothing needs
  rebuilding. Other mismatches are refused with the rebuild command (``build --shards N`` on a complete build
  rebuilds only the index).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .build import EMBEDDINGS_FILE, check_index_dir, check_shard_count, shard_alignment, shard_layout, shard_ranges
from .search import FaissBackend, faiss_has_gpu, import_faiss

if TYPE_CHECKING:
    import numpy as np

MISSING_SCORE = -3.4028234663852886e38
"""The score faiss gives the padding of a top-k longer than the index (``-FLT_MAX``, row ``-1``)."""


# ---- layout ----------------------------------------------------------------------------------------------------------


@dataclass
class ShardSpec:
    """What one shard loads.

    Attributes:
        index_dir: The index directory.
        number: This shard's number, from 0.
        count: Number of shards.
        start: First global row of the shard.
        stop: One past its last global row.
        file: Its faiss file, relative to ``index_dir``; ``None``: rows ``[start, stop)`` of ``embeddings.npy`` loaded
            into an exact flat index (an unsharded Flat folder served sharded).
    """

    index_dir: str
    number: int
    count: int
    start: int
    stop: int
    file: str | None

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def describe(self) -> str:
        return f"shard {self.number} of {self.count} (rows {self.start}-{self.stop - 1})"


def plan_shards(index_dir: str | os.PathLike[str], shards: int | None = None) -> list[ShardSpec]:
    """The shards to serve an index directory as (checks the directory first).

    Args:
        index_dir: A complete build.
        shards: ``None``: the folder's own shards. A number different from the folder's needs a Flat folder with
            ``embeddings.npy`` (its rows are then split at load time).

    Raises:
        FileNotFoundError, ValueError: No complete build, damaged parts (:func:`~retriever_server.build.
            check_index_dir`), or a shard count this folder cannot be served as.
    """
    root = Path(index_dir)
    meta = check_index_dir(root)
    layout = shard_layout(meta)
    if shards is None or shards == len(layout):
        return [
            ShardSpec(str(root), i, len(layout), rec["rows"][0], rec["rows"][1], rec["name"])
            for i, rec in enumerate(layout)
        ]
    check_shard_count(shards, int(meta["num_passages"]))
    if meta["index_type"] != "Flat" or not (root / EMBEDDINGS_FILE).is_file():
        raise ValueError(
            f"{root} holds a {meta['index_type']} index in {len(layout)} shard file(s), so it cannot be served as "
            f"{shards} shards; rebuild its index in {shards} shards (only the index is rebuilt, from its embeddings): "
            f"python -m retriever_server build ... --out {root} --index-type {meta['index_type']} --shards {shards}."
        )
    return [
        ShardSpec(str(root), i, shards, start, stop, None)
        for i, (start, stop) in enumerate(shard_ranges(int(meta["num_passages"]), shards, shard_alignment()))
    ]


def load_shard(spec: ShardSpec, *, gpu: bool = False, search_params: str | None = None, dim: int | None = None):
    """Load one shard's rows as a :class:`~retriever_server.search.FaissBackend` (local row ids).

    Raises:
        ValueError: The file does not hold ``spec.rows`` vectors of width ``dim`` (a shard file of another build).
    """
    root = Path(spec.index_dir)
    if spec.file is not None:
        backend = FaissBackend.load(root / spec.file, gpu=gpu, search_params=search_params)
        where = root / spec.file
    else:
        import numpy as np

        faiss = import_faiss("Loading a shard")
        vectors = np.load(root / EMBEDDINGS_FILE, mmap_mode="r")
        index = faiss.IndexFlatIP(int(vectors.shape[1]))
        step = 1 << 16
        for s in range(spec.start, spec.stop, step):
            index.add(np.ascontiguousarray(vectors[s : min(s + step, spec.stop)], dtype=np.float32))
        del vectors
        if gpu:
            tmp = FaissBackend(index)
            backend = _to_gpu(tmp)
        else:
            backend = FaissBackend(index)
        where = root / EMBEDDINGS_FILE
    if backend.ntotal != spec.rows or (dim is not None and backend.dim != dim):
        raise ValueError(
            f"{where} holds {backend.ntotal} vectors of width {backend.dim}, but {spec.describe()} has {spec.rows} "
            f"rows of width {dim}; the shard file comes from another build. Rebuild the index: python -m "
            f"retriever_server build ... --out {root} --shards {spec.count}."
        )
    return backend


def _to_gpu(backend):
    if not faiss_has_gpu():
        raise RuntimeError("backend 'faiss-gpu' needs faiss built with GPU support and a visible GPU.")
    faiss = import_faiss()
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = True
    return FaissBackend(faiss.index_cpu_to_all_gpus(backend.index, co=options), name="faiss-gpu", device="cuda")


# ---- merge -----------------------------------------------------------------------------------------------------------


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard top-k lists into one.

    Args:
        parts: ``(scores, rows)`` per shard, float32 / int64 ``[n, >= 0]``, rows global; row ``-1`` is no hit.
        k: Hits per query.

    Returns:
        ``(scores, rows)`` ``[n, k]``: highest score first, equal scores by row id, highest first (faiss's Flat
        order); padded with row ``-1`` and score ``-FLT_MAX`` where fewer than ``k`` hits exist.
    """
    import numpy as np

    n = parts[0][0].shape[0]
    scores = np.concatenate([np.asarray(s, dtype=np.float32).reshape(n, -1) for s, _ in parts], axis=1)
    rows = np.concatenate([np.asarray(r, dtype=np.int64).reshape(n, -1) for _, r in parts], axis=1)
    missing = rows < 0
    keyed = np.where(missing, -np.inf, scores)
    # lexsort: the last key is the primary one; negated to sort descending
    order = np.lexsort((-rows, -keyed), axis=1)[:, :k]
    out_s = np.take_along_axis(scores, order, axis=1)
    out_r = np.take_along_axis(rows, order, axis=1)
    gone = np.take_along_axis(missing, order, axis=1)
    out_s[gone], out_r[gone] = MISSING_SCORE, -1
    if out_s.shape[1] < k:
        pad = k - out_s.shape[1]
        out_s = np.pad(out_s, ((0, 0), (0, pad)), constant_values=MISSING_SCORE)
        out_r = np.pad(out_r, ((0, 0), (0, pad)), constant_values=-1)
    return out_s.astype(np.float32, copy=False), out_r


def globalize(rows: np.ndarray, start: int) -> np.ndarray:
    """Local shard rows to global rows (``-1`` stays ``-1``)."""
    import numpy as np

    return np.where(rows >= 0, rows + start, -1).astype(np.int64, copy=False)


class ShardedBackend:
    """Every shard loaded in this process, searched in turn and merged (a sharded folder without Ray)."""

    def __init__(self, shards: list[tuple[ShardSpec, Any]]):
        self._shards = shards
        first = shards[0][1]
        self.name = f"{first.name} x{len(shards)} shards"
        self.device = first.device

    @classmethod
    def load(cls, specs: list[ShardSpec], *, gpu: bool = False, search_params: str | None = None) -> ShardedBackend:
        loaded = []
        for spec in specs:
            backend = load_shard(spec, gpu=gpu, search_params=search_params)
            loaded.append((spec, backend))
            if backend.dim != loaded[0][1].dim:
                raise ValueError(f"{spec.describe()} holds {backend.dim}-d vectors, shard 0 {loaded[0][1].dim}-d.")
        return cls(loaded)

    @property
    def ntotal(self) -> int:
        return sum(b.ntotal for _, b in self._shards)

    @property
    def dim(self) -> int:
        return self._shards[0][1].dim

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        parts = []
        for spec, backend in self._shards:
            scores, rows = backend.search(queries, k)
            parts.append((scores, globalize(rows, spec.start)))
        return merge_topk(parts, int(k))


def shard_bytes(spec: ShardSpec) -> int:
    """Bytes of a shard's index once loaded: its file's size, or its rows of ``embeddings.npy`` as a flat index."""
    if spec.file is not None:
        return (Path(spec.index_dir) / spec.file).stat().st_size
    import numpy as np

    dim = int(np.load(Path(spec.index_dir) / EMBEDDINGS_FILE, mmap_mode="r").shape[1])
    return spec.rows * dim * 4
