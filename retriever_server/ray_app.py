"""Ray Serve: the deployments and app builders, for an index in one replica or split into shard deployments.

Three ways to run it:

- CLI: ``python -m retriever_server serve --index DIR --ray --replicas 2 --gpus-per-replica 1``;
- ``serve run retriever_server.ray_app:build_app index=DIR replicas=2`` (or an app entry in a ``serve deploy``
  config with ``import_path: retriever_server.ray_app:build_app`` and ``args: {index: DIR, ...}``);
  ``shards=N`` (or an index folder built with ``--shards``) places the sharded app instead (below);
- Python: ``serve.run(build_app({"index": DIR}))``.

The one-replica app (:func:`build_application`, the design card's "Ray-served retrieval actor hosting the E5 index"):
each replica loads the retriever and mounts :func:`retriever_server.app.create_app` through ``@serve.ingress()`` +
``__serve_build_asgi_app__`` (the app is built inside the replica, so nothing heavy is pickled). Each replica schedules
its requests with the standalone server's :class:`~retriever_server.batching.MicroBatcher` (no wait when idle,
continuous batching, large requests split into micro-batches interleaved with the others), running encode + search in
one worker thread per replica; Ray Serve's ``serve.batch`` is not used, since it waits a fixed time for every batch and
cannot split a request. ``max_ongoing_requests`` defaults to 256 (Ray's default of 5 would cap every batch at 5
requests per replica).

The sharded app (:func:`build_sharded_application`) serves a folder built with ``build --shards N`` from the parts of
:mod:`retriever_server.sharded`: one deployment per shard that loads only its rows, an encoder deployment (the GPU
goes there), and an HTTP ingress that micro-batches requests, encodes each batch once, sends the batch's query
vectors to every shard at once through deployment handles (:class:`Fanout`), and merges
(:func:`~retriever_server.sharded.merge_topk`). Failures: Serve replaces a replica that dies, and its router holds
calls to a deployment without live replicas until the replacement is up, so a restart normally shows as a wait. Each
shard (or encoder) call waits at most ``shard_timeout_s``; one that times out or fails because its replica died or is
unreachable is retried with exponential backoff (100 ms doubling to 2 s) while the outage is younger than
``shard_retry_s``. Once it is older, every call makes one short attempt and then fails with
:class:`ShardUnavailable`, an HTTP 503 that names the shard and asks the client to retry; the first call that succeeds
ends the outage. A result is merged only when every shard answered, so a partial top-k is never returned. Errors
raised by the search itself (a bad query array) are not retried.

Behind Ray Serve every request takes the app's ASGI path (Serve's proxy runs its own HTTP server), so the fast POST
path of :mod:`retriever_server.fast_post` is not used here.

``ray.serve`` is imported only inside these functions, so ``import retriever_server.ray_app`` stays light.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._deps import require
from .app import ServerConfig, create_app, make_batcher
from .batching import Job, JobResult
from .build import CORPUS_DIR, META_FILE, _read_json
from .corpus_store import CorpusStore
from .encoders import Encoder, EncoderConfig, TokenCounter
from .protocol import RequestError
from .retriever import IndexSource, LoadOptions, health_fields, load_source
from .search import import_faiss, resolve_backend
from .sharded import ShardSpec, globalize, load_shard, merge_topk, plan_shards, shard_bytes
from .threads import in_compute_thread, load_for_serving, serving_process

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

SHARD_START_DELAY_ENV = "RETRIEVER_SERVER_TEST_SHARD_START_DELAY_S"
"""Fault injection for tests: a shard replica waits this many seconds before loading (a slow restart, as of a large
shard), set in the environment of the Ray workers."""


@dataclass
class RayServeConfig:
    """Ray Serve deployment settings."""

    replicas: int = 1
    """Number of replicas (each loads the encoder and the index)."""
    gpus_per_replica: float = 0.0
    """GPUs reserved per replica (``ray_actor_options.num_gpus``); fractions share a GPU."""
    cpus_per_replica: float = 1.0
    """CPUs reserved per replica (``ray_actor_options.num_cpus``)."""
    max_ongoing_requests: int = 256
    """Concurrent requests per replica; must exceed the batch size for batches to fill."""
    name: str = "retriever"
    """Serve application and deployment name."""
    route_prefix: str = "/"
    """HTTP route prefix (``/`` keeps the Search-R1 paths ``/retrieve``...)."""


def _replica_name(serve) -> str:
    try:
        return str(serve.get_replica_context().replica_id)
    except Exception:  # outside a replica, or a Ray version without replica_id
        return "unknown"


@functools.cache
def deployment_class() -> type:
    """The Serve deployment class (built on first use so ``ray.serve`` is imported lazily)."""
    serve = require("ray.serve", "Serving with Ray")

    @serve.ingress()
    class RetrieverDeployment:
        """One replica: a retriever, its :class:`~retriever_server.batching.MicroBatcher`, and the FastAPI app."""

        def __init__(self, source: dict, options: dict, server: dict):
            serving_process()
            self.config = ServerConfig(**server)
            self.retriever = load_for_serving(load_source, IndexSource(**source), LoadOptions(**options))
            self._batcher = make_batcher(self.retriever, self.config)

        async def submit(self, job: Job) -> JobResult:
            """The app's :class:`~retriever_server.batching.JobService` entry point."""
            return await self._batcher.submit(job)

        def stats(self) -> dict[str, Any]:
            stats = self._batcher.stats()
            stats["batching"]["implementation"] = "retriever_server.batching.MicroBatcher"
            return {**stats, "replica": _replica_name(serve)}

        def __serve_build_asgi_app__(self):
            return create_app(self.retriever, self.config, service=self)

    return RetrieverDeployment


def build_application(
    source: IndexSource,
    options: LoadOptions | None = None,
    server: ServerConfig | None = None,
    ray_config: RayServeConfig | None = None,
):
    """A bound Serve application (pass it to ``serve.run``).

    Args:
        source: Where replicas load the retriever from (paths must be readable on every node).
        options: Backend / device / fp16 options.
        server: Limits and batching (``host``/``port`` are ignored: Serve's HTTP proxy decides them).
        ray_config: Replicas and resources.
    """
    serve = require("ray.serve", "Serving with Ray")
    options = options or LoadOptions()
    server = server or ServerConfig()
    ray_config = ray_config or RayServeConfig()
    deployment = serve.deployment(
        deployment_class(),
        name=ray_config.name,
        num_replicas=ray_config.replicas,
        max_ongoing_requests=ray_config.max_ongoing_requests,
        ray_actor_options={"num_cpus": ray_config.cpus_per_replica, "num_gpus": ray_config.gpus_per_replica},
    )
    return deployment.bind(dataclasses.asdict(source), dataclasses.asdict(options), server.to_dict())


# ---- the sharded app -------------------------------------------------------------------------------------------------


@dataclass
class ShardedConfig:
    """Ray Serve settings of the sharded app (``serve --ray --shards N``; ``build_app`` keys of the same names)."""

    shards: int | None = None
    """Shards to serve (``None``: the index folder's own; see :func:`~retriever_server.sharded.plan_shards`)."""
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


SHARDED_FIELDS = {f.name for f in fields(ShardedConfig)}


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
        return health_fields(self.info, self.store, self.encoder)


def _omp_threads() -> int:
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
            return create_app(self.retriever, self.config)

    return {"shard": ShardDeployment, "encoder": EncoderDeployment, "ingress": ShardedIngress}


def encoder_config_for(index_dir: str | os.PathLike[str], options: LoadOptions):
    """The index's encoder settings with the load options' overrides (as :meth:`Retriever.from_index_dir`)."""
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


def wants_sharding(source: IndexSource, sharded: ShardedConfig) -> bool:
    """Whether ``serve --ray`` should place the sharded app: ``shards`` was given, or the folder is sharded."""
    if sharded.shards is not None:
        return True
    meta_path = Path(source.index) / META_FILE
    return meta_path.is_file() and _read_json(meta_path).get("shards", 1) > 1


# ---- app builders ----------------------------------------------------------------------------------------------------


def _coerce(cls: type, data: Mapping[str, Any]) -> Any:
    """Instantiate dataclass ``cls`` from ``data``, converting strings (``serve run key=value``) to field types."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        kwargs[f.name] = _convert(value, hints[f.name], f.name)
    return cls(**kwargs)


def _convert(value: Any, hint: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value.lower() in ("none", "null", ""):
            return None
        hint = next(a for a in args if a is not type(None))
    try:
        if hint is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if hint in (int, float):
            return hint(value)
    except ValueError:
        raise ValueError(f"Option {name}={value!r}: expected {hint.__name__}.") from None
    return value


_ALIASES = {"index_path": "index", "topk": "default_topk", "faiss_gpu": None}


def build_app(args: dict[str, Any]):
    """Serve application builder for ``serve run retriever_server.ray_app:build_app key=value ...``.

    Keys: ``index`` (required; alias ``index_path``), ``corpus_path``, ``retriever_name``, ``retriever_model``; any
    :class:`~retriever_server.retriever.LoadOptions`, :class:`~retriever_server.app.ServerConfig` (``topk`` is
    ``default_topk``) or :class:`RayServeConfig` field; ``faiss_gpu=true`` means ``backend=faiss-gpu``.

    Raises:
        ValueError: A missing ``index`` or an unknown key (the message lists the valid keys).
    """
    data = dict(args)
    for alias, target in _ALIASES.items():
        if alias in data:
            value = data.pop(alias)
            if target is None:  # faiss_gpu
                if _convert(value, bool, alias):
                    data["backend"] = "faiss-gpu"
            else:
                data.setdefault(target, value)
    groups = (IndexSource, LoadOptions, ServerConfig, RayServeConfig)
    valid = {f.name for cls in groups for f in fields(cls)} | SHARDED_FIELDS
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ValueError(f"Unknown retriever_server option(s) {unknown}; valid keys: {sorted(valid | set(_ALIASES))}.")
    if "index" not in data:
        raise ValueError("build_app needs `index` (an index directory, or a faiss index file with corpus_path).")
    source, options, server, ray_config = (_coerce(cls, data) for cls in groups)
    sharded = _coerce(ShardedConfig, data)
    if wants_sharding(source, sharded):  # shards=N, or a folder built with --shards
        return build_sharded_application(source, options, server, ray_config, sharded)
    return build_application(source, options, server, ray_config)


def serve_forever(
    source: IndexSource,
    options: LoadOptions,
    server: ServerConfig,
    ray_config: RayServeConfig,
    *,
    ray_address: str | None = None,
    blocking: bool = True,
    sharded: ShardedConfig | None = None,
) -> None:
    """Start (or join) Ray, start Serve's HTTP proxy on ``server.host:server.port``, and deploy the app.

    Args:
        ray_address: An existing cluster (``auto``, ``ray://...``); ``None`` joins ``RAY_ADDRESS`` or starts a local
            instance.
        blocking: Block until interrupted (the CLI); ``False`` returns after the deployment is ready.
        sharded: A :class:`ShardedConfig`: the sharded app when it asks for shards or the
            index folder is sharded.
    """
    sharded = sharded or ShardedConfig()
    ray = require("ray", "Serving with Ray")
    serve = require("ray.serve", "Serving with Ray")
    if not ray.is_initialized():
        ray.init(address=ray_address)
    serve.start(http_options={"host": server.host, "port": server.port})
    if wants_sharding(source, sharded):
        app = build_sharded_application(source, options, server, ray_config, sharded)
    else:
        app = build_application(source, options, server, ray_config)
    logger.info("Deploying %s on http://%s:%d%s", ray_config.name, server.host, server.port, ray_config.route_prefix)
    serve.run(app, name=ray_config.name, route_prefix=ray_config.route_prefix, blocking=blocking)
