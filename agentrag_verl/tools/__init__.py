"""Retrieval for search agents: the Search-R1 wire-format client shared by every rollout path, and a verl
function-calling tool.

- :class:`~agentrag_verl.tools.retriever_client.RetrieverClient` / :func:`get_retriever_client`: async HTTP client
  (shared connection pool per event loop, timeout, retries with exponential backoff on connection errors, timeouts
  and 5xx; never on 4xx).
- :class:`~agentrag_verl.tools.search_tool.SearchTool`: ``verl.tools.base_tool.BaseTool`` for verl's ``tool_agent``
  loop (hermes ``query_list`` calls).

Names resolve lazily: ``import agentrag_verl.tools`` imports neither verl nor torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "RetrieverClient": "retriever_client",
    "RetrieverConfig": "retriever_client",
    "RetrievalError": "retriever_client",
    "get_retriever_client": "retriever_client",
    "SearchTool": "search_tool",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
