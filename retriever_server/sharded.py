"""Sharded search: an index split into contiguous row ranges, searched shard by shard and merged into one top-k.

Two ways to serve a sharded index directory (``python -m retriever_server build ... --shards N``):

- in one process: :class:`ShardedBackend` searches every shard file in turn and merges (``serve`` without ``--ray``,
  ``query --index``); this holds every shard in the one process, like the unsharded index;
- on Ray Serve (``serve --ray``, ``serve run retriever_server.ray_app:build_app index=DIR``): one deployment per
  shard that loads only its rows, an encoder deployment (the GPU goes there), and an HTTP ingress that
  micro-batches requests, encodes each batch once, sends the batch's query vectors to every shard at once
  through deployment handles, and merges. See :func:`build_sharded_application`.

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
- Failures: Serve replaces a replica that dies, and its router holds calls to a deployment without live replicas
  until the replacement is up, so a restart normally shows as a wait. Each shard (or encoder) call waits at most
  ``shard_timeout_s``; one that times out or fails because its replica died or is unreachable is retried with
  exponential backoff (100 ms doubling to 2 s) while the outage is younger than ``shard_retry_s``. Once it is
  older, every call makes one short attempt and then fails with :class:`ShardUnavailable`, an HTTP 503 that names
  the shard and asks the client to retry; the first call that succeeds ends the outage. A result is merged only
  when every shard answered, so a partial top-k is never returned. Errors raised by the search itself (a bad
  query array) are not retried.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._deps import require
from .protocol import RequestError
from .threads import in_compute_thread, load_for_serving, serving_process

if TYPE_CHECKING:
    import numpy as np

    from .app import ServerConfig
    from .ray_app import IndexSource, RayServeConfig
    from .retriever import LoadOptions

logger = logging.getLogger(__name__)

SHARD_START_DELAY_ENV = "RETRIEVER_SERVER_TEST_SHARD_START_DELAY_S"
"""Fault injection for tests: a shard replica waits this many seconds before loading (a slow restart, as of a large
shard), set in the environment of the Ray workers."""

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
    from .build import EMBEDDINGS_FILE, check_index_dir, check_shard_count, shard_alignment, shard_layout, shard_ranges

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
    from .build import EMBEDDINGS_FILE
    from .search import FaissBackend, import_faiss

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
    from .search import FaissBackend, faiss_has_gpu, import_faiss

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


# ---- Ray Serve -------------------------------------------------------------------------------------------------------


@dataclass
class ShardedConfig:
    """Ray Serve settings of the sharded app (``serve --ray --shards N``; ``build_app`` keys of the same names)."""

    shards: int | None = None
    """Shards to serve (``None``: the index folder's own; see :func:`plan_shards`)."""
    cpus_per_shard: float = 1.0
    """CPUs reserved per shard replica (Ray also sets the replica's OpenMP threads, i.e. faiss's, from it)."""
    gpus_per_shard: float = 0.0
    """GPUs per shard replica (with ``backend=faiss-gpu``; the encoder's GPUs are ``gpus_per_replica``)."""
    shard_replicas: int = 1
    """Replicas per shard (each holds the shard's rows; more replicas = more search throughput and no outage while
    one restarts)."""
    cpus_per_ingress: float = 0.5
    """CPUs reserved per ingress replica (HTTP, batching, merge, passage rendering)."""
    shard_retry_s: float = 20.0
    """How long an outage of a shard or the encoder is retried before requests get 503."""
    shard_timeout_s: float = 60.0
    """Longest wait for one call to a shard or the encoder. Serve holds calls to a deployment whose replica died
    until its replacement is up, so a restart shows as a wait; a wait longer than this counts as an outage."""
    health_check_period_s: float = 2.0
    """How often Serve checks the shard and encoder replicas (a replica that died is replaced after its check)."""
    reserve_memory: bool = True
    """Reserve each shard replica's memory with Ray (``ray_actor_options.memory``: its index bytes + 512 MiB), so
    Ray places shards only where their vectors fit, i.e. spreads them over nodes, instead of stacking them on one."""


SHARDED_FIELDS = {f.name for f in dataclasses.fields(ShardedConfig)}


class ShardUnavailable(RequestError):
    """A shard (or the encoder) did not answer within the retry budget: HTTP 503, no partial result."""

    def __init__(self, what: str, reason: str, retry_s: float):
        super().__init__(
            503,
            f"{what} did not answer for {retry_s:g} s ({reason}); its replica is down or being restarted by Ray "
            "Serve. No partial result is returned: retry the request in a few seconds.",
            type="shard_unavailable",
        )


def _retryable(error: BaseException) -> bool:
    """Whether a failed deployment call may succeed on another try (a dead, restarting or slow replica)."""
    import ray.exceptions as rex
    from ray.serve import exceptions as sex

    kinds = (
        rex.RayActorError,
        rex.WorkerCrashedError,
        rex.NodeDiedError,
        rex.ObjectLostError,
        rex.TaskCancelledError,
        sex.BackPressureError,
        sex.DeploymentUnavailableError,
        sex.ReplicaUnavailableError,
        TimeoutError,
    )
    return isinstance(error, kinds) and not isinstance(error, rex.RayTaskError)


class Fanout:
    """Calls to the encoder and the shard deployments, with the outage rule of the module docstring.

    Args:
        encoder: The encoder deployment's handle.
        shards: ``(spec, handle)`` per shard.
        retry_s: Outage budget (``shard_retry_s``).
        timeout_s: Longest wait for one call (``shard_timeout_s``).
        retryable: Which exceptions are retried (default: Ray's dead/unavailable replica errors and timeouts).
    """

    MIN_ATTEMPT_S = 1.0
    FIRST_BACKOFF_S = 0.1
    MAX_BACKOFF_S = 2.0

    def __init__(
        self,
        encoder: Any,
        shards: list[tuple[ShardSpec, Any]],
        *,
        retry_s: float = 20.0,
        timeout_s: float = 60.0,
        retryable: Callable[[BaseException], bool] = _retryable,
    ):
        self.encoder = encoder
        self.shards = shards
        self.retry_s = retry_s
        self.timeout_s = timeout_s
        self.retryable = retryable
        self.outage_since: float | None = None
        self.counters = {"calls": 0, "retries": 0, "unavailable": 0}
        self._lock = threading.Lock()

    def encode(self, texts: list[str], kind: str) -> np.ndarray:
        return self._gather({"the encoder": lambda: self.encoder.encode.remote(texts, kind)})["the encoder"]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        calls = {
            spec.describe(): functools.partial(lambda h: h.search.remote(queries, int(k)), handle)
            for spec, handle in self.shards
        }
        results = self._gather(calls)
        return merge_topk([results[spec.describe()] for spec, _ in self.shards], int(k))

    def _gather(self, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run every call concurrently; retry failed ones per the outage rule; all results or an exception."""
        with self._lock:
            self.counters["calls"] += 1
        results: dict[str, Any] = {}
        pending = dict(calls)
        backoff = self.FIRST_BACKOFF_S
        while True:
            now = time.monotonic()
            since = self.outage_since
            budget = self.timeout_s if since is None else max(self.MIN_ATTEMPT_S, since + self.retry_s - now)
            deadline = now + budget
            responses = {name: call() for name, call in pending.items()}
            failed: dict[str, BaseException] = {}
            for name, response in responses.items():
                try:
                    results[name] = response.result(timeout_s=max(0.01, deadline - time.monotonic()))
                except Exception as e:
                    if not self.retryable(e):
                        for other in responses.values():
                            _cancel(other)
                        raise
                    failed[name] = e
                    _cancel(response)
            if not failed:
                if self.outage_since is not None:
                    logger.info("Shards answer again after %.1f s", time.monotonic() - self.outage_since)
                self.outage_since = None
                return results
            now = time.monotonic()
            if self.outage_since is None:
                self.outage_since = now
                logger.warning("Outage: %s", "; ".join(f"{n}: {type(e).__name__}" for n, e in failed.items()))
            if now - self.outage_since >= self.retry_s:
                with self._lock:
                    self.counters["unavailable"] += 1
                name, error = next(iter(failed.items()))
                reason = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
                raise ShardUnavailable(name[0].upper() + name[1:], reason, self.retry_s)
            with self._lock:
                self.counters["retries"] += 1
            time.sleep(min(backoff, max(0.0, self.outage_since + self.retry_s - now)))
            backoff = min(2 * backoff, self.MAX_BACKOFF_S)
            pending = {name: calls[name] for name in failed}


def _cancel(response: Any) -> None:
    try:
        response.cancel()
    except Exception:  # already finished, or a handle type without cancel
        pass


@dataclass
class EncoderInfo:
    """What the HTTP app and the batch runner read of an encoder (the model itself runs in its deployment)."""

    config: Any
    dim: int
    device: str = "ray deployment"
    dtype_name: str = "see the encoder deployment"

    def token_counter(self) -> Any:
        """A :class:`~retriever_server.encoders.TokenCounter` from the model's tokenizer (the weights stay in the
        encoder deployment): the app counts each request's tokens here."""
        from .encoders import TokenCounter

        return TokenCounter.load(self.config)


class RemoteRetriever:
    """The ingress's retriever: the passage store here, encoding and search in deployments (through a
    :class:`Fanout`). Has what :func:`~retriever_server.batching.run_jobs` and
    :func:`~retriever_server.app.create_app` use of a :class:`~retriever_server.retriever.Retriever`."""

    def __init__(self, store: Any, encoder: EncoderInfo, fanout: Fanout, info: dict[str, Any]):
        self.store = store
        self.encoder = encoder
        self.fanout = fanout
        self.info = info

    def encode_queries(self, queries: list[str], kind: str = "query", token_ids: Any = None) -> np.ndarray:
        """The encoder deployment's embeddings; it tokenizes the texts itself (``token_ids`` is not sent along)."""
        return self.fanout.encode(queries, kind)

    def search(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.fanout.search(embeddings, k)

    def describe(self) -> dict[str, Any]:
        from .retriever import health_fields

        return health_fields(self.info, self.store, self.encoder)


def _omp_threads() -> int:
    from .search import import_faiss

    return int(import_faiss().omp_get_max_threads())


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@functools.cache
def deployment_classes() -> dict[str, type]:
    """The Serve deployment classes ``shard``, ``encoder`` and ``ingress`` (``ray.serve`` is imported on first use)."""
    serve = require("ray.serve", "Serving with Ray")

    class ShardDeployment:
        """One shard: its rows only; ``search`` returns global row ids."""

        def __init__(self, spec: dict, gpu: bool = False, search_params: str | None = None):
            serving_process()
            self.spec = ShardSpec(**spec)
            time.sleep(float(os.environ.get(SHARD_START_DELAY_ENV, "0") or 0))
            t0 = time.perf_counter()
            self.backend = load_shard(self.spec, gpu=gpu, search_params=search_params)
            self.load_seconds = time.perf_counter() - t0
            logger.info("Loaded %s in %.1f s", self.spec.describe(), self.load_seconds)

        def search(self, queries, k: int):
            scores, rows = self.backend.search(queries, int(k))
            return scores, globalize(rows, self.spec.start)

        def info(self) -> dict[str, Any]:
            return {
                "shard": self.spec.number,
                "rows": [self.spec.start, self.spec.stop],
                "pid": os.getpid(),
                "rss_bytes": _rss_bytes(),
                "load_seconds": round(self.load_seconds, 3),
                "backend": self.backend.name,
                "threads": _omp_threads(),
            }

    class EncoderDeployment:
        """The query encoder (where the GPU goes)."""

        def __init__(self, encoder_config: dict):
            serving_process()
            from .encoders import Encoder, EncoderConfig

            # Loaded and run in one thread (retriever_server/threads.py); Serve runs sync methods on a thread pool.
            self.encoder = load_for_serving(Encoder.load, EncoderConfig(**encoder_config))

        def encode(self, texts: list[str], kind: str):
            return in_compute_thread(self.encoder.encode, texts, kind)

        def info(self) -> dict[str, Any]:
            return {"pid": os.getpid(), "device": self.encoder.device, "dtype": self.encoder.dtype_name}

    @serve.ingress()
    class ShardedIngress:
        """HTTP: the FastAPI app over a :class:`RemoteRetriever`, with the project's micro-batcher."""

        def __init__(
            self,
            encoder,
            shards: list,
            shard_specs: list[dict],
            index_dir: str,
            encoder_config: dict,
            server: dict,
            fanout: dict,
        ):
            from .app import ServerConfig
            from .build import CORPUS_DIR, META_FILE, _read_json
            from .corpus_store import CorpusStore
            from .encoders import EncoderConfig

            specs = [ShardSpec(**s) for s in shard_specs]
            self.config = ServerConfig(**server)
            meta = _read_json(Path(index_dir) / META_FILE)
            self.fanout = Fanout(encoder, list(zip(specs, shards, strict=True)), **fanout)
            info = {
                "index": index_dir,
                "index_type": meta["index_type"],
                "backend": f"ray serve, {len(specs)} shard deployment(s)",
                "search_device": "shard deployments",
                "shards": [[s.start, s.stop] for s in specs],
            }
            encoder_info = EncoderInfo(EncoderConfig(**encoder_config), int(meta["dim"]))
            self.retriever = RemoteRetriever(
                CorpusStore.open(Path(index_dir) / CORPUS_DIR), encoder_info, self.fanout, info
            )

        def __serve_build_asgi_app__(self):
            from .app import create_app

            return create_app(self.retriever, self.config)

    return {"shard": ShardDeployment, "encoder": EncoderDeployment, "ingress": ShardedIngress}


def encoder_config_for(index_dir: str | os.PathLike[str], options: LoadOptions):
    """The index's encoder settings with the load options' overrides (as :meth:`Retriever.from_index_dir`)."""
    from .build import META_FILE, _read_json
    from .encoders import EncoderConfig

    return options.encoder_config(EncoderConfig(**_read_json(Path(index_dir) / META_FILE)["encoder"]))


def build_sharded_application(
    source: IndexSource,
    options: LoadOptions | None = None,
    server: ServerConfig | None = None,
    ray_config: RayServeConfig | None = None,
    sharded: ShardedConfig | None = None,
):
    """A bound Serve application: ingress ``{name}``, encoder ``{name}-encoder``, shards ``{name}-shard-{i}``.

    ``ray_config.replicas`` / ``cpus_per_replica`` / ``gpus_per_replica`` size the encoder deployment (the ingress
    runs one replica per ``replicas`` too, on ``cpus_per_ingress``); shards take ``sharded``'s settings.

    Raises:
        ValueError: ``source.index`` is not an index directory, or cannot be served as ``sharded.shards`` shards.
    """
    from .app import ServerConfig
    from .ray_app import RayServeConfig
    from .retriever import LoadOptions
    from .search import resolve_backend

    serve = require("ray.serve", "Serving with Ray")
    options = options or LoadOptions()
    server = server or ServerConfig()
    ray_config = ray_config or RayServeConfig()
    sharded = sharded or ShardedConfig()
    if not Path(source.index).is_dir():
        raise ValueError(
            f"Sharded serving needs an index directory made by `python -m retriever_server build` (--shards N); "
            f"{source.index} is not one."
        )
    specs = plan_shards(source.index, sharded.shards)
    backend = options.backend
    if backend in ("auto", "torch"):  # shards run faiss; auto picks faiss-gpu only where faiss has GPUs
        backend = resolve_backend("faiss" if backend == "torch" else "auto", index_type="HNSW")
    classes = deployment_classes()
    health = {"health_check_period_s": sharded.health_check_period_s}
    shard_handles = []
    for spec in specs:
        actor = {"num_cpus": sharded.cpus_per_shard, "num_gpus": sharded.gpus_per_shard}
        if sharded.reserve_memory:
            actor["memory"] = shard_bytes(spec) + (512 << 20)
        deployment = serve.deployment(
            classes["shard"],
            name=f"{ray_config.name}-shard-{spec.number}",
            num_replicas=sharded.shard_replicas,
            max_ongoing_requests=ray_config.max_ongoing_requests,
            ray_actor_options=actor,
            **health,
        )
        shard_handles.append(deployment.bind(dataclasses.asdict(spec), backend == "faiss-gpu", options.search_params))
    encoder_config = encoder_config_for(source.index, options)
    encoder = serve.deployment(
        classes["encoder"],
        name=f"{ray_config.name}-encoder",
        num_replicas=ray_config.replicas,
        max_ongoing_requests=ray_config.max_ongoing_requests,
        ray_actor_options={"num_cpus": ray_config.cpus_per_replica, "num_gpus": ray_config.gpus_per_replica},
        **health,
    ).bind(encoder_config.to_dict())
    ingress = serve.deployment(
        classes["ingress"],
        name=ray_config.name,
        num_replicas=ray_config.replicas,
        max_ongoing_requests=ray_config.max_ongoing_requests,
        ray_actor_options={"num_cpus": sharded.cpus_per_ingress},
    )
    fanout = {"retry_s": sharded.shard_retry_s, "timeout_s": sharded.shard_timeout_s}
    return ingress.bind(
        encoder,
        shard_handles,
        [dataclasses.asdict(s) for s in specs],
        str(source.index),
        encoder_config.to_dict(),
        server.to_dict(),
        fanout,
    )


def shard_bytes(spec: ShardSpec) -> int:
    """Bytes of a shard's index once loaded: its file's size, or its rows of ``embeddings.npy`` as a flat index."""
    if spec.file is not None:
        return (Path(spec.index_dir) / spec.file).stat().st_size
    import numpy as np

    from .build import EMBEDDINGS_FILE

    dim = int(np.load(Path(spec.index_dir) / EMBEDDINGS_FILE, mmap_mode="r").shape[1])
    return spec.rows * dim * 4


def wants_sharding(source: IndexSource, sharded: ShardedConfig) -> bool:
    """Whether ``serve --ray`` should place the sharded app: ``shards`` was given, or the folder is sharded."""
    from .build import META_FILE, _read_json

    if sharded.shards is not None:
        return True
    meta_path = Path(source.index) / META_FILE
    return meta_path.is_file() and _read_json(meta_path).get("shards", 1) > 1
