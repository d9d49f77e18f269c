"""ReasonRAG's staged workflow as a verl agent loop (Process vs. Outcome Reward, Zhang et al.; Alg. 1, Figures 12-13;
decisions in ``docs/methods/reasonrag.md#decisions``).

Each stage is a separate chat: a Reasoning stage (Figure 12 system prompt, the question and the previous stage
outputs) ends in ``So the next query is <query>q</query>`` or ``So the answer is <answer>a</answer>``; after a
query the retriever runs and a Grounding stage (Figure 13, the passages as ``<reference>``) writes
``<evidence>...</evidence>``; then Reasoning again, up to B searches (default 3: the authors' 7 stage outputs).
A Reasoning stage past the budget that queries is dropped (the query is not run, so it does not stay in the
transcript) and the stage is generated again with its assistant turn pre-filled with ``So the answer is <answer>``
(masked), to ``</answer>``.

The response is the transcript that :func:`agentrag_verl.methods.reasonrag.grammar.parse` reads: the stage outputs
joined by
single spaces (the space tokens are mask 0). Retrieved passages are only in the grounding prompts, never in the
response. ``prompt_ids`` is the first Reasoning prompt (the dataset row's ``raw_prompt``).

Caveat for RL: later stages were generated under other prompts than ``prompt_ids + response``, so their
log-probabilities under the trainer's single sequence differ from the rollout's. ReasonRAG trains with step-level
DPO (§2.3); use this loop for evaluation, MCTS/data generation and SFT, or accept the off-prompt bias.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.openai_client import cut_at_stop
from agentrag_verl.agent_loops.search_agent_loop import EMPTY_QUERY_OBSERVATION, Rollout, SearchAgentLoop
from agentrag_verl.methods.reasonrag import grammar as reasonrag

__all__ = ["ReasonRAGAgentLoop"]

REASONING_STOP = ("</query>", "</answer>")
GROUNDING_STOP = ("</evidence>",)


class ReasonRAGAgentLoop(SearchAgentLoop):
    """verl agent loop of ReasonRAG's Reasoning / Grounding stages (see the module docstring).

    Options are those of :class:`~agentrag_verl.agent_loops.config.SearchLoopConfig` (``format`` must be
    ``reasonrag``; re-answers and intermediate answers do not apply).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.format_name != "reasonrag":
            raise ValueError(
                f"ReasonRAGAgentLoop runs the reasonrag format only, got format={self.format_name!r}; use "
                "SearchAgentLoop for the tag formats (agentrag_verl/agent_loops/agent_loops.yaml)."
            )

    async def stage(
        self,
        state: Rollout,
        messages: list[dict[str, str]],
        sampling_params: dict[str, Any],
        stop: tuple[str, ...],
        prefill: str = "",
    ) -> str:
        """Generate one stage output from its own prompt; appends ``prefill`` (mask 0) and the output (mask 1)."""
        if state.response_ids:
            self.append_observation(state, " ")
            state.observations -= 1  # a separator, not an observation turn
        prompt_ids = await self.ct_build_initial_tokens(messages)
        if prefill:
            prefill_ids = self.encode(prefill)
            prompt_ids = prompt_ids + prefill_ids
            self.append_observation(state, prefill)
            state.observations -= 1
        if self.room(state) <= 0:
            state.length_exhausted = True
            return prefill
        # The stage prompt already ends where the stage output starts: generate from it, not from the transcript.
        ids, logprobs = await self.policy_generation(state, uuid4().hex, prompt_ids, sampling_params, stop)
        start = len(state.response_ids)
        state.append(ids, 1, logprobs)
        state.stages.append({"prompt_ids": list(prompt_ids), "start": start, "end": len(state.response_ids)})
        return prefill + cut_at_stop(self.decode(ids), stop)

    async def _run(
        self,
        state: Rollout,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        aux_tasks: list,
        closed_book: bool | None = None,
    ) -> None:
        spec = self.spec
        question = state.question
        closed_book = self.options.closed_book if closed_book is None else closed_book
        thoughts: list[str] = []
        reference = ""  # the Grounding prompt's passages (or the retriever's failure), truncated
        grounding = False
        forced = False
        searches_done = 0
        while self.room(state) > 0:
            if grounding:
                messages = reasonrag.GROUNDING_PROMPT.messages(
                    question, previous_thoughts=reasonrag.transcript(thoughts), reference=reference
                )
                text = await self.stage(state, messages, sampling_params, GROUNDING_STOP)
                thoughts.append(text)
                grounding = False
                continue
            messages = reasonrag.reasoning_messages(question, thoughts)
            prefill = spec.force_answer_prefix if forced else ""
            n_before = len(state.response_ids)
            text = await self.stage(
                state, messages, sampling_params, REASONING_STOP if not forced else ("</answer>",), prefill
            )
            if len(state.response_ids) == n_before or state.response_mask[-1] != 1:
                return  # nothing generated (budget exhausted by the separator / prefill)
            end_index = len(state.response_ids) - 1
            action = spec.extract_action(text)
            past_budget = searches_done >= self.budget or closed_book
            if action is not None and action.kind == "search" and past_budget and not forced:
                # past the budget the query is not run: drop the stage output (and its separator), force the answer
                state.truncate(n_before)
                state.generations -= 1
                state.budget_exhausted = True
                forced = True
                continue
            thoughts.append(text)
            if action is None:
                state.add_step(F.KIND_INVALID, end_index)
                return
            if action.kind == "answer":
                state.add_step(F.KIND_ANSWER, end_index)
                return
            if forced:
                state.add_step(F.KIND_INVALID, end_index, query=action.content)
                return
            searches_done += 1
            if not action.content:
                state.add_step(F.KIND_INVALID, end_index, query="", observed=True)
                reference = EMPTY_QUERY_OBSERVATION
                grounding = True
                continue
            docs_text, doc_ids, error, _ = await self.retrieve(state, action.content)
            reference = self.observation_text(docs_text)  # reasonrag's template is "{docs}": truncation only
            state.num_searches += 1
            state.add_step(
                F.KIND_SEARCH, end_index, query=action.content, doc_ids=doc_ids, retriever_error=error, observed=True
            )
            grounding = True
        state.length_exhausted = True
