"""Unpacking one sample of verl's reward-loop ``DataProto`` into plain values: re-exports of
:mod:`agentrag_verl.rewards.record`, where the code lives (verl-free, so the reward parts can use it).

>>> from agentrag_verl.rewards.managers.sample import gold_answers
>>> gold_answers({"target": ["Paris"]})
['Paris']
"""

from __future__ import annotations

from agentrag_verl.rewards.record import F, Sample, as_int, gold_answers, read_sample, records

__all__ = ["Sample", "read_sample", "gold_answers", "records", "as_int", "F"]
