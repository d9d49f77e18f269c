"""Keys of ``AgentLoopOutput.extra_fields`` written by the agentrag agent loops.

Every sample carries every key (empty / zero values when not applicable), and every value is a
JSON-serialisable plain type, so verl can stack them into ``non_tensor_batch`` and reward managers
can read them without knowing which format produced the sample.

Schema:
    - ``FORMAT`` (str): format name, e.g. ``"hiprag"``.
    - ``STEPS`` (list[dict]): one record per action the model took, in order, with keys
      ``STEP_KIND`` (``"search" | "answer" | "invalid"``), ``STEP_QUERY`` (str | None),
      ``STEP_DOC_IDS`` (list[str]), ``STEP_END_TOKEN_INDEX`` (int, index into ``response_ids`` of the
      step's last model-generated token), ``STEP_RETRIEVER_ERROR`` (str | None), ``STEP_OBSERVED`` (bool: the
      environment appended an observation after the action, i.e. a retrieval step; see
      :mod:`agentrag_verl.agent_loops.steps`, the one step indexing every reader uses).
    - ``NUM_SEARCHES`` (int), ``BUDGET_EXHAUSTED`` (bool), ``RETRIEVER_ERRORS`` (int).
    - ``REANSWERS`` (list[dict]): HiPRAG over-search re-answers ``{"step", "query", "text"}``.
    - ``INTERMEDIATE_ANSWERS`` (list[dict]): AutoSearch Prompt-1 answers ``{"step", "text", "answer"}``; ``"step"``
      is the index of the ``STEPS`` record the generation belongs to.
    - ``AUX_COST`` (dict): ``{"calls", "prompt_tokens", "completion_tokens"}`` of auxiliary generations.
    - ``TIMINGS`` (dict[str, float]): seconds.
"""

FORMAT = "agentrag_format"
STEPS = "agentrag_steps"
NUM_SEARCHES = "agentrag_num_searches"
BUDGET_EXHAUSTED = "agentrag_budget_exhausted"
RETRIEVER_ERRORS = "agentrag_retriever_errors"
REANSWERS = "agentrag_reanswers"
INTERMEDIATE_ANSWERS = "agentrag_intermediate_answers"
AUX_COST = "agentrag_aux_cost"
TIMINGS = "agentrag_timings"

ALL_KEYS: tuple[str, ...] = (
    FORMAT,
    STEPS,
    NUM_SEARCHES,
    BUDGET_EXHAUSTED,
    RETRIEVER_ERRORS,
    REANSWERS,
    INTERMEDIATE_ANSWERS,
    AUX_COST,
    TIMINGS,
)
"""Every key present in ``extra_fields`` of every sample."""

# Keys inside one STEPS record.
STEP_KIND = "kind"
STEP_QUERY = "query"
STEP_DOC_IDS = "doc_ids"
STEP_END_TOKEN_INDEX = "end_token_index"
STEP_RETRIEVER_ERROR = "retriever_error"
STEP_OBSERVED = "observed"

KIND_SEARCH = "search"
KIND_ANSWER = "answer"
KIND_INVALID = "invalid"

# Keys inside one REANSWERS / INTERMEDIATE_ANSWERS record.
AUX_STEP = "step"
AUX_QUERY = "query"
AUX_TEXT = "text"
AUX_ANSWER = "answer"

# Keys inside AUX_COST.
COST_CALLS = "calls"
COST_PROMPT_TOKENS = "prompt_tokens"
COST_COMPLETION_TOKENS = "completion_tokens"

# Added beside the contract keys (same rules: present for every sample).
LENGTH_EXHAUSTED = "agentrag_length_exhausted"
"""bool: the response-length budget ran out before the episode ended (the last observation may be cut)."""

WEIGHT_VERSIONS = "agentrag_weight_versions"
"""dict: the policy weight versions (verl's ``global_steps`` of the weights a generation ran under) that produced
the sample: ``{"trajectory": [first, last] | None, "aux": [first, last] | None}``, the trajectory's own generations
and the auxiliary ones. Under verl's async trainers a generation aborted for a weight update is resumed under the
new weights, and a later turn may run under newer ones than an earlier turn, so one trajectory can span several.
verl's own ``min_global_steps`` / ``max_global_steps`` (its staleness metrics) get the trajectory's bounds."""
VERSIONS_TRAJECTORY = "trajectory"
VERSIONS_AUX = "aux"

STAGES = "agentrag_stages"
"""list[dict]: a staged loop's generations, each from its own prompt (ReasonRAG: one chat per stage):
``{"prompt_ids": [...], "start": i, "end": j}``, the prompt a stage was generated from and the span
``response_ids[i:j]`` of its output (model tokens only). Empty for a loop whose response is one sequence after
``prompt_ids``. The warm start trains each stage on its own prompt (:mod:`agentrag_verl.warmstart.sft_dataset`)."""

ALL_KEYS = (*ALL_KEYS, LENGTH_EXHAUSTED, WEIGHT_VERSIONS, STAGES)

# Keys inside TIMINGS.
TIME_TOTAL = "total_s"
TIME_GENERATE = "generate_s"
TIME_RETRIEVE = "retrieve_s"
TIME_AUX = "aux_s"
