"""Options of the search agent loops (:class:`SearchLoopConfig`) and how verl's config reaches them.

Two sources, later wins:

1. the keys of the loop's entry in the agent-loop YAML (``actor_rollout_ref.rollout.agent.agent_loop_config_path``);
   verl passes every key of an entry except ``_target_`` to the loop's constructor (``hydra.utils.instantiate``),
   so ``agentrag_verl/agent_loops/agent_loops.yaml`` sets per-format defaults there;
2. ``actor_rollout_ref.rollout.custom.agentrag.<key>`` (Hydra: ``+actor_rollout_ref.rollout.custom.agentrag.
   retriever_url=http://...``), for every agentrag loop of a run at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentrag_verl.options import from_mapping
from agentrag_verl.tools.retriever_client import DEFAULT_RETRIEVER_URL, RetrieverConfig

__all__ = ["SearchLoopConfig", "CUSTOM_KEY"]

CUSTOM_KEY = "agentrag"
"""Sub-key of ``actor_rollout_ref.rollout.custom`` holding run-wide overrides."""

TruncationSide = Literal["left", "right", "middle"]
ReanswerMode = Literal["prompt", "closed_book"]


@dataclass(frozen=True)
class SearchLoopConfig:
    """Options of :class:`~agentrag_verl.agent_loops.search_agent_loop.SearchAgentLoop` and
    :class:`~agentrag_verl.methods.reasonrag.agent_loop.ReasonRAGAgentLoop`."""

    format: str = ""
    """Trajectory format (:func:`agentrag_verl.formats.get_format`): a method's name. Every entry of the agent-loop
    YAML sets it (the generated one does)."""
    retriever_url: str = DEFAULT_RETRIEVER_URL
    """Search-R1 wire-format endpoint (``POST /retrieve``) of the retriever server."""
    retriever_topk: int = 3
    """Passages per query (3 in HiPRAG, Search-P1, AutoSearch and ReasonRAG; the multi-stage paper uses 5)."""
    retriever_timeout_s: float = 30.0
    """Timeout of one HTTP attempt, seconds."""
    retriever_max_retries: int = 3
    """Retries on connection errors, timeouts, HTTP 408, 429 and 5xx answers (never on other 4xx)."""
    retriever_backoff_s: float = 0.5
    """First retry delay; doubles per attempt (plus up to 25% jitter, at most 30 s: ``agentrag_verl.http``)."""
    budget: int | None = None
    """Budget B of the format's rollout algorithm; ``None`` takes the paper's value (``ActionSpec.budget``). B counts
    what the format's algorithm counts (``ActionSpec.budget_unit``): search actions the environment answered
    (Search-R1 / AutoSearch, multi-stage, Search-P1, ReasonRAG) or closed steps (HiPRAG Alg. 1). Once it is used up
    the answer is forced; an unexecuted search never stays in the response
    (``docs/decisions.md#rollout-and-budgets``)."""
    closed_book: bool = False
    """No retrieval at all (the knowledge probe, ``agentrag-verl data knowledge``): every turn is a final turn, so a
    search the policy opens is cut from the response before its opening tag and the answer is forced, as once the
    budget is used up: the format's own no-search path."""
    max_observation_tokens: int = 512
    """Cap on the retrieved-passages text of one observation, in tokens (tags excluded); 0 = no cap."""
    observation_truncation_side: TruncationSide = "right"
    """Which part of an over-long observation is dropped: ``right`` keeps the start (first passages),
    ``left`` keeps the end, ``middle`` keeps both ends."""
    reanswers: bool = False
    """HiPRAG over-search re-answers (§3.2): the policy answers each search query as a standalone question, with the
    format's ``reanswer`` prompt (HiPRAG's when the format has none)."""
    reanswer_max_tokens: int = 128
    """Token cap of one re-answer."""
    reanswer_mode: ReanswerMode = "prompt"
    """How the policy re-answers a query. ``prompt`` (the paper's): the ``reanswer`` prompt alone, in the policy's
    chat template. ``closed_book``: the query asked as the row's question, in the row's own prompt, through the
    format's no-search path (as ``closed_book`` and the knowledge probe do); the re-answer is the final answer. For
    a small warm-started policy that never learnt to answer outside its format
    (``docs/methods/hiprag.md#decisions``)."""
    intermediate_answers: bool = False
    """AutoSearch intermediate answers (Prompt 1, Eq. 5) after every retrieval step (every search action the
    environment answered, an empty query included)."""
    intermediate_answer_max_tokens: int = 128
    """Token cap of one intermediate answer."""
    initial_search: bool = False
    """Retrieve for the question itself before the first generation and append that observation (masked; not a
    model step, so not in ``agentrag_steps`` nor ``agentrag_num_searches``). Off in every paper's setup; the CPU
    smoke run uses it because a random policy never writes a search tag. Tag formats only."""
    aux_temperature: float | None = None
    """Sampling temperature of auxiliary generations; ``None`` reuses the rollout's sampling parameters."""

    def __post_init__(self) -> None:
        if not str(self.format).strip():
            raise ValueError(
                "The agent loop has no format: set `format: <method>` in its agent-loop YAML entry (or "
                "actor_rollout_ref.rollout.custom.agentrag.format)."
            )
        if self.observation_truncation_side not in ("left", "right", "middle"):
            raise ValueError(
                f"Unknown observation_truncation_side {self.observation_truncation_side!r}; choose one of "
                "['left', 'right', 'middle'] in the agent-loop YAML or actor_rollout_ref.rollout.custom.agentrag."
            )
        if self.reanswer_mode not in ("prompt", "closed_book"):
            raise ValueError(
                f"Unknown reanswer_mode {self.reanswer_mode!r}; choose one of ['prompt', 'closed_book'] in the "
                "agent-loop YAML or actor_rollout_ref.rollout.custom.agentrag."
            )
        if self.budget is not None and (isinstance(self.budget, bool) or not isinstance(self.budget, int)):
            raise ValueError(f"budget must be an integer or null, got {self.budget!r}.")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget must be >= 0 or null, got {self.budget}.")

    @property
    def retriever(self) -> RetrieverConfig:
        """The retriever client settings."""
        return RetrieverConfig(
            url=self.retriever_url,
            topk=int(self.retriever_topk),
            timeout_s=float(self.retriever_timeout_s),
            max_retries=int(self.retriever_max_retries),
            backoff_s=float(self.retriever_backoff_s),
        )

    @classmethod
    def from_sources(cls, loop_kwargs: Mapping[str, Any], rollout_custom: Mapping[str, Any] | None) -> SearchLoopConfig:
        """Merge the YAML entry's keys with ``rollout.custom.agentrag`` (which wins).

        Args:
            loop_kwargs: Constructor keyword arguments verl passed from the YAML entry (``name`` is ignored).
            rollout_custom: ``actor_rollout_ref.rollout.custom`` (may be ``None``).

        Raises:
            ValueError: An unknown key (a typo must be reported, not silently ignored) or an invalid value.
        """
        merged: dict[str, Any] = {k: v for k, v in loop_kwargs.items() if k not in ("name", "_target_")}
        custom = (rollout_custom or {}).get(CUSTOM_KEY) or {}
        merged.update(dict(custom))
        where = f"the agent-loop YAML entry or actor_rollout_ref.rollout.custom.{CUSTOM_KEY}"
        return from_mapping(cls, merged, what="agent-loop option", where=where)
