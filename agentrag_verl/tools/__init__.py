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

from agentrag_verl._lazy import lazy_exports

_EXPORTS = {
    "RetrieverClient": "retriever_client",
    "RetrieverConfig": "retriever_client",
    "RetrievalError": "retriever_client",
    "get_retriever_client": "retriever_client",
    "SearchTool": "search_tool",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
