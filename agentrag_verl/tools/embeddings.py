"""Query embeddings from a service: the retriever's ``POST /encode`` or an OpenAI-compatible ``POST /embeddings``.

Rewards that score queries by similarity (the multi-stage search reward, Eq. 9) take an :class:`Embedder`; this
client is the one the reward managers build from ``reward.reward_kwargs.embedding``, so no reward part holds HTTP
code and a test can pass any object with an async ``embed``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

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
        timeout_s: Total timeout of one call.
    """

    url: str
    kind: Literal["retriever", "openai"] = "retriever"
    model: str = ""
    api_key_env: str | None = None
    timeout_s: float = 30.0

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
        """From ``{"kind", "url", "model", "api_key_env", "timeout_s"}`` (``reward.reward_kwargs.embedding``).

        >>> EmbeddingClient.from_config({"url": "http://127.0.0.1:8000"}).kind
        'retriever'
        """
        known = {"kind", "url", "model", "api_key_env", "timeout_s"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Unknown embedding option(s) {unknown}; choose from {sorted(known)}.")
        return cls(**{k: v for k, v in config.items() if v is not None})

    async def embed(self, queries: Sequence[str]) -> list[list[float]]:
        """One vector per query, in order.

        Raises:
            aiohttp.ClientError: The endpoint is unreachable or answers with an error status.
        """
        import aiohttp

        headers = {}
        token = os.environ.get(self.api_key_env) if self.api_key_env else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        root = self.url.rstrip("/")
        if self.kind == "retriever":
            path, body = "/encode", {"queries": list(queries), "kind": "query"}
        else:
            path, body = "/embeddings", {"input": list(queries), "model": self.model}
        timeout = aiohttp.ClientTimeout(total=float(self.timeout_s))
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            async with session.post(root + path, json=body) as response:
                response.raise_for_status()
                data = await response.json()
        if self.kind == "retriever":
            return data["embeddings"]
        return [d["embedding"] for d in sorted(data["data"], key=lambda d: d.get("index", 0))]
