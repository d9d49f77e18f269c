"""Ray Serve deployment of the same HTTP app: the design card's "Ray-served retrieval actor hosting the E5 index".

Three ways to run it:

- CLI: ``python -m retriever_server serve --index DIR --ray --replicas 2 --gpus-per-replica 1``;
- ``serve run retriever_server.ray_app:build_app index=DIR replicas=2`` (or an app entry in a ``serve deploy``
  config with ``import_path: retriever_server.ray_app:build_app`` and ``args: {index: DIR, ...}``);
  ``shards=N`` (or an index folder built with ``--shards``) places the sharded app of
  :mod:`retriever_server.sharded` instead: an ingress, an encoder deployment and one deployment per shard;
- Python: ``serve.run(build_app({"index": DIR}))``.

Each replica loads the retriever and mounts :func:`retriever_server.app.create_app` through
``@serve.ingress()`` + ``__serve_build_asgi_app__`` (the app is built inside the replica, so nothing heavy is
pickled). Each replica schedules its requests with the standalone server's
:class:`~retriever_server.batching.MicroBatcher` (no wait when idle, continuous batching, large requests split into
micro-batches interleaved with the others), running encode + search in one worker thread per replica; Ray Serve's
``serve.batch`` is not used, since it waits a fixed time for every batch and cannot split a request.
``max_ongoing_requests`` defaults to 256 (Ray's default of 5 would cap every batch at 5 requests per replica).

``ray.serve`` is imported only inside these functions, so ``import retriever_server.ray_app`` stays light.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._deps import require
from .app import ServerConfig, make_batcher
from .batching import Job, JobResult
from .retriever import LoadOptions
from .threads import load_for_serving, serving_process

logger = logging.getLogger(__name__)


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


@dataclass
class IndexSource:
    """Where a replica loads its retriever from: an index directory, or Search-R1's index file + corpus."""

    index: str
    """Index directory (ours) or a faiss index file (Search-R1 ``--index_path``)."""
    corpus_path: str | None = None
    """Search-R1 corpus ``.jsonl`` (only with an index file)."""
    retriever_name: str | None = None
    """Encoder preset for an index file: ``e5``, ``bge``, ``mean``, ``cls`` (default: from the model name)."""
    retriever_model: str | None = None
    """Encoder model for an index file (Search-R1 ``--retriever_model``)."""


def check_source(source: IndexSource) -> None:
    """Refuse an :class:`IndexSource` that cannot load, from what is on disk alone (nothing is read or loaded): a
    missing path, a folder without a complete index (:func:`~retriever_server.build.check_index_dir`), an index file
    without ``corpus_path`` / ``retriever_model``, a missing corpus.

    Raises:
        FileNotFoundError, IsADirectoryError, ValueError: The message says what to pass.
    """
    from pathlib import Path

    from .build import check_index_dir
    from .cli_common import input_file

    if Path(source.index).is_dir():
        check_index_dir(source.index)
        return
    if not Path(source.index).exists():
        raise FileNotFoundError(
            f"--index {source.index} does not exist; pass an index folder made by `python -m retriever_server build`, "
            "or a faiss index file with --corpus_path and --retriever_model."
        )
    if not source.corpus_path or not source.retriever_model:
        raise ValueError(
            f"{source.index} is a file, so it is read as a faiss index (Search-R1 layout) and needs --corpus_path "
            "(the corpus .jsonl it was built from) and --retriever_model (the encoder); or pass an index directory "
            "made by `python -m retriever_server build`."
        )
    input_file(source.corpus_path, "--corpus_path")


def load_source(source: IndexSource, options: LoadOptions):
    """Load a :class:`~retriever_server.retriever.Retriever` from an :class:`IndexSource` (checked first by
    :func:`check_source`).

    Raises:
        ValueError: An index file without ``corpus_path`` / ``retriever_model``.
    """
    from pathlib import Path

    from .encoders import EncoderConfig
    from .retriever import Retriever

    check_source(source)
    if Path(source.index).is_dir():
        return Retriever.from_index_dir(source.index, options)
    encoder = EncoderConfig.from_preset(
        source.retriever_model,
        source.retriever_name,
        batch_size=options.encoder_batch_size,
        num_threads=options.num_threads,
    )
    return Retriever.from_searchr1_files(source.index, source.corpus_path, encoder, options)


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
            from .app import create_app

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
    from .sharded import SHARDED_FIELDS, ShardedConfig, build_sharded_application, wants_sharding

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
    sharded: Any = None,
) -> None:
    """Start (or join) Ray, start Serve's HTTP proxy on ``server.host:server.port``, and deploy the app.

    Args:
        ray_address: An existing cluster (``auto``, ``ray://...``); ``None`` joins ``RAY_ADDRESS`` or starts a local
            instance.
        blocking: Block until interrupted (the CLI); ``False`` returns after the deployment is ready.
        sharded: A :class:`~retriever_server.sharded.ShardedConfig`: the sharded app when it asks for shards or the
            index folder is sharded.
    """
    from .sharded import ShardedConfig, build_sharded_application, wants_sharding

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
