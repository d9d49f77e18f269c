"""Composable reward parts: every reward manager of this package is a :class:`Reward` built from these.

Build a new reward in a few lines and turn it into a verl reward manager with
:class:`agentrag_verl.rewards.managers.composed.ComposedRewardManager` (``docs/extending.md``):

>>> from agentrag_verl.rewards import parts as P
>>> answer = P.AnswerMetrics("hiprag", metric="cem")
>>> fmt = P.FormatCheck("hiprag")
>>> steps = P.HipragStepOptimality(judge={"base_url": "http://127.0.0.1:8001/v1", "model": "judge"})
>>> view = P.AutoSearchSteps("hiprag")
>>> reward = P.Reward(
...     terms=[
...         P.OutcomeFormat(answer, fmt),                                   # Search-R1 v0.3 / HiPRAG A(1-λf) + λf·F
...         P.HipragProcessBonus(answer, fmt, steps, lambda_p=0.4),         # HiPRAG's gated process bonus
...         P.AutoSearchEfficiency(view, P.over_search_penalty(-0.1)),      # AutoSearch's over-search penalty
...     ],
...     acc="cem",
...     report=[P.SearchCount("hiprag")],
...     per_step=True,
... )
>>> reward.keys()[:4]
('acc', 'em', 'cem', 'f1')

=========================  ==========================================================================================
part                       what (paper)
=========================  ==========================================================================================
``AnswerMetrics``          EM / CEM / F1 of the final answer (SPEC §0.1); value = the chosen metric
``JudgeCorrectness``       LLM-judge correctness, YES/NO (multi-stage B.4)
``FormatCheck``            the grammar's structure rule (HiPRAG F, Search-P1 level, else 1/0)
``SearchCount``            RC, search steps of the parse
``OutcomeFormat``          ``A(1-λf) + λf·F`` (Search-R1 v0.3, HiPRAG Eq. 1 first terms)
``ExactMatchReward``       Search-R1 v0.1
``HipragStepOptimality``   over-/under-search detectors per step (HiPRAG §3.2, judges)
``HipragProcessBonus``     gated ``λp·A·F·Ncorr/N`` (HiPRAG Eq. 1)
``MultistageAnswer``       staged r_a; ``MultistageSearch`` r_s (Eq. 9); ``MultistageFormat`` r_f; total
``SearchP1Evaluator``      Figure 9 evaluator; ``SearchP1Path`` Eq. 6-7; ``SearchP1Outcome`` Eq. 8; total Eq. 4
``AutoSearchSteps``        per-step view (t_c, intermediate answers, step-end tokens)
``AutoSearch*``            per-step Eq. 1 format, Eq. 2 outcome, Eq. 7 efficiency, Eq. 9 quality, and their sum
``Scaled``                 ``weight × part``
=========================  ==========================================================================================
"""

from .. import autosearch as _autosearch_fn
from .autosearch import (
    AutoSearchEfficiency,
    AutoSearchOutcome,
    AutoSearchQuality,
    AutoSearchStepFormat,
    AutoSearchStepRewards,
    AutoSearchSteps,
)
from .common import AnswerMetrics, FormatCheck, JudgeCorrectness, SearchCount
from .core import SUMMED_KEYS, Part, PartResult, Reward, RewardContext, Scaled, ScoredRecord, resolve_format
from .hiprag import HipragProcessBonus, HipragStepOptimality
from .multistage import MultistageAnswer, MultistageFormat, MultistageReward, MultistageSearch
from .searchp1 import SearchP1Evaluator, SearchP1Outcome, SearchP1Path, SearchP1Reward
from .searchr1 import ExactMatchReward, OutcomeFormat


def over_search_penalty(penalty: float = -0.1) -> _autosearch_fn.AutoSearchRewardConfig:
    """AutoSearch constants that keep only Eq. 7's over-search term: each retrieval step after the first correct
    intermediate answer (t > t_c) gets ``penalty``; every other retrieval step 0.

    >>> from agentrag_verl.rewards.autosearch import efficiency_rewards
    >>> efficiency_rewards(3, 1, over_search_penalty(-0.1)), efficiency_rewards(2, -1, over_search_penalty())
    ([0.0, -0.1, -0.1], [0.0, 0.0])
    """
    return _autosearch_fn.AutoSearchRewardConfig(
        under_search=0.0, effective_scale=0.0, effective_offset=0.0, over_search=float(penalty)
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
    "JudgeCorrectness",
    "FormatCheck",
    "SearchCount",
    "OutcomeFormat",
    "ExactMatchReward",
    "HipragStepOptimality",
    "HipragProcessBonus",
    "MultistageAnswer",
    "MultistageSearch",
    "MultistageFormat",
    "MultistageReward",
    "SearchP1Evaluator",
    "SearchP1Path",
    "SearchP1Outcome",
    "SearchP1Reward",
    "AutoSearchSteps",
    "AutoSearchStepFormat",
    "AutoSearchEfficiency",
    "AutoSearchQuality",
    "AutoSearchOutcome",
    "AutoSearchStepRewards",
    "over_search_penalty",
]
