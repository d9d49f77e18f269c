"""The HTTP app (FastAPI): ``POST /retrieve`` (Search-R1 wire format), ``POST /encode``, ``GET /health``.

``create_app(retriever, config)`` returns an ASGI app; run it with uvicorn (``python -m retriever_server serve``)
or behind Ray Serve (:mod:`retriever_server.ray_app`, whose replicas run the same app and the same scheduler).
The wire format and validation rules live in :mod:`retriever_server.protocol`; batching and scheduling in
:mod:`retriever_server.batching`. ``/retrieve`` and ``/encode`` are served by :class:`PostEndpoints`, a middleware in
front of FastAPI's router (less than half the per-request CPU); FastAPI serves ``/health``, the docs and the error
answers for other paths. So the OpenAPI page (``docs=True``) lists ``/health`` only. Under ``serve`` (uvicorn), the
connections answer the same endpoint functions without ASGI (:mod:`retriever_server.fast_post`; they are in
``app.state.post_endpoints``) unless ``--no-fast-post`` (:attr:`ServerConfig.fast_post`) turns that off; behind Ray
Serve every request takes the ASGI path.

Errors: invalid requests get 4xx JSON ``{"error": {"type", "message", "field"}}`` (also for unknown paths and
methods); an unexpected server fault gets 500 with the same shape and is logged with its traceback (on the POST
endpoints by ``PostEndpoints`` itself, elsewhere by FastAPI's error middleware).

Cost: a ``/retrieve`` asks at most ``max_hits_per_request`` hits (queries x topk) and a request at most
``max_request_tokens`` encoder tokens (both 422; :mod:`retriever_server.protocol`). The app tokenizes each request
once with the encoder's tokenizer (:class:`RequestTokens`); the token ids bound the micro-batches
(``max_batch_tokens``) and are what the encoder reads.

Exposure: the body is read as a stream and reading stops at ``max_body_bytes`` (413); a request with more than
``max_headers`` headers gets 431; ``/docs``, ``/redoc`` and ``/openapi.json`` exist only with ``docs=True``; ``/health``
and ``/encode`` name the model and index by their last path component unless ``health_paths=True``. A client that
disconnects mid-request ends the request quietly (the connection layer, :mod:`retriever_server.http_guard`, logs
it once). Connection limits (head size, read timeouts) live in that module, because only the server sees them.
"""

# No `from __future__ import annotations` here: FastAPI reads the route handlers' annotations (``Request``,
# imported inside create_app) at runtime, and string annotations would not resolve.

import asyncio
import contextlib
import dataclasses
import functools
import gc
import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .batching import Job, JobService, MicroBatcher, run_jobs
from .protocol import (
    Limits,
    RequestError,
    body_too_large,
    check_request_tokens,
    parse_encode,
    parse_json_body,
    parse_retrieve,
    render_encode,
    render_retrieve,
    with_empty_queries,
)
from .threads import compute_thread

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
    """Hits per query when a request sends no ``topk`` (Search-R1 ``--topk``: 3; the multi-stage paper uses 5)."""
    max_topk: int = 100
    """Largest ``topk`` a request may ask for (larger → 422)."""
    max_queries_per_request: int = 8192
    """Most queries in one request (more → 422). Search-R1's own rollout sends every active trajectory's query in one
    request (batch 512 x 5 rollouts = 2560), so the default leaves room for that."""
    max_query_chars: int = 4096
    """Longest query in characters (longer → 422)."""
    max_body_bytes: int = 32 << 20
    """Largest request body in bytes (larger → 413)."""
    max_hits_per_request: int = 32768
    """Most ``queries x topk`` per ``/retrieve`` request (more → 422): Search-R1's 2,560 queries at topk 12, or the
    8,192 queries of ``max_queries_per_request`` at topk 4. About 25 MB of answer at wiki-18's passage length, the
    order of ``max_body_bytes``."""
    max_request_tokens: int = 131072
    """Most encoder tokens per request, each query counted up to the encoder's ``max_length`` with its prefix and
    special tokens (more → 422): 8,192 (``max_queries_per_request``) agent queries of 16 tokens. About 10 s of
    encoding on a 2-core CPU; 1,024 queries of 4,090 characters (262,144 tokens) took 102 s."""
    max_batch_tokens: int = 2048
    """Most encoder tokens per micro-batch (with ``max_batch_size``): a full batch of 128 agent queries of 16 tokens,
    or 8 queries of 256. A request arriving while a maximal request runs waits for one such micro-batch."""
    batching: bool = True
    """Merge concurrent requests into one encode + one search call (continuous micro-batching, never a fixed wait;
    see :mod:`retriever_server.batching`)."""
    max_batch_size: int = 128
    """Most queries per micro-batch; a larger request is split into micro-batches interleaved with other requests."""
    max_header_bytes: int = 16 << 10
    """Largest request line + headers in bytes (larger → 431, connection closed). 16 KiB, h11's default."""
    max_headers: int = 100
    """Most request headers (more → 431)."""
    header_timeout_s: float = 10.0
    """Seconds a connection may take to send a complete request head (then it is closed)."""
    body_timeout_s: float = 30.0
    """Seconds without a request body byte before the connection is closed."""
    body_deadline_s: float = 60.0
    """Seconds from a complete request head to its body's last byte, however the bytes are paced (then the connection
    is closed): 32 MiB (``max_body_bytes``) at 0.55 MB/s."""
    max_connections: int = 4096
    """Most open connections; one more is answered 503 and closed. A rollout keeps up to 256 pooled connections per
    agent-loop worker (``agentrag_verl.tools.retriever_client``), so 4096 leaves room for 16 workers."""
    keep_alive_timeout_s: float = 5.0
    """Seconds an idle kept-alive connection stays open (uvicorn's ``timeout_keep_alive``)."""
    docs: bool = False
    """Serve FastAPI's ``/docs``, ``/redoc`` and ``/openapi.json`` (off: they describe the server to anyone)."""
    health_paths: bool = False
    """Show the index and model paths in ``/health`` and ``/encode`` (off: only their last path component)."""
    fast_post: bool = True
    """Under uvicorn with its httptools parser (``serve``), the connections answer ``POST /retrieve`` and ``/encode``
    themselves, without ASGI (:mod:`retriever_server.fast_post`); off (``--no-fast-post``), the ASGI app answers them
    (:class:`PostEndpoints`), at about 1.5x the server CPU per request. The fast path also stays off, with a WARNING,
    on a uvicorn it was not tested with. Ray Serve runs every request through ASGI whatever this says."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ServerConfig":
        """Build from a plain / OmegaConf mapping; unknown keys raise ``ValueError`` naming the valid ones."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - valid)
        if unknown:
            raise ValueError(f"Unknown server option(s) {unknown}; valid keys: {sorted(valid)}.")
        return cls(**dict(config))

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not a TCP port; choose one from 1 to 65535 (--port).")
        positive = {
            "max_topk": "--max-topk",
            "max_queries_per_request": "--max-queries",
            "max_query_chars": "--max-query-chars",
            "max_body_bytes": "--max-body-bytes",
            "max_hits_per_request": "--max-hits",
            "max_request_tokens": "--max-request-tokens",
            "max_batch_size": "--max-batch-size",
            "max_batch_tokens": "--max-batch-tokens",
            "max_header_bytes": "--max-header-bytes",
            "max_headers": "--max-headers",
            "header_timeout_s": "--header-timeout",
            "body_timeout_s": "--body-timeout",
            "body_deadline_s": "--body-deadline",
            "max_connections": "--max-connections",
            "keep_alive_timeout_s": "--keep-alive-timeout",
        }
        for name, flag in positive.items():
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} is {getattr(self, name)}; it must be greater than 0 ({flag}).")
        if not 1 <= self.default_topk <= self.max_topk:
            raise ValueError(
                f"default_topk ({self.default_topk}) must be from 1 to max_topk ({self.max_topk}); fix --topk or "
                "--max-topk."
            )

    @property
    def limits(self) -> Limits:
        """The request limits: each :class:`Limits` field is the field of the same name here."""
        return Limits(**{f.name: getattr(self, f.name) for f in fields(Limits)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make_batcher(retriever: "Retriever", config: "ServerConfig") -> MicroBatcher:
    """The local micro-batcher over ``retriever`` with the config's batching settings, running its batches in the
    process's compute thread (:func:`~retriever_server.threads.compute_thread`: load the retriever there too)."""
    return MicroBatcher(
        functools.partial(run_jobs, retriever),
        max_batch_size=config.max_batch_size,
        max_batch_tokens=config.max_batch_tokens,
        enabled=config.batching,
        executor=compute_thread(),
    )


def create_app(
    retriever: "Retriever", config: "ServerConfig | None" = None, *, service: JobService | None = None
) -> "FastAPI":
    """Build the FastAPI app serving ``retriever``.

    Args:
        retriever: The loaded retriever (its store renders passages; its description feeds ``/health``).
        config: Server settings (defaults: :class:`ServerConfig`).
        service: What runs jobs; default: a :class:`~retriever_server.batching.MicroBatcher` over ``retriever``
            (closed at app shutdown). The Ray Serve replica passes its own (a ``MicroBatcher`` too, plus replica stats).

    Returns:
        A FastAPI app with ``POST /retrieve``, ``POST /encode`` and ``GET /health``.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    config = config or ServerConfig()
    limits = config.limits
    own_service = service is None
    service = service or make_batcher(retriever, config)
    store = retriever.store
    model = retriever.encoder.config.model if config.health_paths else public_name(retriever.encoder.config.model)
    normalized = retriever.encoder.config.normalize
    description = retriever.describe()
    if not config.health_paths:
        description = {**description, "index": public_name(description.get("index")), "model": model}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        # Move everything loaded so far (torch, transformers, the model, the app) out of the collector's reach: a full
        # collection traverses those millions of objects while holding the GIL, which stalled a whole batch
        # (160 ms -> 410 ms, once every few seconds under load: the p99 of benchmarks/retriever_load.py).
        gc.collect()
        gc.freeze()
        yield
        gc.unfreeze()
        counter.close()
        if own_service and hasattr(service, "close"):
            await service.close()

    docs = {} if config.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(
        title="retriever_server",
        description="Dense retrieval (E5/BGE + FAISS) with the Search-R1 /retrieve wire format.",
        lifespan=lifespan,
        **docs,
    )
    app.state.service = service
    app.state.retriever = retriever

    counter = RequestTokens(retriever.encoder, limits)

    async def retrieve(body: bytes, content_type: str | None) -> bytes:
        """Search-R1 ``/retrieve``: top-k passages per query."""
        parsed = parse_retrieve(parse_json_body(body, content_type, limits), limits)
        searched = [i for i, q in enumerate(parsed.queries) if q.strip()]
        result = None
        if searched:
            queries = [parsed.queries[i] for i in searched]
            result = await service.submit(Job(queries, parsed.topk, tokens=await counter.tokenize(queries, "query")))
        result = with_empty_queries(parsed.queries, result, searched, parsed.topk)
        return render_retrieve(store, result, parsed.return_scores)

    async def encode(body: bytes, content_type: str | None) -> bytes:
        """Query (or passage) embeddings from the index's encoder."""
        parsed = parse_encode(parse_json_body(body, content_type, limits), limits)
        tokens = await counter.tokenize(parsed.queries, parsed.kind)
        result = await service.submit(Job(parsed.queries, None, parsed.kind, tokens))
        return render_encode(result, model, normalized)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Index size, model, device, queue depth and batching counters."""
        return {"status": "ok", **description, "default_topk": config.default_topk, **service.stats()}

    # Starlette runs the middleware added last first: the head limit, then the two POST endpoints, then FastAPI.
    # uvicorn's connections answer the same endpoints without ASGI (retriever_server.fast_post).
    app.state.post_endpoints = {"/retrieve": retrieve, "/encode": encode}
    app.add_middleware(PostEndpoints, endpoints=app.state.post_endpoints, limits=limits)
    app.add_middleware(RequestHeadLimit, max_headers=config.max_headers, max_header_bytes=config.max_header_bytes)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code in (404, 405):
            error = route_error(exc.status_code, request.method, request.url.path)
        else:
            error = RequestError(exc.status_code, str(exc.detail), type="http_error")
        return JSONResponse(error.body(), status_code=error.status, headers=exc.headers)

    @app.exception_handler(Exception)
    async def on_internal_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(internal_error(request.method, request.url.path, exc).body(), status_code=500)

    return app


INLINE_TOKENIZE_CHARS = 4096
"""A request with at most this many characters of queries is tokenized on the event loop (a 1-query request: about
25 µs, which the encoder's thread then does not spend); a larger one in a thread of its own, so that tokenizing a large
request never holds up the others' requests (the tokenizer releases the GIL while it works)."""


class RequestTokens:
    """Tokenizes a request's queries with the encoder's tokenizer (:class:`~retriever_server.encoders.TokenCounter`)
    and refuses a request over ``max_request_tokens`` (422). The token ids go with the job: the batcher's micro-batches
    count them (``max_batch_tokens``), and the encoder pads them instead of tokenizing the queries again."""

    def __init__(self, encoder: Any, limits: Limits) -> None:
        self.counter = encoder.token_counter()
        self.limits = limits
        self._thread: ThreadPoolExecutor | None = None

    async def tokenize(self, queries: list[str], kind: str) -> list[list[int]]:
        """Token ids of each query, as the encoder reads them.

        Raises:
            RequestError: 422, the queries take more than ``max_request_tokens``.
        """
        stop = self.limits.max_request_tokens
        if sum(map(len, queries)) <= INLINE_TOKENIZE_CHARS:
            tokens = self.counter.tokenize(queries, kind, stop)
        else:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-tokens")
            loop = asyncio.get_running_loop()
            tokens = await loop.run_in_executor(self._thread, self.counter.tokenize, queries, kind, stop)
        check_request_tokens([len(ids) for ids in tokens], len(queries), self.limits)
        return tokens

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)
            self._thread = None


def public_name(path: str | None) -> str | None:
    """What ``/health`` shows of a filesystem path: its last component (a hub id such as ``intfloat/e5-base-v2``,
    which is no existing path, is shown whole).

    >>> public_name("/data/indexes/e5_flat"), public_name("intfloat/e5-base-v2")
    ('e5_flat', 'intfloat/e5-base-v2')
    """
    if not path:
        return path
    p = Path(path)
    return p.name if p.is_absolute() or p.exists() else path


def error_json(error: RequestError) -> bytes:
    """An error's JSON answer body."""
    return json.dumps(error.body()).encode()


def internal_error(method: str, path: str, exc: Exception) -> RequestError:
    """The 500 answer to an unexpected fault in a request, logged with its traceback (call it in the handler)."""
    logger.exception("Internal error on %s %s", method, path)
    return RequestError(500, f"Internal server error: {type(exc).__name__}: {exc}", type="internal_error")


def check_declared_length(declared: bytes | None, limit: int) -> None:
    """Raise the 413 answer when a ``Content-Length`` header declares more than ``limit`` bytes."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(declared.decode(), limit)


def head_error(
    headers: list[tuple[bytes, bytes]], target_bytes: int, max_headers: int, max_header_bytes: int
) -> RequestError | None:
    """The 431 answer for a request head over ``max_headers`` or ``max_header_bytes`` (``target_bytes``: the request
    target's length, path and query), or ``None`` when it is within both."""
    size = target_bytes + sum(len(name) + len(value) + 4 for name, value in headers)  # "name: value\r\n"
    if len(headers) > max_headers:
        message = f"The request has {len(headers)} headers; the limit is {max_headers} (max_headers)."
    elif size > max_header_bytes:
        message = (
            f"The request target and headers take {size} bytes; the limit is {max_header_bytes} (max_header_bytes)."
        )
    else:
        return None
    return RequestError(431, message + " Send fewer or shorter headers.", type="request_header_fields_too_large")


async def send_json(send: Any, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """Send a whole JSON response on an ASGI ``send``."""
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})


def route_error(status: int, method: str, path: str) -> RequestError:
    """The 404 (no such path) or 405 (path without that method) answer, naming the endpoints there are."""
    if status == 404:
        return RequestError(404, f"No endpoint {method} {path}; this server has {ENDPOINTS}.", type="not_found")
    return RequestError(
        405, f"{method} is not allowed on {path}; this server has {ENDPOINTS}.", type="method_not_allowed"
    )


class PostEndpoints:
    """ASGI middleware serving the JSON POST endpoints (``/retrieve``, ``/encode``) ahead of FastAPI's router.

    Every rollout step is one such request, so their per-request cost is paid in the gap between two batches, while
    the encoder waits. Through FastAPI's exception middleware, routing, request object and dependency solving a request
    took 98 µs of server CPU here; this path takes 48 µs (``benchmarks/retriever_http.py``). The rules stay
    those of the FastAPI app: the body is read as a stream and reading stops at ``max_body_bytes`` (413, also when
    ``Content-Length`` declares more); other methods get 405 with an ``Allow`` header; a
    :class:`~retriever_server.protocol.RequestError` becomes its JSON error; a client that disconnects before its
    body arrived gets nothing; any other exception is logged with its traceback and answered 500 with
    ``connection: close`` (uvicorn then closes the connection), the same answer, byte for byte, as on the connection's
    path (:mod:`retriever_server.fast_post`). So FastAPI takes no part in a POST to these paths.

    Args:
        app: The FastAPI app below.
        endpoints: Path → ``async (body, content_type) -> response bytes``.
        limits: The request limits (``max_body_bytes``).
    """

    def __init__(self, app: Any, endpoints: Mapping[str, Any], limits: Limits) -> None:
        self.app = app
        self.endpoints = dict(endpoints)
        self.max_body_bytes = limits.max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        endpoint = self.endpoints.get(route_path(scope)) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        allow: tuple[tuple[bytes, bytes], ...] = ()
        try:
            if scope["method"] != "POST":
                allow = ((b"allow", b"POST"),)
                raise route_error(405, scope["method"], scope["path"])
            headers = dict(scope["headers"])
            body = await self._read_body(headers.get(b"content-length"), receive)
            if body is None:  # the client went away; the connection layer has logged it
                return
            content_type = headers.get(b"content-type")
            answer = await endpoint(body, content_type.decode("latin-1") if content_type is not None else None)
        except RequestError as error:
            await send_json(send, error.status, error_json(error), allow)
            return
        except Exception as exc:
            fault = internal_error(scope["method"], scope["path"], exc)
            await send_json(send, 500, error_json(fault), ((b"connection", b"close"),))
            return
        await send_json(send, 200, answer)

    async def _read_body(self, declared: bytes | None, receive: Any) -> bytes | None:
        check_declared_length(declared, self.max_body_bytes)
        # Stop at the limit: a chunked body declares no length, and buffering it whole first would let one request
        # take any amount of memory. The pieces are joined once, at the end (growing one buffer would copy it at
        # every reallocation, doubling the peak).
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body_bytes:
                raise body_too_large(f"more than {self.max_body_bytes}", self.max_body_bytes)
            if not message.get("more_body", False):
                return b"".join(chunks)


def route_path(scope: dict[str, Any]) -> str:
    """The request path below the app's mount point (``root_path``, set by a proxy such as Ray Serve's)."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class RequestHeadLimit:
    """ASGI middleware answering 431 to a request with more than ``max_headers`` headers or a head (target +
    headers) over ``max_header_bytes``.

    The connection layer (:mod:`retriever_server.http_guard`) closes a connection whose *incomplete* head outgrows
    ``max_header_bytes``, which bounds the parser's memory; a head that arrived complete in one read is measured
    here, from what the parser produced.
    """

    def __init__(self, app: Any, max_headers: int, max_header_bytes: int) -> None:
        self.app = app
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            error = head_error(scope["headers"], target, self.max_headers, self.max_header_bytes)
            if error is not None:
                await send_json(send, 431, error_json(error))
                return
        await self.app(scope, receive, send)
