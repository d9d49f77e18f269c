"""AutoSearch's agent loop: the shared tag-format loop plus the intermediate answers (Prompt 1, Eq. 5).

After every retrieval step (every search action the environment answered, an empty query included) the policy
answers the question from the trajectory so far, concurrently with the trajectory. The answers never enter the
response tokens; they are recorded in ``extra_fields`` (``agentrag_intermediate_answers``, keyed by the step
record) and give the per-step rewards their t_c (Eq. 6).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.search_agent_loop import Rollout, SearchAgentLoop
from agentrag_verl.methods.autosearch.grammar import INTERMEDIATE_ANSWER_PROMPT
from agentrag_verl.metrics import extract_answer

__all__ = ["AutoSearchAgentLoop"]

logger = logging.getLogger(__name__)


class AutoSearchAgentLoop(SearchAgentLoop):
    """:class:`SearchAgentLoop` with intermediate answers (option ``intermediate_answers``, on in the shipped
    ``autosearch_agent`` entry)."""

    def after_retrieval_step(
        self, state: Rollout, step: int, question: str, sampling_params: dict[str, Any]
    ) -> list[Coroutine[Any, Any, None]]:
        if not self.options.intermediate_answers:
            return []
        return [self.intermediate_answer(state, step, question, self.decode(state.response_ids), sampling_params)]

    async def intermediate_answer(
        self, state: Rollout, step: int, question: str, trajectory: str, sampling_params: dict[str, Any]
    ) -> None:
        """The intermediate answer a_t from the trajectory so far."""
        prompt = self.format.prompts.get("intermediate_answer") or INTERMEDIATE_ANSWER_PROMPT
        params = self.aux_params(sampling_params, self.options.intermediate_answer_max_tokens)
        try:
            text = await self.aux_generate(state, prompt.messages(question, trajectory=trajectory), params)
        except Exception as e:
            logger.warning("intermediate-answer generation failed at step %d: %r", step, e)
            return
        state.intermediate_answers.append({F.AUX_STEP: step, F.AUX_TEXT: text, F.AUX_ANSWER: extract_answer(text)})
