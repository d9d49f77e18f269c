"""HiPRAG's agent loop: the shared tag-format loop plus the over-search re-answers (§3.2).

After each search the policy answers the search query as a standalone question, concurrently with the trajectory;
the over-search detector (Figure 5) compares that re-answer with the step's conclusion. Option ``reanswer_mode``:
``prompt`` (the paper's) sends the format's ``reanswer`` prompt; ``closed_book`` asks the query as the row's
question, in the row's own prompt, through the format's no-search path (a search the policy opens is cut and the
answer forced, as in the knowledge probe), and the re-answer is that final answer (:data:`NO_ANSWER` when it only
restates the query). Re-answers are shared by the trajectories of one worker batch (identical queries are answered
once, with the current weights), never enter the response tokens, and are recorded in ``extra_fields``
(``agentrag_reanswers``, keyed by the step record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.search_agent_loop import Rollout, SearchAgentLoop, batch_scope
from agentrag_verl.methods.hiprag.grammar import FORMAT
from agentrag_verl.metrics import normalize_answer

__all__ = ["HipragAgentLoop", "ask_instead", "adds_to", "NO_ANSWER"]

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
        key = (query, int(self.options.reanswer_max_tokens), self.options.reanswer_mode)
        scope = batch_scope()
        future = scope.cache.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            scope.cache[key] = future
            try:
                if self.options.reanswer_mode == "closed_book":
                    text = await self.closed_book_answer(state, query, params)
                else:
                    prompt = self.format.prompts.get("reanswer") or FORMAT.prompts["reanswer"]
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

    async def closed_book_answer(self, state: Rollout, question: str, params: dict[str, Any]) -> str:
        """The policy's answer to ``question`` without retrieval: the format's no-search path, in the row's prompt
        (:func:`ask_instead`), capped at ``reanswer_max_tokens``: the final answer's text, or :data:`NO_ANSWER` when
        there is none or it only restates ``question`` (:func:`adds_to`)."""
        messages = ask_instead(state.prompt_messages, state.question, question)
        if messages is None:  # the row's prompt does not hold its question verbatim: the format's own prompt
            messages = self.format.policy_prompt(None).messages(question)
        sub = Rollout(question=question, aux=True, max_length=int(self.options.reanswer_max_tokens))
        prompt_ids = await self.ct_build_initial_tokens(messages)
        await self._run(sub, prompt_ids, params, [], closed_book=True)
        state.aux_versions.extend(sub.aux_versions)
        state.add_aux_cost(sub.generations, len(prompt_ids), sub.generated_tokens, sub.timings[F.TIME_GENERATE])
        action = self.spec.extract_action(self.decode(sub.response_ids))
        answer = action.content if action is not None and action.kind == "answer" else ""
        return answer if adds_to(answer, question) else NO_ANSWER


NO_ANSWER = "I do not know the answer."
"""A closed-book re-answer that gives no answer (none, or only words of the question it was asked): a non-answer, so
that no judge takes a conclusion holding the question's words for its equivalent."""


def adds_to(answer: str, question: str) -> bool:
    """Whether ``answer`` holds a word that ``question`` does not (SQuAD-normalized): an answer made only of the
    question's words restates it (a 135M policy's closed-book "answer" to a question it does not know, e.g. "Kessrow
    Bridge" to "Who built Kessrow Bridge?"). A choice question's right answer is among its words; such questions
    lose their re-answer.

    >>> adds_to("Tokyo", "In which city is Japan?"), adds_to("Lake of the Lake", "On which lake of the island?")
    (True, False)
    """
    return not set(normalize_answer(answer).split()) <= set(normalize_answer(question).split())


def ask_instead(messages: Sequence[Mapping[str, Any]], question: str, other: str) -> list[dict[str, Any]] | None:
    """``messages`` with ``question`` replaced by ``other`` in the last user turn that holds it; ``None`` if none does.

    >>> rows = [{"role": "system", "content": "S"}, {"role": "user", "content": "Question: Who wrote Hamlet?"}]
    >>> ask_instead(rows, "Who wrote Hamlet?", "capital of France")[1]["content"]
    'Question: capital of France'
    >>> ask_instead(rows, "Who painted it?", "x") is None
    True
    """
    out = [dict(m) for m in messages]
    for m in reversed(out):
        content = m.get("content")
        if m.get("role") == "user" and question and isinstance(content, str) and question in content:
            m["content"] = content.replace(question, other)
            return out
    return None
