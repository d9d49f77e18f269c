"""``SearchTool``: the retriever as a verl function-calling tool, for verl's own ``tool_agent`` loop (hermes
``<tool_call>{"name": "search", "arguments": {"query_list": [...]}}</tool_call>``).

Same client as the agent loops (:mod:`agentrag_verl.tools.retriever_client`: shared pool, timeout, retries with
backoff) and the same passage rendering (Search-R1's ``Doc i(Title: ...) text`` lines,
``docs/decisions.md#retrieval``); the results of several queries are joined by ``\\n---\\n`` as Search-R1's verl tool
did. A failed retrieval is returned to the model as text (the trajectory continues) and counted in the metrics.

Tool YAML (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)::

    tools:
      - class_name: agentrag_verl.tools.search_tool.SearchTool
        config:
          type: native
          retriever_url: http://127.0.0.1:8000/retrieve
          topk: 3
          timeout_s: 30
          max_retries: 3

Raise ``actor_rollout_ref.rollout.multi_turn.max_tool_response_length`` (256 characters by default) to fit
three passages (~2000).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from agentrag_verl.formats.base import format_docs
from agentrag_verl.tools.retriever_client import RetrievalError, RetrieverConfig, doc_id, get_retriever_client

__all__ = ["SearchTool", "DEFAULT_SCHEMA"]

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Searches Wikipedia for passages relevant to each query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Queries to search; one list of passages is returned per query.",
                }
            },
            "required": ["query_list"],
        },
    },
}
"""The tool schema used when the YAML gives none (Search-R1's ``search`` tool with ``query_list``)."""


class SearchTool(BaseTool):
    """Search tool for verl's ``ToolAgentLoop``.

    Args:
        config: The YAML ``config`` block: ``retriever_url``, ``topk`` (3), ``timeout_s`` (30), ``max_retries`` (3),
            ``backoff_s`` (0.5), ``max_queries`` (maximum queries per call, 5).
        tool_schema: OpenAI function schema; :data:`DEFAULT_SCHEMA` when ``None``.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)
        super().__init__(config, schema)
        self.retriever = RetrieverConfig(
            url=str(config.get("retriever_url", RetrieverConfig.url)),
            topk=int(config.get("topk", 3)),
            timeout_s=float(config.get("timeout_s", 30.0)),
            max_retries=int(config.get("max_retries", 3)),
            backoff_s=float(config.get("backoff_s", 0.5)),
        )
        self.max_queries = int(config.get("max_queries", 5))

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Retrieve passages for ``parameters["query_list"]`` (a single ``query`` string is accepted too).

        Returns:
            ``(ToolResponse(text=passages), 0.0, metrics)`` with metrics ``search/queries``, ``search/errors``,
            ``search/latency_s``, ``search/doc_ids`` (per query).
        """
        queries = parameters.get("query_list", parameters.get("query"))
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
            text = 'Error: "query_list" must be a non-empty list of non-empty strings, e.g. {"query_list": ["x"]}.'
            return (
                ToolResponse(text=text),
                0.0,
                {"search/queries": 0, "search/errors": 1, "search/latency_s": 0.0, "search/doc_ids": []},
            )
        queries = [q.strip() for q in queries[: self.max_queries]]
        t0 = time.perf_counter()
        try:
            results = await get_retriever_client(self.retriever).search(queries, self.retriever.topk)
        except RetrievalError as e:
            logger.warning("search tool: retrieval failed: %s", e)
            metrics = {
                "search/queries": len(queries),
                "search/errors": 1,
                "search/latency_s": time.perf_counter() - t0,
                "search/doc_ids": [],
            }
            return ToolResponse(text=f"Search failed ({e.kind}); no documents were retrieved."), 0.0, metrics
        text = "\n---\n".join(format_docs(hits) for hits in results)
        metrics = {
            "search/queries": len(queries),
            "search/errors": 0,
            "search/latency_s": time.perf_counter() - t0,
            "search/doc_ids": [[doc_id(h) for h in hits] for hits in results],
        }
        return ToolResponse(text=text), 0.0, metrics
