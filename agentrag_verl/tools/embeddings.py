"""Query embeddings from a service: the retriever's ``POST /encode`` or an OpenAI-compatible ``POST /embeddings``.

Rewards that score queries by similarity (the multi-stage search reward, Eq. 9) take an :class:`Embedder`; this
client is the one the reward managers build from ``reward.reward_kwargs.embedding``, so no reward part holds HTTP
code and a test can pass any object with an async ``embed``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol

from agentrag_verl.http import RetryPolicy, httpx_client, httpx_request

__all__ = ["Embedder", "EmbeddingClient", "EMBEDDING_KINDS"]

EMBEDDING_KINDS = ("retriever", "openai")


class Embedder(Protocol):
    """Anything that embeds queries: ``await embed(["q1", "q2"]) -> [[...], [...]]`` (one vector per query)."""

    async def embed(self, queries: Sequence[str]) -> list[list[float]]: ...


@dataclass(frozen=True)
class EmbeddingClient:
    """Embeds queries with one HTTP call per batch.

    Args:
        url: The retriever root (``http://127.0.0.1:8000``; ``/encode`` is appended) or an OpenAI-compatible ``/v1``
            root (``/embeddings`` is appended).
        kind: ``retriever`` or ``openai``.
        model: The embedding model name (``openai`` only).
        api_key_env: Environment variable holding a bearer token (read at call time, never logged).
        timeout_s: Deadline of one attempt.
        max_retries: Retries of a failed call under the package's retry policy (:mod:`agentrag_verl.http`).
    """

    url: str
    kind: Literal["retriever", "openai"] = "retriever"
    model: str = ""
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.url:
            raise ValueError(
                "Query embeddings need an endpoint: set reward.reward_kwargs.embedding.url (the retriever root, e.g. "
                "http://127.0.0.1:8000, or an OpenAI-compatible /v1 root)."
            )
        if self.kind not in EMBEDDING_KINDS:
            raise ValueError(
                f"Unknown embedding kind {self.kind!r}; choose one of {list(EMBEDDING_KINDS)} "
                "(set reward.reward_kwargs.embedding.kind)."
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EmbeddingClient:
        """From ``{"kind", "url", "model", "api_key_env", "timeout_s", "max_retries"}``
        (``reward.reward_kwargs.embedding``).

        >>> EmbeddingClient.from_config({"url": "http://127.0.0.1:8000"}).kind
        'retriever'
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Unknown embedding option(s) {unknown}; choose from {sorted(known)}.")
        return cls(**{k: v for k, v in config.items() if v is not None})

    async def embed(self, queries: Sequence[str]) -> list[list[float]]:
        """One vector per query, in order.

        Raises:
            agentrag_verl.http.RequestError: The endpoint stayed unreachable or answered with an error status after
                the retries.
        """
        headers = {}
        token = os.environ.get(self.api_key_env) if self.api_key_env else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        root = self.url.rstrip("/")
        if self.kind == "retriever":
            url, body = root + "/encode", {"queries": list(queries), "kind": "query"}
        else:
            url, body = root + "/embeddings", {"input": list(queries), "model": self.model}
        policy = RetryPolicy(max_retries=self.max_retries)
        async with httpx_client(self.timeout_s, max_connections=1, headers=headers) as client:
            data = (await policy.call(lambda: httpx_request(client, "POST", url, json=body))).json()
        if self.kind == "retriever":
            return data["embeddings"]
        return [d["embedding"] for d in sorted(data["data"], key=lambda d: d.get("index", 0))]
