"""HiPRAG's agent loop: the shared tag-format loop plus the over-search re-answers (§3.2).

After each search the policy answers the search query as a standalone question (the format's ``reanswer`` prompt),
concurrently with the trajectory; the over-search detector (Figure 5) compares that re-answer with the step's
conclusion. Re-answers are shared by the trajectories of one worker batch (identical queries are answered once,
with the current weights), never enter the response tokens, and are recorded in ``extra_fields``
(``agentrag_reanswers``, keyed by the step record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.search_agent_loop import Rollout, SearchAgentLoop, batch_scope
from agentrag_verl.methods.hiprag.grammar import FORMAT

__all__ = ["HipragAgentLoop"]

logger = logging.getLogger(__name__)


class HipragAgentLoop(SearchAgentLoop):
    """:class:`SearchAgentLoop` with re-answers (option ``reanswers``, on in the shipped ``hiprag_agent`` entry)."""

    def after_search(
        self, state: Rollout, step: int, query: str, sampling_params: dict[str, Any]
    ) -> list[Coroutine[Any, Any, None]]:
        return [self.reanswer(state, step, query, sampling_params)] if self.options.reanswers else []

    async def reanswer(self, state: Rollout, step: int, query: str, sampling_params: dict[str, Any]) -> None:
        """The re-answer o' of a search query, shared across the batch scope."""
        params = self.aux_params(sampling_params, self.options.reanswer_max_tokens)
        key = (query, int(self.options.reanswer_max_tokens))
        scope = batch_scope()
        future = scope.cache.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            scope.cache[key] = future
            prompt = self.format.prompts.get("reanswer") or FORMAT.prompts["reanswer"]
            try:
                text = await self.aux_generate(state, prompt.messages("", query=query), params)
            except Exception as e:  # the trajectory must not fail because of an auxiliary generation
                scope.cache.pop(key, None)
                future.set_exception(e)
                future.exception()  # mark retrieved
                logger.warning("re-answer generation failed for %r: %r", query, e)
                return
            future.set_result(text)
        else:
            try:
                text = await asyncio.shield(future)
            except Exception:
                return
        state.reanswers.append({F.AUX_STEP: step, F.AUX_QUERY: query, F.AUX_TEXT: text})
