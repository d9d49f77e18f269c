"""Composable reward parts: the shared composition core every reward manager of this package is built from.

A reward is a :class:`Reward` over parts; a part reads the trajectory record (:mod:`agentrag_verl.rewards.record`)
and returns a value and metrics. The shared parts live here (answer metrics, the format check, the search count);
each paper's parts live in its folder (``agentrag_verl/methods/<paper>/parts.py``). Turn a reward into a verl reward
manager with :class:`agentrag_verl.rewards.managers.composed.ComposedRewardManager` (``docs/extending.md``):

>>> from agentrag_verl.rewards import parts as P
>>> from agentrag_verl.methods.autosearch.parts import AutoSearchEfficiency, AutoSearchSteps, over_search_penalty
>>> from agentrag_verl.methods.hiprag.parts import HipragProcessBonus, HipragStepOptimality
>>> from agentrag_verl.methods.searchr1.parts import OutcomeFormat
>>> answer = P.AnswerMetrics("hiprag", metric="cem")
>>> fmt = P.FormatCheck("hiprag")
>>> steps = HipragStepOptimality(judge={"base_url": "http://127.0.0.1:8001/v1", "model": "judge"})
>>> view = AutoSearchSteps("hiprag")
>>> reward = P.Reward(
...     terms=[
...         OutcomeFormat(answer, fmt),                                   # Search-R1 v0.3 / HiPRAG A(1-λf) + λf·F
...         HipragProcessBonus(answer, fmt, steps, lambda_p=0.4),         # HiPRAG's gated process bonus
...         AutoSearchEfficiency(view, over_search_penalty(-0.1)),        # AutoSearch's over-search penalty
...     ],
...     acc="cem",
...     report=[P.SearchCount("hiprag")],
...     per_step=True,
... )
>>> reward.keys()[:4]
('acc', 'em', 'cem', 'f1')

=========================  ==========================================================================================
shared part                what
=========================  ==========================================================================================
``AnswerMetrics``          EM / CEM / F1 of the final answer (``docs/decisions.md#answer-metrics``); value = the metric
``FormatCheck``            the grammar's structure rule (HiPRAG F, Search-P1 level, else 1/0)
``SearchCount``            RC, search steps of the parse
``Scaled``                 ``weight × part``
=========================  ==========================================================================================

Paper parts: ``methods/searchr1/parts.py`` (``OutcomeFormat``, ``ExactMatchReward``), ``methods/hiprag/parts.py``,
``methods/multistage/parts.py`` (with ``JudgeCorrectness``, the B.4 judge), ``methods/searchp1/parts.py``,
``methods/autosearch/parts.py``.
"""

from agentrag_verl.rewards.parts.common import AnswerMetrics, FormatCheck, SearchCount
from agentrag_verl.rewards.parts.core import (
    SUMMED_KEYS,
    Part,
    PartResult,
    Reward,
    RewardContext,
    Scaled,
    ScoredRecord,
    resolve_format,
)

__all__ = [
    "Part",
    "PartResult",
    "Reward",
    "RewardContext",
    "Scaled",
    "ScoredRecord",
    "SUMMED_KEYS",
    "resolve_format",
    "AnswerMetrics",
    "FormatCheck",
    "SearchCount",
]
