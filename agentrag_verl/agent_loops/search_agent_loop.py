"""Multi-turn search rollout for the tag formats (Search-R1 / AutoSearch, HiPRAG, multi-stage, Search-P1) as a
verl agent loop (HiPRAG Alg. 1, Search-P1 Alg. 2, Search-R1's rollout; decisions in
``docs/decisions.md#rollout-and-budgets``).

One loop, driven by the format's :class:`~agentrag_verl.formats.ActionSpec`:

1. write the format's ``response_prefix`` (masked), then generate until one of the format's stop strings;
2. extract the action from the model's new text (the server's token ids are kept as generated, never
   re-tokenized); an answer (or no action) ends the episode;
3. a search runs the retriever (:mod:`agentrag_verl.tools.retriever_client`), renders the observation with the
   format's template (HiPRAG: ``<context>{docs}</context>\\n<conclusion>``; Search-R1 / multi-stage:
   ``<information>``; Search-P1: ``<tool_response>``), truncates the passages to ``max_observation_tokens`` and
   appends it with ``response_mask = 0`` (injected tags included). An empty query gets an observation saying so
   (no retriever call); it is still a retrieval step, with its intermediate answer (AutoSearch Eq. 1 scores it
   invalid);
4. the budget B counts what the format's algorithm counts (``ActionSpec.budget_unit``) and, once used up, the answer
   is forced (``ActionSpec.after_budget``): HiPRAG Alg. 1 counts steps and after the B-th ``</conclusion>``
   appends ``</step>\\n</think>\\n<answer>``; Search-P1 Alg. 2 appends ``<answer>`` right after the B-th tool
   response; the Search-R1 grammars give one final turn in which a search is not run: a search opened there is cut
   from the response before its opening tag (the tokens after the cut are dropped, the kept ones are the model's
   own) and the answer is forced. No unexecuted search stays in the response;
5. the response never exceeds ``rollout.response_length`` tokens: each generation gets at most the remaining
   budget, and an observation that does not fit is cut and ends the episode.

A retriever failure (after the client's retries) becomes an observation saying so; the trajectory continues and
the failure is counted. Auxiliary policy generations (a method's loop adds them through
:meth:`SearchAgentLoop.after_search` and :meth:`SearchAgentLoop.after_retrieval_step`: HiPRAG's re-answers,
AutoSearch's intermediate answers) go
through the same ``server_manager``, run concurrently with the trajectory, never enter the response tokens, and are
recorded in ``extra_fields`` (:mod:`agentrag_verl.agent_loops.fields`) with their cost, keyed by the index of the
step record they belong to (:mod:`agentrag_verl.agent_loops.steps` maps them back to steps).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.config import SearchLoopConfig
from agentrag_verl.agent_loops.openai_client import cut_at_stop
from agentrag_verl.agent_loops.sampling import check_rollout_engine, stop_params, without_stop
from agentrag_verl.agent_loops.steps import step_record
from agentrag_verl.formats import Format, get_format
from agentrag_verl.formats.base import format_docs
from agentrag_verl.tools.retriever_client import RetrievalError, doc_id, get_retriever_client

__all__ = ["SearchAgentLoop", "Rollout", "BatchScope", "batch_scope", "truncate_tokens", "question_of"]

logger = logging.getLogger(__name__)

EMPTY_QUERY_OBSERVATION = "The search query is empty; write a non-empty query between the search tags."
RETRIEVER_ERROR_OBSERVATION = "Search failed ({error}); no documents were retrieved."


def truncate_tokens(ids: list[int], max_tokens: int, side: str) -> list[int]:
    """Keep at most ``max_tokens`` of ``ids``, dropping the ``side`` part (``right``, ``left`` or ``middle``).

    >>> truncate_tokens([1, 2, 3, 4, 5], 2, "right"), truncate_tokens([1, 2, 3, 4, 5], 2, "left")
    ([1, 2], [4, 5])
    >>> truncate_tokens([1, 2, 3, 4, 5], 3, "middle")
    [1, 4, 5]
    """
    if max_tokens <= 0 or len(ids) <= max_tokens:
        return list(ids)
    if side == "left":
        return list(ids[-max_tokens:])
    if side == "middle":
        head = max_tokens // 2
        return list(ids[:head]) + list(ids[len(ids) - (max_tokens - head) :])
    return list(ids[:max_tokens])


def question_of(kwargs: dict[str, Any]) -> str:
    """The question of a dataset row: ``extra_info.question``, else the last user message of ``raw_prompt``."""
    extra = kwargs.get("extra_info") or {}
    if isinstance(extra, dict) and extra.get("question"):
        return str(extra["question"])
    for message in reversed(list(kwargs.get("raw_prompt") or [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""


@dataclass
class Rollout:
    """Mutable state of one trajectory: the response tokens and everything ``extra_fields`` reports."""

    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    has_logprobs: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)
    num_searches: int = 0
    budget_exhausted: bool = False
    length_exhausted: bool = False
    retriever_errors: int = 0
    reanswers: list[dict[str, Any]] = field(default_factory=list)
    intermediate_answers: list[dict[str, Any]] = field(default_factory=list)
    aux_cost: dict[str, int] = field(
        default_factory=lambda: {F.COST_CALLS: 0, F.COST_PROMPT_TOKENS: 0, F.COST_COMPLETION_TOKENS: 0}
    )
    timings: dict[str, float] = field(
        default_factory=lambda: {F.TIME_TOTAL: 0.0, F.TIME_GENERATE: 0.0, F.TIME_RETRIEVE: 0.0, F.TIME_AUX: 0.0}
    )
    generations: int = 0
    generated_tokens: int = 0
    """Tokens the policy generated, those later cut from the response included."""
    observations: int = 0
    server_extra_fields: dict[str, Any] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)
    """Weight versions (``global_steps``) the trajectory's own generations ran under, first and last of each."""
    aux_versions: list[int] = field(default_factory=list)
    """The same for the auxiliary generations (re-answers, intermediate answers)."""
    stages: list[dict[str, Any]] = field(default_factory=list)
    """A staged loop's generations and their own prompts (:data:`~agentrag_verl.agent_loops.fields.STAGES`)."""
    question: str = ""
    """The row's question (:func:`question_of`)."""
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)
    """The row's chat messages (``raw_prompt``), for auxiliary rollouts that ask another question the same way."""
    aux: bool = False
    """An auxiliary rollout nested in a trajectory (HiPRAG's closed-book re-answer): its generations go to the
    loop's ``aux_server_manager`` and count as auxiliary; it never enters the trajectory's response."""
    max_length: int | None = None
    """Response token cap of this rollout; ``None``: the loop's ``response_length``."""

    def note_versions(self, output: Any, aux: bool = False) -> None:
        """Record the weight versions a generation's ``TokenOutput`` reports: under the async trainers one that was
        aborted for a weight update is resumed under the new weights (verl's ``FullyAsyncLLMServerClient`` reports
        the first and last version in ``min_global_steps`` / ``max_global_steps``)."""
        extra = getattr(output, "extra_fields", None) or {}
        for key in ("min_global_steps", "max_global_steps", "global_steps"):
            if isinstance(extra.get(key), int):
                (self.aux_versions if aux else self.versions).append(int(extra[key]))

    def add_aux_cost(self, calls: int, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        """Count auxiliary generations (re-answers, intermediate answers) in ``aux_cost`` and the aux timing."""
        self.aux_cost[F.COST_CALLS] += calls
        self.aux_cost[F.COST_PROMPT_TOKENS] += prompt_tokens
        self.aux_cost[F.COST_COMPLETION_TOKENS] += completion_tokens
        self.timings[F.TIME_AUX] += seconds

    def append(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        """Append tokens with one mask value (logprobs default to 0.0, as verl pads them)."""
        self.response_ids.extend(ids)
        self.response_mask.extend([mask] * len(ids))
        if logprobs is not None and len(logprobs) == len(ids):
            self.has_logprobs = True
            self.response_logprobs.extend(float(x) for x in logprobs)
        else:
            self.response_logprobs.extend([0.0] * len(ids))

    def truncate(self, n: int) -> None:
        """Drop every response token from index ``n`` on (and the stages that wrote them)."""
        del self.response_ids[n:], self.response_mask[n:], self.response_logprobs[n:]
        self.stages = [st for st in self.stages if st["end"] <= n]

    def add_step(
        self,
        kind: str,
        end_token_index: int,
        query: str | None = None,
        doc_ids: list[str] | None = None,
        retriever_error: str | None = None,
        observed: bool = False,
    ) -> int:
        """Record an action (:func:`~agentrag_verl.agent_loops.steps.step_record`); returns its index in ``steps``."""
        self.steps.append(
            step_record(
                kind,
                end_token_index,
                observed=observed,
                query=query,
                doc_ids=doc_ids or [],
                retriever_error=retriever_error,
            )
        )
        return len(self.steps) - 1

    def extra_fields(self, format_name: str) -> dict[str, Any]:
        """The ``extra_fields`` of :mod:`~agentrag_verl.agent_loops.fields` (plain JSON types)."""
        return {
            F.FORMAT: format_name,
            F.STEPS: self.steps,
            F.NUM_SEARCHES: int(self.num_searches),
            F.BUDGET_EXHAUSTED: bool(self.budget_exhausted),
            F.RETRIEVER_ERRORS: int(self.retriever_errors),
            F.REANSWERS: sorted(self.reanswers, key=lambda r: r[F.AUX_STEP]),
            F.INTERMEDIATE_ANSWERS: sorted(self.intermediate_answers, key=lambda r: r[F.AUX_STEP]),
            F.AUX_COST: dict(self.aux_cost),
            F.TIMINGS: {k: float(v) for k, v in self.timings.items()},
            F.LENGTH_EXHAUSTED: bool(self.length_exhausted),
            F.WEIGHT_VERSIONS: {
                F.VERSIONS_TRAJECTORY: [min(self.versions), max(self.versions)] if self.versions else None,
                F.VERSIONS_AUX: [min(self.aux_versions), max(self.aux_versions)] if self.aux_versions else None,
            },
            F.STAGES: self.stages,
        }


class BatchScope:
    """Auxiliary generations shared by the trajectories running concurrently in one worker (≈ one worker batch),
    e.g. the re-answer of a query that several trajectories searched.

    verl starts every sample of a worker batch as a task at once; the cache lives while at least one agentrag
    trajectory is running in this event loop and is cleared when the last one ends, so identical requests
    are generated once per batch and never with the weights of an earlier step.
    """

    def __init__(self) -> None:
        self.active = 0
        self.cache: dict[tuple[Any, ...], asyncio.Future] = {}

    def enter(self) -> None:
        self.active += 1

    def exit(self) -> None:
        self.active -= 1
        if self.active <= 0:
            self.active = 0
            self.cache.clear()


_SCOPES: dict[int, BatchScope] = {}


def batch_scope() -> BatchScope:
    """The :class:`BatchScope` of the running event loop."""
    loop = asyncio.get_running_loop()
    scope = _SCOPES.get(id(loop))
    if scope is None:
        scope = _SCOPES[id(loop)] = BatchScope()
    return scope


class SearchAgentLoop(AgentLoopBase):
    """verl agent loop of the tag formats; see the module docstring and :class:`SearchLoopConfig` for options.

    Args:
        *args: verl's :class:`AgentLoopBase` arguments (trainer config, server manager, tokenizer, ...).
        **kwargs: verl's keyword arguments plus the agent-loop YAML entry's keys (:class:`SearchLoopConfig`).
    """

    _VERL_KWARGS = (
        "trainer_config",
        "server_manager",
        "tokenizer",
        "processor",
        "dataset_cls",
        "data_config",
        "hf_model_type",
        "tools",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k not in self._VERL_KWARGS}
        kwargs.pop("tools", None)
        super().__init__(*args, **kwargs)
        custom = self.rollout_config.get("custom", None)
        self.options = SearchLoopConfig.from_sources(options, custom)
        self.engine = check_rollout_engine(
            self.rollout_config.get("name", "vllm"), bool(self.rollout_config.get("skip_tokenizer_init", False))
        )
        """Rollout engine: the stop-string parameters differ between vLLM and SGLang (:mod:`.sampling`)."""
        self.format: Format = get_format(self.options.format)
        self.format_name = str(self.options.format).strip().lower()
        self.spec = self.format.action_spec
        self.budget = self.spec.budget if self.options.budget is None else self.options.budget
        """B: search actions or steps (``spec.budget_unit``) before the answer is forced."""
        if self.spec.budget_unit == "steps" and self.budget < 1:
            raise ValueError(
                f"The {self.format_name} rollout counts steps (budget_unit='steps'); its budget must be >= 1, got "
                f"{self.budget}. Set budget in the agent-loop YAML or actor_rollout_ref.rollout.custom.agentrag."
            )
        self.response_length = int(self.rollout_config.response_length)
        self.aux_server_manager = self.server_manager
        """Client of the auxiliary generations (default: the rollout server, i.e. the policy itself)."""

    # ------------------------------------------------------------------------------------------------ helpers

    def room(self, state: Rollout) -> int:
        """Response tokens ``state`` may still take (its ``max_length``, else ``response_length``)."""
        return (state.max_length or self.response_length) - len(state.response_ids)

    def encode(self, text: str) -> list[int]:
        """Tokenize environment text (no special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Decode model tokens without special tokens."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    async def generate(
        self,
        state: Rollout,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        stop: tuple[str, ...],
    ) -> list[int]:
        """One policy generation of the trajectory, appended with mask 1; returns its token ids."""
        ids, logprobs = await self.policy_generation(
            state, request_id, prompt_ids + state.response_ids, sampling_params, stop
        )
        state.append(ids, 1, logprobs)
        return ids

    async def policy_generation(
        self,
        state: Rollout,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        stop: tuple[str, ...],
    ) -> tuple[list[int], list[float] | None]:
        """Generate from ``prompt_ids`` until a stop string, within the remaining response budget; returns the
        tokens (through the first stop string) and their log-probs, counted in ``state``.

        A generation the async trainers abort for a weight update is resumed by verl's client from the tokens it
        has; the engine then checks stop strings in the resumed part only, so one split by the abort
        (``</sea`` | ``rch>``) is missed and the model runs on. The tokens after the first stop string are
        dropped here, which leaves the layout a generation without the abort would have.
        """
        remaining = self.room(state)
        params = {**sampling_params, **stop_params(self.engine, stop), "max_tokens": remaining}
        t0 = time.perf_counter()
        server = self.aux_server_manager if state.aux else self.server_manager
        output = await server.generate(request_id=request_id, prompt_ids=prompt_ids, sampling_params=params)
        state.timings[F.TIME_GENERATE] += time.perf_counter() - t0
        state.generations += 1
        if not state.server_extra_fields and getattr(output, "extra_fields", None):
            state.server_extra_fields = dict(output.extra_fields)
        state.note_versions(output, aux=state.aux)
        ids = list(output.token_ids)[:remaining]
        ids = ids[: self.tokens_through_stop(ids, stop)]
        state.generated_tokens += len(ids)
        logprobs = list(output.log_probs)[: len(ids)] if output.log_probs else None
        return ids, logprobs

    def tokens_through_stop(self, ids: list[int], stop: tuple[str, ...]) -> int:
        """How many of ``ids`` to keep: through the token that completes the first stop string of their text (that
        token may decode to more than the stop string), or all of them when no stop string comes before the end."""
        text = self.decode(ids)
        through = len(cut_at_stop(text, stop))
        if through == len(text):
            return len(ids)
        lo, hi = 0, len(ids)
        while lo < hi:  # decoded length grows with the prefix: the smallest k with len(decode(ids[:k])) >= through
            mid = (lo + hi) // 2
            if len(self.decode(ids[:mid])) >= through:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def append_observation(self, state: Rollout, text: str) -> None:
        """Append environment text with mask 0, cut to the remaining response budget."""
        ids = self.encode(text)
        remaining = self.room(state)
        if len(ids) >= remaining:
            state.length_exhausted = True
        state.append(ids[: max(remaining, 0)], 0)
        state.observations += 1

    def observation_text(self, docs_text: str) -> str:
        """The format's observation with ``docs_text`` (already truncated) as passages."""
        max_tokens = self.options.max_observation_tokens
        if max_tokens > 0:
            ids = self.encode(docs_text)
            if len(ids) > max_tokens:
                docs_text = self.decode(truncate_tokens(ids, max_tokens, self.options.observation_truncation_side))
        return self.spec.observation_template.replace("{docs}", docs_text)

    async def retrieve(self, state: Rollout, query: str) -> tuple[str, list[str], str | None, list[Any]]:
        """Run the retriever; returns ``(docs_text, doc_ids, error, hits)``. Errors never raise."""
        t0 = time.perf_counter()
        try:
            client = get_retriever_client(self.options.retriever)
            hits = (await client.search([query], self.options.retriever_topk))[0]
        except RetrievalError as e:
            state.retriever_errors += 1
            logger.warning("retrieval failed for query %r: %s", query, e)
            return RETRIEVER_ERROR_OBSERVATION.format(error=e.kind), [], f"{e.kind}: {e}", []
        finally:
            state.timings[F.TIME_RETRIEVE] += time.perf_counter() - t0
        return format_docs(hits), [doc_id(h) for h in hits], None, hits

    def aux_params(self, sampling_params: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        """Sampling parameters of an auxiliary generation."""
        params = without_stop(sampling_params)
        params["max_tokens"] = int(max_tokens)
        params["logprobs"] = False
        if self.options.aux_temperature is not None:
            params["temperature"] = float(self.options.aux_temperature)
        return params

    async def aux_generate(self, state: Rollout, messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        """An auxiliary policy generation (chat messages in, text out); counted in ``aux_cost``."""
        t0 = time.perf_counter()
        prompt_ids = await self.ct_build_initial_tokens(messages)
        output = await self.aux_server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=dict(params)
        )
        ids = list(output.token_ids)
        state.note_versions(output, aux=True)
        state.add_aux_cost(1, len(prompt_ids), len(ids), time.perf_counter() - t0)
        return self.decode(ids)

    def after_search(
        self, state: Rollout, step: int, query: str, sampling_params: dict[str, Any]
    ) -> list[Coroutine[Any, Any, None]]:
        """Auxiliary generations to start once a search of ``query`` (record ``step``) was run, before its
        observation is appended; none here. A method's loop overrides it (HiPRAG's re-answers)."""
        return []

    def after_retrieval_step(
        self, state: Rollout, step: int, question: str, sampling_params: dict[str, Any]
    ) -> list[Coroutine[Any, Any, None]]:
        """Auxiliary generations to start after each retrieval step's observation (an empty query's included);
        none here. A method's loop overrides it (AutoSearch's intermediate answers)."""
        return []

    def output(self, state: Rollout, prompt_ids: list[int]) -> AgentLoopOutput:
        """Build verl's output (response capped at ``response_length``)."""
        n = self.response_length
        extra = dict(state.server_extra_fields)
        if state.versions:  # verl's staleness metrics and off-policy threshold read these
            extra.update(
                global_steps=max(state.versions),
                min_global_steps=min(state.versions),
                max_global_steps=max(state.versions),
            )
        extra.update(state.extra_fields(self.format_name))
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=state.response_ids[:n],
            response_mask=state.response_mask[:n],
            response_logprobs=state.response_logprobs[:n] if state.has_logprobs else None,
            num_turns=1 + state.generations + state.observations,
            metrics={
                "generate_sequences": state.timings[F.TIME_GENERATE],
                "tool_calls": state.timings[F.TIME_RETRIEVE],
            },
            extra_fields=extra,
        )

    # ------------------------------------------------------------------------------------------------ the loop

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Roll out one trajectory (see the module docstring).

        Args:
            sampling_params: verl's sampling parameters (temperature, top_p, top_k, logprobs, ...).
            **kwargs: The dataset row: ``raw_prompt`` (chat messages), ``extra_info`` (``question``), ...

        Returns:
            The :class:`AgentLoopOutput` with ``extra_fields`` of :mod:`~agentrag_verl.agent_loops.fields`.
        """
        scope = batch_scope()
        scope.enter()
        t_start = time.perf_counter()
        state = Rollout(question=question_of(kwargs), prompt_messages=list(kwargs["raw_prompt"]))
        aux_tasks: list[asyncio.Task] = []
        try:
            prompt_ids = await self.ct_build_initial_tokens(state.prompt_messages)
            await self._run(state, prompt_ids, sampling_params, aux_tasks)
            if aux_tasks:
                await asyncio.gather(*aux_tasks)
        finally:
            for task in aux_tasks:
                if not task.done():
                    task.cancel()
            scope.exit()
        state.timings[F.TIME_TOTAL] = time.perf_counter() - t_start
        return self.output(state, prompt_ids)

    async def _run(
        self,
        state: Rollout,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        aux_tasks: list[asyncio.Task],
        closed_book: bool | None = None,
    ) -> None:
        """The loop on ``state`` (module docstring); ``closed_book`` overrides the option of that name."""
        spec = self.spec
        request_id = uuid4().hex
        closed_book = self.options.closed_book if closed_book is None else closed_book
        if spec.response_prefix:
            self.append_observation(state, spec.response_prefix)
            state.observations -= 1  # a prefix is not an observation turn
        used = 0  # budget units used: search actions answered (empty queries included), or closed steps
        if self.options.initial_search and state.question and not closed_book:
            docs_text, _, _, _ = await self.retrieve(state, state.question)
            self.append_observation(state, self.observation_text(docs_text))
        while self.room(state) > 0:
            exhausted = used >= self.budget
            if exhausted and spec.after_budget == "force":
                state.budget_exhausted = True
                await self._force_answer(state, request_id, prompt_ids, sampling_params)
                return
            # after_budget == "final_turn": one more turn, a search is not run; closed book: every turn is the last
            final_turn = exhausted or closed_book
            stop = spec.final_turn_stop if final_turn else spec.turn_stop
            start = len(state.response_ids)
            ids = await self.generate(state, request_id, prompt_ids, sampling_params, stop)
            end_index = len(state.response_ids) - 1
            text = cut_at_stop(self.decode(ids), stop)
            if final_turn and text.rstrip().endswith(spec.search_tags[0]):
                # the search is not run: cut it from the response, then force the answer
                state.truncate(start + self.tokens_before(ids, text.rstrip().rfind(spec.search_tags[0])))
                state.budget_exhausted = True
                await self._force_answer(state, request_id, prompt_ids, sampling_params)
                return
            if spec.budget_unit == "steps" and spec.step_close and text.rstrip().endswith(spec.step_close):
                used += 1  # HiPRAG Alg. 1 l. 14-16: a step closed
                continue
            action = spec.extract_action(text)
            if action is None:
                if ids:
                    state.add_step(F.KIND_INVALID, end_index)
                return
            if action.kind == "answer":
                state.add_step(F.KIND_ANSWER, end_index)
                return
            query = action.content
            if spec.budget_unit == "searches":
                used += 1
            if not query:
                step = state.add_step(F.KIND_INVALID, end_index, query="", observed=True)
                self.append_observation(state, spec.observation_template.replace("{docs}", EMPTY_QUERY_OBSERVATION))
            else:
                docs_text, doc_ids, error, _ = await self.retrieve(state, query)
                state.num_searches += 1
                step = state.add_step(
                    F.KIND_SEARCH, end_index, query=query, doc_ids=doc_ids, retriever_error=error, observed=True
                )
                aux_tasks.extend(map(asyncio.create_task, self.after_search(state, step, query, sampling_params)))
                self.append_observation(state, self.observation_text(docs_text))
            aux_tasks.extend(
                map(asyncio.create_task, self.after_retrieval_step(state, step, state.question, sampling_params))
            )
        state.length_exhausted = True

    def tokens_before(self, ids: list[int], char_index: int) -> int:
        """The longest prefix of ``ids`` (a count) whose decoded text ends at or before ``char_index`` of
        ``decode(ids)``: where to cut a generation so that nothing from ``char_index`` on stays.

        The kept tokens are exactly the model's own; a token that straddles ``char_index`` is dropped with the rest.
        """
        lo, hi = 0, len(ids)
        while lo < hi:  # decoded length grows with the prefix; find the largest k with len(decode(ids[:k])) <= i
            mid = (lo + hi + 1) // 2
            if len(self.decode(ids[:mid])) <= char_index:
                lo = mid
            else:
                hi = mid - 1
        return lo

    async def _force_answer(
        self, state: Rollout, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> None:
        """Append the forced-answer prefix (masked) and generate to the answer's closing tag."""
        spec = self.spec
        self.append_observation(state, spec.force_answer_prefix)
        if self.room(state) <= 0:
            return
        close = spec.answer_tags[1]
        ids = await self.generate(state, request_id, prompt_ids, sampling_params, (close,))
        if not ids:
            return
        text = spec.force_answer_prefix + cut_at_stop(self.decode(ids), (close,))
        action = spec.extract_action(text)
        kind = F.KIND_ANSWER if action is not None and action.kind == "answer" else F.KIND_INVALID
        state.add_step(kind, len(state.response_ids) - 1)
