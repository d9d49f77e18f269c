"""The HTTP app (FastAPI): ``POST /retrieve`` (Search-R1 wire format), ``POST /encode``, ``GET /health``.

``create_app(retriever, config)`` returns an ASGI app; run it with uvicorn (``python -m retriever_server serve``)
or behind Ray Serve (:mod:`retriever_server.ray_app`, which passes its own ``service`` built on ``serve.batch``).
The wire format and validation rules live in :mod:`retriever_server.protocol`; batching in
:mod:`retriever_server.batching`.

Errors: invalid requests get 4xx JSON ``{"error": {"type", "message", "field"}}`` (also for unknown paths and
methods); an unexpected server fault gets 500 with the same shape and is logged with its traceback.
"""

# No `from __future__ import annotations` here: FastAPI reads the route handlers' annotations (``Request``,
# imported inside create_app) at runtime, and string annotations would not resolve.

import contextlib
import dataclasses
import functools
import gc
import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .batching import Job, JobService, MicroBatcher, run_jobs
from .protocol import (
    Limits,
    RequestError,
    parse_encode,
    parse_json_body,
    parse_retrieve,
    render_encode,
    render_retrieve,
    with_empty_queries,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .retriever import Retriever

logger = logging.getLogger(__name__)

ENDPOINTS = "POST /retrieve, POST /encode, GET /health"


@dataclass
class ServerConfig:
    """HTTP server settings: limits, defaults and micro-batching. ``from_config`` accepts Hydra-style mappings."""

    host: str = "127.0.0.1"
    """Interface to bind; ``0.0.0.0`` exposes the server to the network (Search-R1's default did, silently)."""
    port: int = 8000
    """TCP port."""
    default_topk: int = 3
    """Hits per query when a request sends no ``topk`` (Search-R1 ``--topk``; SPEC §0.3: 3, multi-stage: 5)."""
    max_topk: int = 100
    """Largest ``topk`` a request may ask for (larger → 422)."""
    max_queries_per_request: int = 8192
    """Most queries in one request (more → 422). Search-R1's own rollout sends every active trajectory's query in one
    request (batch 512 x 5 rollouts = 2560), so the default leaves room for that."""
    max_query_chars: int = 4096
    """Longest query in characters (longer → 422)."""
    max_body_bytes: int = 32 << 20
    """Largest request body in bytes (larger → 413)."""
    batching: bool = True
    """Merge concurrent requests into one encode + one search call (micro-batching)."""
    max_batch_size: int = 128
    """Most queries per micro-batch."""
    max_wait_ms: float = 20.0
    """How long the oldest queued request may wait for others to join its batch (the cap on added latency)."""
    arrival_gap_ms: float = 2.0
    """Dispatch a batch early once no request has arrived for this long (0: always wait ``max_wait_ms``)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ServerConfig":
        """Build from a plain / OmegaConf mapping; unknown keys raise ``ValueError`` naming the valid ones."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - valid)
        if unknown:
            raise ValueError(f"Unknown server option(s) {unknown}; valid keys: {sorted(valid)}.")
        return cls(**dict(config))

    def __post_init__(self) -> None:
        if not 1 <= self.default_topk <= self.max_topk:
            raise ValueError(
                f"default_topk ({self.default_topk}) must be from 1 to max_topk ({self.max_topk}); fix --topk or "
                "--max-topk."
            )
        if self.max_queries_per_request < 1 or self.max_query_chars < 1 or self.max_batch_size < 1:
            raise ValueError("max_queries_per_request, max_query_chars and max_batch_size must be positive.")

    @property
    def limits(self) -> Limits:
        return Limits(
            default_topk=self.default_topk,
            max_topk=self.max_topk,
            max_queries_per_request=self.max_queries_per_request,
            max_query_chars=self.max_query_chars,
            max_body_bytes=self.max_body_bytes,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make_batcher(retriever: "Retriever", config: "ServerConfig") -> MicroBatcher:
    """The local micro-batcher over ``retriever`` with the config's batching settings."""
    return MicroBatcher(
        functools.partial(run_jobs, retriever),
        max_batch_size=config.max_batch_size,
        max_wait_ms=config.max_wait_ms,
        arrival_gap_ms=config.arrival_gap_ms,
        enabled=config.batching,
    )


def create_app(
    retriever: "Retriever", config: "ServerConfig | None" = None, *, service: JobService | None = None
) -> "FastAPI":
    """Build the FastAPI app serving ``retriever``.

    Args:
        retriever: The loaded retriever (its store renders passages; its description feeds ``/health``).
        config: Server settings (defaults: :class:`ServerConfig`).
        service: What runs jobs; default: a :class:`~retriever_server.batching.MicroBatcher` over ``retriever``
            (closed at app shutdown). Ray Serve passes its ``serve.batch``-based service.

    Returns:
        A FastAPI app with ``POST /retrieve``, ``POST /encode`` and ``GET /health``.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    config = config or ServerConfig()
    limits = config.limits
    own_service = service is None
    service = service or make_batcher(retriever, config)
    store = retriever.store
    model = retriever.encoder.config.model
    normalized = retriever.encoder.config.normalize
    description = retriever.describe()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        # Move everything loaded so far (torch, transformers, the model, the app) out of the collector's reach: a full
        # collection traverses those millions of objects while holding the GIL, which stalled a whole batch
        # (160 ms -> 410 ms, once every few seconds under load: the p99 of benchmarks/retriever_load.py).
        gc.collect()
        gc.freeze()
        yield
        gc.unfreeze()
        if own_service and hasattr(service, "close"):
            await service.close()

    app = FastAPI(
        title="retriever_server",
        description="Dense retrieval (E5/BGE + FAISS) with the Search-R1 /retrieve wire format.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.retriever = retriever

    def json_bytes(content: bytes, status: int = 200) -> Response:
        return Response(content=content, status_code=status, media_type="application/json")

    async def read_body(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise RequestError(
                413,
                f"The body is {declared} bytes; the limit is {limits.max_body_bytes} (max_body_bytes). Split the "
                "queries over several requests.",
                type="payload_too_large",
            )
        return parse_json_body(await request.body(), request.headers.get("content-type"), limits)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Response:
        """Search-R1 ``/retrieve``: top-k passages per query."""
        parsed = parse_retrieve(await read_body(request), limits)
        searched = [i for i, q in enumerate(parsed.queries) if q.strip()]
        result = None
        if searched:
            result = await service.submit(Job([parsed.queries[i] for i in searched], parsed.topk))
        result = with_empty_queries(parsed.queries, result, searched, parsed.topk)
        return json_bytes(render_retrieve(store, result, parsed.return_scores))

    @app.post("/encode")
    async def encode(request: Request) -> Response:
        """Query (or passage) embeddings from the index's encoder."""
        parsed = parse_encode(await read_body(request), limits)
        result = await service.submit(Job(parsed.queries, None, parsed.kind))
        return json_bytes(render_encode(result, model, normalized))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Index size, model, device, queue depth and batching counters."""
        return {"status": "ok", **description, "default_topk": config.default_topk, **service.stats()}

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"No endpoint {request.method} {request.url.path}; this server has {ENDPOINTS}."
            kind = "not_found"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; this server has {ENDPOINTS}."
            kind = "method_not_allowed"
        else:
            message, kind = str(exc.detail), "http_error"
        return JSONResponse(RequestError(exc.status_code, message, type=kind).body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def on_internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("Internal error on %s %s", request.method, request.url.path)
        body = RequestError(500, f"Internal server error: {type(exc).__name__}: {exc}", type="internal_error").body()
        return JSONResponse(body, status_code=500)

    return app
