"""Async HTTP client of the Search-R1 retrieval wire format (``docs/decisions.md#retrieval``), shared by the agent
loops and
:class:`~agentrag_verl.tools.search_tool.SearchTool`.

Request: ``POST {url}`` with ``{"queries": [str], "topk": int, "return_scores": true}``; response
``{"result": [[{"document": {"id", "contents", ...}, "score": float}, ...], ...]}`` (one list per query; a bare
document instead of the ``{"document", "score"}`` wrapper is accepted too).

One :class:`httpx.AsyncClient` (one connection pool) is shared per event loop and URL
(:func:`get_retriever_client`), because verl builds a new agent loop object for every sample. Failures follow the
package's one retry policy (:mod:`agentrag_verl.http`): connection errors, timeouts, HTTP 408, 429 and 5xx answers
are retried with exponential backoff; other 4xx answers are not (the request itself is wrong). After the last
attempt a :class:`RetrievalError` is raised; the agent loops turn it into an observation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from agentrag_verl.http import RequestError, Response, RetryPolicy, httpx_client, httpx_request

__all__ = ["RetrieverConfig", "RetrievalError", "RetrieverClient", "get_retriever_client", "doc_id"]

logger = logging.getLogger(__name__)

DEFAULT_RETRIEVER_URL = "http://127.0.0.1:8000/retrieve"


@dataclass(frozen=True)
class RetrieverConfig:
    """Where and how to query the retriever.

    Attributes:
        url: Full URL of the ``/retrieve`` endpoint.
        topk: Passages per query (3 in HiPRAG, Search-P1, AutoSearch, ReasonRAG; 5 in the multi-stage paper).
        timeout_s: Timeout of one HTTP attempt, seconds (connect + read).
        max_retries: Retries after the first attempt on connection errors, timeouts, HTTP 408, 429 and 5xx answers.
        backoff_s: First backoff delay; retry ``i`` (0-based) waits ``backoff_s * 2**i`` plus up to 25% jitter, at
            most 30 s (:class:`agentrag_verl.http.RetryPolicy`).
        max_connections: Size of the shared connection pool.
    """

    url: str = DEFAULT_RETRIEVER_URL
    topk: int = 3
    timeout_s: float = 30.0
    max_retries: int = 3
    backoff_s: float = 0.5
    max_connections: int = 256

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise ValueError(f"retriever topk must be >= 1, got {self.topk}; set retriever_topk.")
        if self.timeout_s <= 0:
            raise ValueError(f"retriever timeout must be > 0 seconds, got {self.timeout_s}; set retriever_timeout_s.")
        if self.max_retries < 0:
            raise ValueError(f"retriever max_retries must be >= 0, got {self.max_retries}.")


class RetrievalError(RuntimeError):
    """The retriever could not answer (after retries). ``kind`` is ``"timeout"``, ``"connection"``,
    ``"http_4xx"`` (429 included), ``"http_5xx"`` or ``"bad_response"``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def doc_id(hit: Any) -> str:
    """The document id of a retriever hit (``""`` when the retriever sends none)."""
    doc = hit.get("document", hit) if isinstance(hit, dict) else hit
    if isinstance(doc, dict) and doc.get("id") is not None:
        return str(doc["id"])
    return ""


class RetrieverClient:
    """Search-R1 wire-format client over a shared :class:`httpx.AsyncClient`.

    Args:
        config: Endpoint and retry settings.
        http: The HTTP client to use; by default one is created with a pool of ``config.max_connections``.
    """

    def __init__(self, config: RetrieverConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._http = http or httpx_client(config.timeout_s, config.max_connections)
        self._retry = RetryPolicy(config.max_retries, config.backoff_s)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def search(self, queries: Sequence[str], topk: int | None = None) -> list[list[dict[str, Any]]]:
        """Retrieve passages for each query.

        Args:
            queries: Query strings (a batch; the server may merge concurrent batches).
            topk: Passages per query; ``config.topk`` by default.

        Returns:
            One list of hits per query, each hit ``{"document": {"id", "contents", ...}, "score": float}``
            (bare documents are wrapped; ``score`` is ``None`` when absent).

        Raises:
            RetrievalError: After the last retry, or at once on a 4xx answer or an unparsable body.
        """
        payload = {"queries": list(queries), "topk": int(topk or self.config.topk), "return_scores": True}
        url = self.config.url
        try:
            response = await self._retry.call(
                lambda: httpx_request(self._http, "POST", url, json=payload), on_retry=self._log_retry
            )
        except RequestError as e:
            raise self._error(e) from None
        return _parse_result(response, len(payload["queries"]))

    def _log_retry(self, error: RequestError, retry: int, delay: float) -> None:
        logger.warning("%s; retrying in %.2fs", self._error(error), delay)

    def _error(self, error: RequestError) -> RetrievalError:
        url, attempts = self.config.url, f" (attempt {error.attempts} of {self.config.max_retries + 1})"
        if error.status is None and error.kind == "timeout":
            return RetrievalError(
                "timeout", f"retriever at {url} timed out after {self.config.timeout_s:g}s{attempts}: {error.message}"
            )
        if error.status is None:
            return RetrievalError(
                "connection", f"cannot reach retriever at {url}{attempts}: {error.message}; is the server up?"
            )
        if error.status >= 500:
            return RetrievalError("http_5xx", f"retriever at {url} answered {error.message}{attempts}")
        return RetrievalError("http_4xx", f"retriever at {url} rejected the request with {error.message}{attempts}")


def _parse_result(response: Response, num_queries: int) -> list[list[dict[str, Any]]]:
    try:
        result = response.json()["result"]
    except (ValueError, KeyError, TypeError) as e:
        raise RetrievalError(
            "bad_response", f"retriever response is not Search-R1 JSON ({e!r}): {response.detail()}"
        ) from None
    if not isinstance(result, list) or len(result) != num_queries:
        raise RetrievalError(
            "bad_response",
            f"retriever returned {type(result).__name__} for {num_queries} "
            "queries; expected one list of hits per query",
        )
    out = []
    for hits in result:
        wrapped = []
        for hit in hits or []:
            if isinstance(hit, dict) and "document" in hit:
                wrapped.append({"document": hit["document"], "score": hit.get("score")})
            else:
                wrapped.append({"document": hit, "score": None})
        out.append(wrapped)
    return out


_CLIENTS: dict[tuple[int, RetrieverConfig], RetrieverClient] = {}


def get_retriever_client(config: RetrieverConfig) -> RetrieverClient:
    """The client shared by every caller in the running event loop with the same ``config``.

    verl instantiates an agent loop (and calls tools) per sample; sharing one pool per event loop keeps
    connections alive across samples. Clients of event loops that have closed are dropped.
    """
    loop = asyncio.get_running_loop()
    for key in [k for k, c in _CLIENTS.items() if c._loop is not None and c._loop.is_closed()]:
        del _CLIENTS[key]
    key = (id(loop), config)
    client = _CLIENTS.get(key)
    if client is None or client._loop is not loop:
        client = RetrieverClient(config)
        client._loop = loop
        _CLIENTS[key] = client
    return client
