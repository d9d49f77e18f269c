"""The wire format: Search-R1's ``/retrieve`` JSON plus ``/encode``, request validation and response rendering.

``POST /retrieve`` (Search-R1, drop-in; ``docs/decisions.md#retrieval``)::

    request:  {"queries": ["q1", ...], "topk": 3, "return_scores": true}   (or {"query": "q1", ...})
    response: {"result": [[{"document": {"id": "12", "contents": "\\"Title\\"\\ntext"}, "score": 0.83}, ...], ...]}
              with return_scores false: {"result": [[{"id": "12", "contents": "..."}, ...], ...]}

``topk`` null or absent means the server's default (``--topk``); ``return_scores`` defaults to false as in Search-R1.
Unknown fields are ignored. ``POST /encode``: ``{"queries": [...]}`` (or ``"query"``), optional
``"kind": "query" | "passage"`` → ``{"embeddings": [[...]], "dim": d, "model": "...", "normalized": true}``.

Every invalid request gets a 4xx answer ``{"error": {"type", "message", "field"}}`` whose message says what was
wrong and how to fix it; nothing a client sends produces a 500.

Decisions:

- Validation is hand-written rather than pydantic so every message names the field, the limit and the config key,
  and so a body is parsed once. Accepted leniencies for drop-in clients: ``topk`` as an integral float (``3.0``),
  ``null`` for ``topk`` / ``return_scores``. Rejected: strings or booleans for numbers, unpaired UTF-16 surrogates
  (not encodable as text), an empty ``queries`` list, and both ``query`` and ``queries`` at once.
- A request's cost is bounded besides its size: ``queries x topk`` hits (``max_hits_per_request``: 8192 queries at
  topk 100 returned 181 MB and added 454 MB of RSS) and the tokens the encoder reads (``max_request_tokens``,
  counted by the app with the encoder's tokenizer: 1,024 queries of 4,090 characters took 102 s of encoding). Both
  are 422 with the numbers and how to split.
- An empty or whitespace-only query string is valid and gets no passages (``[]``) on ``/retrieve`` without an
  encoder call; ``/encode`` encodes it as given. A policy under RL training does emit empty searches, and clients
  such as Search-R1's send every trajectory's query in one request: rejecting the request would fail them all.
- A missing ``Content-Type`` is accepted (curl without ``-H``); an explicit non-JSON type gets 415.
- Responses are assembled from the stored passage bytes (no parse / re-serialize of passages); scores are the
  float32 values printed as Python floats, as Search-R1's ``.tolist()`` did.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .batching import JobResult
from .corpus_store import CorpusStore


@dataclass
class Limits:
    """Request limits; each is a :class:`~retriever_server.app.ServerConfig` field of the same name."""

    default_topk: int = 3
    max_topk: int = 100
    max_queries_per_request: int = 8192
    max_query_chars: int = 4096
    max_body_bytes: int = 32 << 20
    max_hits_per_request: int = 32768
    max_request_tokens: int = 131072


class RequestError(Exception):
    """A client error: HTTP ``status`` with a JSON body ``{"error": {"type", "message", "field"}}``."""

    def __init__(self, status: int, message: str, *, field: str | None = None, type: str = "invalid_request"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.type = type

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "field": self.field}}


@dataclass
class RetrieveRequest:
    queries: list[str]
    topk: int
    return_scores: bool


@dataclass
class EncodeRequest:
    queries: list[str]
    kind: str


_JSON_TYPES = ("application/json", "text/json")


def body_too_large(size: str, limit: int) -> RequestError:
    """The 413 answer for a body of ``size`` bytes (a number, or "more than N") over ``limit``."""
    return RequestError(
        413,
        f"The body is {size} bytes; the limit is {limit} (max_body_bytes). Split the queries over several requests.",
        type="payload_too_large",
    )


def parse_json_body(body: bytes, content_type: str | None, limits: Limits) -> dict[str, Any]:
    """Check the content type and size, and parse the body as a JSON object.

    Raises:
        RequestError: 415 (content type), 413 (size), 400 (not JSON / not UTF-8), 422 (not an object).
    """
    if content_type:
        mime = content_type.split(";", 1)[0].strip().lower()
        if mime not in _JSON_TYPES and not mime.endswith("+json"):
            raise RequestError(
                415,
                f"Content-Type {mime!r} is not supported; send the body as JSON with 'Content-Type: application/json'.",
                type="unsupported_media_type",
            )
    if len(body) > limits.max_body_bytes:
        raise body_too_large(str(len(body)), limits.max_body_bytes)
    if not body.strip():
        raise RequestError(
            400, 'The body is empty; send a JSON object such as {"queries": ["..."]}.', type="invalid_json"
        )
    try:
        obj = json.loads(body)
    except UnicodeDecodeError as e:
        raise RequestError(
            400,
            f"The body is not valid UTF-8 ({e.reason} at byte {e.start}); encode the JSON as UTF-8.",
            type="invalid_json",
        ) from None
    except ValueError as e:
        raise RequestError(400, f"The body is not valid JSON ({e}).", type="invalid_json") from None
    except RecursionError:
        raise RequestError(
            400, "The body nests JSON arrays/objects too deeply to parse; send a flat request.", type="invalid_json"
        ) from None
    if not isinstance(obj, dict):
        raise RequestError(
            422, f'The body must be a JSON object such as {{"queries": ["..."]}}, not a JSON {_json_type(obj)}.'
        )
    return obj


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def parse_queries(obj: dict[str, Any], limits: Limits) -> list[str]:
    """The request's queries from ``queries`` (list of strings) or ``query`` (one string), validated.

    Raises:
        RequestError: 422 naming the offending field.
    """
    has_list = obj.get("queries") is not None
    has_one = obj.get("query") is not None
    if has_list and has_one:
        raise RequestError(422, 'Send either "queries" (a list) or "query" (one string), not both.', field="query")
    if not has_list and not has_one:
        raise RequestError(
            422,
            'The request has no queries; send {"queries": ["your question", ...]} or {"query": "your question"}.',
            field="queries",
        )
    if has_one:
        query = obj["query"]
        if not isinstance(query, str):
            raise RequestError(
                422,
                f'"query" must be a string, not a JSON {_json_type(query)}; for several queries use "queries": [...].',
                field="query",
            )
        queries, name = [query], "query"
    else:
        queries = obj["queries"]
        if isinstance(queries, str):
            raise RequestError(
                422,
                '"queries" must be a list of strings, not a string; wrap it: {"queries": ["..."]}, or send "query".',
                field="queries",
            )
        if not isinstance(queries, list):
            raise RequestError(
                422, f'"queries" must be a list of strings, not a JSON {_json_type(queries)}.', field="queries"
            )
        if not queries:
            raise RequestError(422, '"queries" is empty; send at least one query string.', field="queries")
        name = None
    if len(queries) > limits.max_queries_per_request:
        raise RequestError(
            422,
            f"{len(queries)} queries in one request; the limit is {limits.max_queries_per_request} "
            "(max_queries_per_request). Split them over several requests.",
            field="queries",
        )
    for i, query in enumerate(queries):
        where = name or f"queries[{i}]"
        if not isinstance(query, str):
            raise RequestError(422, f"{where} must be a string, not a JSON {_json_type(query)}.", field=where)
        if len(query) > limits.max_query_chars:
            raise RequestError(
                422,
                f"{where} has {len(query)} characters; the limit is {limits.max_query_chars} (max_query_chars). "
                "Shorten it (the encoder reads at most its max_length tokens anyway).",
                field=where,
            )
        try:
            query.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RequestError(
                422,
                f"{where} contains an unpaired UTF-16 surrogate ({query[e.start]!r} at position {e.start}), which "
                "is not valid Unicode text; send well-formed UTF-8 / paired \\u escapes.",
                field=where,
            ) from None
    return queries


def parse_retrieve(obj: dict[str, Any], limits: Limits) -> RetrieveRequest:
    """Validate a ``/retrieve`` body (see the module docstring).

    Raises:
        RequestError: 422 naming the offending field.
    """
    queries = parse_queries(obj, limits)
    topk = obj.get("topk")
    if topk is None:
        topk = limits.default_topk
    elif isinstance(topk, bool) or not isinstance(topk, (int, float)):
        raise RequestError(
            422, f'"topk" must be an integer from 1 to {limits.max_topk}, not a JSON {_json_type(topk)}.', field="topk"
        )
    elif isinstance(topk, float):
        if not math.isfinite(topk) or topk != int(topk):
            raise RequestError(
                422, f'"topk" must be a whole number from 1 to {limits.max_topk}, got {topk}.', field="topk"
            )
        topk = int(topk)
    if not 1 <= topk <= limits.max_topk:
        raise RequestError(
            422,
            f'"topk" is {topk}; it must be from 1 to {limits.max_topk} (the server\'s max_topk). Omit it or send null '
            f"for the default ({limits.default_topk}).",
            field="topk",
        )
    hits = len(queries) * topk
    if hits > limits.max_hits_per_request:
        raise RequestError(
            422,
            f"{len(queries)} queries x topk {topk} = {hits} hits; the limit is {limits.max_hits_per_request} per "
            "request (max_hits_per_request). Ask for fewer hits per query or split the queries over several requests.",
            field="topk" if obj.get("topk") is not None else "queries",
        )
    return_scores = obj.get("return_scores")
    if return_scores is None:
        return_scores = False
    elif not isinstance(return_scores, bool):
        raise RequestError(
            422,
            f'"return_scores" must be true or false, not a JSON {_json_type(return_scores)}.',
            field="return_scores",
        )
    return RetrieveRequest(queries, int(topk), return_scores)


def check_request_tokens(tokens: list[int], queries: int, limits: Limits) -> None:
    """Refuse a request whose queries take more than ``max_request_tokens`` of the encoder.

    Args:
        tokens: Tokens of each query, counted in order; a count that stopped above the limit is shorter than the
            queries (:meth:`~retriever_server.encoders.TokenCounter.count`).
        queries: How many queries the request holds.

    Raises:
        RequestError: 422 naming the limit and how to fit under it.
    """
    total = sum(tokens)
    if total > limits.max_request_tokens:
        counted = f"{total}" if len(tokens) == queries else f"more than {limits.max_request_tokens}"
        raise RequestError(
            422,
            f"The queries take {counted} tokens of the encoder (each counts its tokens up to the encoder's maximum "
            f"length, prefix and special tokens included); the limit is {limits.max_request_tokens} per request "
            "(max_request_tokens). Split the queries over several requests, or shorten them.",
            field="queries",
        )


def parse_encode(obj: dict[str, Any], limits: Limits) -> EncodeRequest:
    """Validate an ``/encode`` body.

    Raises:
        RequestError: 422 naming the offending field.
    """
    queries = parse_queries(obj, limits)
    kind = obj.get("kind")
    if kind is None:  # absent or null: the default, as for topk; any other value must name a kind
        kind = "query"
    elif kind not in ("query", "passage"):
        raise RequestError(
            422, f'"kind" must be "query" or "passage" (or absent), not {json.dumps(kind)}.', field="kind"
        )
    return EncodeRequest(queries, kind)


def _score(value: float) -> bytes:
    value = float(value)
    return repr(value).encode() if math.isfinite(value) else b"null"


def with_empty_queries(queries: list[str], result: JobResult | None, searched: list[int], topk: int) -> JobResult:
    """Spread the result of the searched (non-empty) queries back over all ``queries``; empty ones get no hits.

    Args:
        queries: All queries of the request.
        result: The job result for ``[queries[i] for i in searched]`` (``None`` when nothing was searched).
        searched: Positions of the non-empty queries.
        topk: Columns of the result.
    """
    import numpy as np

    if result is not None and len(searched) == len(queries):
        return result

    scores = np.full((len(queries), topk), -np.inf, dtype=np.float32)
    rows = np.full((len(queries), topk), -1, dtype=np.int64)
    if result is not None:
        scores[searched] = result.scores
        rows[searched] = result.rows
    return JobResult(np.empty((0, 0), np.float32), scores, rows)


def render_retrieve(store: CorpusStore, result: JobResult, return_scores: bool) -> bytes:
    """The ``/retrieve`` response body for one job, spliced from the stored passage bytes."""
    raw = store.raw
    per_query = []
    for score_row, row_ids in zip(result.scores.tolist(), result.rows.tolist(), strict=True):
        if return_scores:
            hits = [
                b'{"document":' + raw(row) + b',"score":' + _score(score) + b"}"
                for score, row in zip(score_row, row_ids, strict=True)
                if row >= 0
            ]
        else:
            hits = [raw(row) for row in row_ids if row >= 0]
        per_query.append(b"[" + b",".join(hits) + b"]")
    return b'{"result":[' + b",".join(per_query) + b"]}"


def render_encode(result: JobResult, model: str, normalized: bool) -> bytes:
    """The ``/encode`` response body."""
    emb = result.embeddings
    return json.dumps(
        {"embeddings": emb.tolist(), "dim": int(emb.shape[1]), "model": model, "normalized": normalized},
        separators=(",", ":"),
    ).encode()
