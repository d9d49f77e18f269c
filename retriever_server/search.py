"""Search backends: maximum inner product over passage embeddings, ``search(queries [n, d], k) -> (scores, rows)``.

=============  ===========================================================================================
backend        what it runs
=============  ===========================================================================================
``faiss``      any faiss index on CPU (``Flat`` exact; ``HNSW64``, ``IVF...,PQ...`` approximate).
``faiss-gpu``  the same index cloned onto every visible GPU (``shard=True``, fp16 storage), when the
               installed faiss has GPU support.
``torch``      exact matmul + top-k with torch, embeddings sharded over the visible GPUs in fp16 (CPU: fp32).
               Needs no faiss-gpu build (a common installation pain); reads vectors from ``embeddings.npy``
               or from a Flat faiss index.
=============  ===========================================================================================

Decisions:

- ``faiss.cvar.distance_compute_blas_threshold`` is lowered to :data:`BLAS_THRESHOLD` when faiss is imported here:
  faiss 1.15.1 defaults to 128000 queries, so a 64-query Flat search skips the BLAS matrix-multiply path, which is
  several times faster from about 4 queries on (figures in ``benchmarks/README.md``; ``benchmarks/retriever_load.py``
  prints the comparison on the machine at hand).
- Rows faiss reports as ``-1`` (``k`` larger than the index, IVF lists too sparse) are returned as ``-1`` and
  dropped by the caller; ``k`` is never an error here.
- The torch backend scans ``block_rows`` rows at a time and keeps a running top-k, so temporary memory stays
  ``n_queries x block_rows`` however large the index; shards' top-k lists are merged on the first device.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ._deps import require

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

BLAS_THRESHOLD = 4
"""Queries per search from which faiss uses BLAS (sgemm) for Flat distances. See the module docstring."""

BACKENDS = ("auto", "faiss", "faiss-gpu", "torch")


def import_faiss(feature: str = "Searching an index"):
    """Import faiss with an install hint and the BLAS-threshold fix applied (idempotent)."""
    faiss = require("faiss", feature)
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    return faiss


def faiss_reason(error: Exception) -> str:
    """The readable part of a faiss C++ error: its last line without the ``Error in <function> at <file>:<line>:``
    prefix.

    >>> faiss_reason(RuntimeError("Error in void f() at /project/faiss/x.cpp:64: Error: 'n >= k' failed: too few"))
    "Error: 'n >= k' failed: too few"
    """
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return re.sub(r"^Error in .*? at \S+?:\d+: ", "", lines[-1])[:300]


COUNT_PARAMS = ("nprobe", "efSearch", "quantizer_nprobe", "quantizer_efSearch")
"""faiss search parameters that count lists or graph nodes: whole numbers of at least 1. faiss itself takes
``nprobe=-5`` and ``nprobe=0`` and then fails every search."""


def set_search_params(index: Any, search_params: str) -> None:
    """Apply a faiss ``ParameterSpace`` string (``nprobe=64``, ``efSearch=128``, comma-separated) to ``index``.

    Raises:
        ValueError: An item that is not ``name=number``, a count (:data:`COUNT_PARAMS`) below 1 or not whole, a
            negative value, or a parameter this index does not have (faiss's reason, the index type and what to pass).
    """
    faiss = import_faiss()
    hint = "pass e.g. nprobe=64 for an IVF index or efSearch=128 for HNSW, comma-separated (--search-params)"
    for item in search_params.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name or not math.isfinite(number):
            raise ValueError(f"search parameter {item.strip()!r} is not name=number; {hint}.")
        if name in COUNT_PARAMS and (number < 1 or number != int(number)):
            raise ValueError(
                f"search parameter {name}={value} must be a whole number of at least 1 (faiss would take it and then "
                f"fail every search); {hint}."
            )
        if number < 0:
            raise ValueError(f"search parameter {name}={value} is negative; {hint}.")
    try:
        faiss.ParameterSpace().set_index_parameters(index, search_params)
    except RuntimeError as e:
        kind = type(faiss.downcast_index(index)).__name__
        raise ValueError(
            f"faiss cannot set {search_params!r} on this {kind} ({faiss_reason(e)}): nprobe applies to IVF indexes, "
            f"efSearch to HNSW, and a Flat index takes none; drop --search-params, or {hint}."
        ) from None


def faiss_has_gpu() -> bool:
    """Whether the importable faiss was built with GPU support and sees at least one GPU."""
    try:
        faiss = import_faiss()
    except ImportError:
        return False
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class SearchBackend(Protocol):
    """What the retriever needs from a backend."""

    name: str
    device: str

    @property
    def ntotal(self) -> int:
        """Number of indexed passages."""

    @property
    def dim(self) -> int:
        """Embedding width."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows for each query.

        Args:
            queries: float32 ``[n, dim]``.
            k: Hits per query (>= 1).

        Returns:
            ``(scores, rows)``: float32 and int64 ``[n, k]``, best first; missing hits have row ``-1``.
        """


@dataclass
class FaissBackend:
    """A faiss index on CPU, or cloned onto the visible GPUs (``faiss-gpu``)."""

    index: Any
    name: str = "faiss"
    device: str = "cpu"
    threads: int = 0
    """OpenMP threads for each search (0: faiss's count when the backend is made, normally one per core).

    Set before every search because OpenMP's thread count belongs to the calling thread and torch shares it: the
    encoder runs a single query on one torch thread, which left the search that followed on one thread too (a
    20k-passage Flat search, one query: 5.2 ms instead of 3.1 ms on 2 cores)."""

    def __post_init__(self) -> None:
        self._faiss = import_faiss()
        if self.threads <= 0:
            self.threads = self._faiss.omp_get_max_threads()

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, gpu: bool = False, search_params: str | None = None):
        """Read a faiss index file; optionally move it to all visible GPUs (sharded, fp16).

        Args:
            path: A ``.faiss`` / ``.index`` file (ours, or Search-R1's ``e5_Flat.index``).
            gpu: Clone to GPUs; requires faiss with GPU support.
            search_params: faiss ``ParameterSpace`` string such as ``"nprobe=64"`` or ``"efSearch=128"``.

        Raises:
            RuntimeError: ``gpu`` was requested but faiss has no GPU support here.
            ValueError: The file is not a faiss index, or ``search_params`` do not fit it (:func:`set_search_params`).
        """
        faiss = import_faiss()
        if not Path(path).is_file():
            raise FileNotFoundError(f"faiss index {path} does not exist (or is a folder); pass the index file.")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as e:
            raise ValueError(
                f"faiss cannot read {path} ({faiss_reason(e)}): the file is truncated, damaged or not a faiss index. "
                "Rebuild it (python -m retriever_server build ... --overwrite)."
            ) from None
        if search_params:
            set_search_params(index, search_params)
        if not gpu:
            return cls(index)
        if not faiss_has_gpu():
            raise RuntimeError(
                "backend 'faiss-gpu' needs faiss built with GPU support and a visible GPU; install faiss-gpu "
                "(conda-forge / pytorch channels), or use --backend torch (exact GPU search without faiss-gpu)."
            )
        options = faiss.GpuMultipleClonerOptions()
        options.shard = True
        options.useFloat16 = True
        gpu_index = faiss.index_cpu_to_all_gpus(index, co=options)
        return cls(gpu_index, name="faiss-gpu", device=f"cuda x{faiss.get_num_gpus()}")

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        if self.device == "cpu":
            self._faiss.omp_set_num_threads(self.threads)
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), int(k))
        return scores, rows


class TorchBackend:
    """Exact inner-product search with torch: ``q @ E^T`` + top-k, embeddings sharded over devices.

    Args:
        vectors: float32 ``[n, dim]`` (a memory map is fine: it is copied to the devices block by block).
        devices: Torch devices to shard rows over, e.g. ``["cuda:0", "cuda:1"]`` or ``["cpu"]``.
        fp16: Store embeddings and run the matmul in float16 (default: on CUDA).
        block_rows: Rows scored per matmul (bounds temporary memory to ``n_queries x block_rows``).
    """

    name = "torch"

    def __init__(self, vectors, devices: list[str], *, fp16: bool | None = None, block_rows: int = 1 << 20):
        torch = require("torch", "The torch search backend")
        if not devices:
            raise ValueError("TorchBackend needs at least one device, e.g. ['cuda:0'] or ['cpu'].")
        self._torch = torch
        self._n, self._dim = int(vectors.shape[0]), int(vectors.shape[1])
        on_cuda = devices[0].startswith("cuda")
        self.fp16 = on_cuda if fp16 is None else fp16
        dtype = torch.float16 if self.fp16 else torch.float32
        self.block_rows = block_rows
        self.device = ",".join(devices)
        per_shard = -(-self._n // len(devices))
        self._shards: list[tuple[int, Any]] = []
        copy_rows = 1 << 18  # host -> device copies of 256k rows at a time keep host memory bounded
        for j, dev in enumerate(devices):
            start, stop = j * per_shard, min((j + 1) * per_shard, self._n)
            if start >= stop:
                continue
            shard = torch.empty((stop - start, self._dim), dtype=dtype, device=dev)
            for s in range(start, stop, copy_rows):
                e = min(s + copy_rows, stop)
                shard[s - start : e - start] = torch.from_numpy(vectors[s:e].astype("float32", copy=True)).to(dev)
            self._shards.append((start, shard))
        self._dtype = dtype

    @classmethod
    def from_files(
        cls,
        index_dir_or_file: str | os.PathLike[str],
        devices: list[str] | None = None,
        *,
        fp16: bool | None = None,
        block_rows: int = 1 << 20,
    ) -> TorchBackend:
        """Load vectors from an index directory's ``embeddings.npy``, or from a Flat faiss index file.

        Raises:
            ValueError: The file holds a non-Flat faiss index (its vectors are compressed or absent).
        """
        import numpy as np

        path = Path(index_dir_or_file)
        devices = devices or default_torch_devices()
        if path.is_dir():
            return cls(np.load(path / "embeddings.npy", mmap_mode="r"), devices, fp16=fp16, block_rows=block_rows)
        faiss = import_faiss("Reading a faiss index for the torch backend")
        index = faiss.read_index(str(path))
        if not isinstance(index, faiss.IndexFlat):
            raise ValueError(
                f"The torch backend needs exact vectors, but {path} is a {type(index).__name__}; use --backend "
                "faiss / faiss-gpu for approximate indexes, or a Flat index."
            )
        vectors = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
        return cls(vectors, devices, fp16=fp16, block_rows=block_rows)

    @property
    def ntotal(self) -> int:
        return self._n

    @property
    def dim(self) -> int:
        return self._dim

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        torch = self._torch
        k_eff = min(int(k), self._n)
        best_scores, best_rows = [], []
        with torch.inference_mode():
            for start, shard in self._shards:
                q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(shard.device, self._dtype)
                run_s, run_i = None, None
                for b in range(0, shard.shape[0], self.block_rows):
                    block = shard[b : b + self.block_rows]
                    scores = (q @ block.T).float()
                    s, i = torch.topk(scores, min(k_eff, block.shape[0]), dim=1)
                    i = i + (start + b)
                    if run_s is not None:
                        s, pick = torch.topk(torch.cat([run_s, s], dim=1), min(k_eff, run_s.shape[1] + s.shape[1]))
                        i = torch.gather(torch.cat([run_i, i], dim=1), 1, pick)
                    run_s, run_i = s, i
                best_scores.append(run_s.to(self._shards[0][1].device))
                best_rows.append(run_i.to(self._shards[0][1].device))
            scores = torch.cat(best_scores, dim=1)
            rows = torch.cat(best_rows, dim=1)
            if len(best_scores) > 1:
                scores, pick = torch.topk(scores, k_eff, dim=1)
                rows = torch.gather(rows, 1, pick)
        out_s = scores.float().cpu().numpy()
        out_r = rows.cpu().numpy().astype(np.int64)
        if k_eff < k:  # pad like faiss: missing hits are row -1
            pad = k - k_eff
            out_s = np.pad(out_s, ((0, 0), (0, pad)), constant_values=-np.inf)
            out_r = np.pad(out_r, ((0, 0), (0, pad)), constant_values=-1)
        return out_s, out_r


def default_torch_devices() -> list[str]:
    """All visible CUDA devices, or ``["cpu"]``."""
    torch = require("torch", "The torch search backend")
    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def resolve_backend(backend: str, *, index_type: str = "Flat", has_embeddings: bool = True) -> str:
    """Turn ``auto`` into a concrete backend and check the choice is possible.

    ``auto``: ``faiss-gpu`` when faiss has GPU support; else ``torch`` on a CUDA machine for exact (Flat) indexes
    with vectors available; else ``faiss`` (CPU).

    Raises:
        ValueError: Unknown backend, or ``torch`` for an approximate index.
    """
    if backend not in BACKENDS:
        raise ValueError(f"Unknown search backend {backend!r}; choose one of {list(BACKENDS)} (--backend).")
    if backend == "auto":
        if faiss_has_gpu():
            return "faiss-gpu"
        try:
            cuda = require("torch", "Searching").cuda.is_available()
        except ImportError:
            cuda = False
        if cuda and index_type == "Flat" and has_embeddings:
            return "torch"
        return "faiss"
    if backend == "torch" and index_type != "Flat":
        raise ValueError(
            f"--backend torch runs exact search and needs a Flat index, but this index is {index_type!r}; use "
            "--backend faiss or faiss-gpu."
        )
    return backend
