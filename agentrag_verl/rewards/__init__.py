"""Rewards of the five papers and Search-R1: pure reward functions and thin verl reward managers.

One module per paper, pure functions of plain values (no verl, no torch):

==================  ======================================================================================
module              implements
==================  ======================================================================================
``searchr1``        Search-R1 v0.1 EM and v0.3 outcome + format (SPEC §6)
``hiprag``          HiPRAG Eq. 1 hierarchical process reward (SPEC §1)
``multistage``      "Learning When to Search" staged answer reward, Eq. 7-9 search reward, format (SPEC §2)
``searchp1``        Search-P1 Eq. 4, 6-8 / Algorithm 3 path-centric reward (SPEC §4)
``autosearch``      AutoSearch Eq. 1, 2, 6, 7, 9 per-step rewards (SPEC §5)
==================  ======================================================================================

Composable reward parts over one trajectory record (:mod:`agentrag_verl.rewards.record`) live in
:mod:`agentrag_verl.rewards.parts`: they read the record and call these functions, and every reward manager is a
composition of them (``docs/extending.md``). The verl adapters (reward managers, the generic
:class:`~agentrag_verl.rewards.managers.composed.ComposedRewardManager` and the per-step agent-loop manager) live in
:mod:`agentrag_verl.rewards.managers` and import verl only there.
"""

from . import autosearch, hiprag, multistage, searchp1, searchr1

__all__ = ["autosearch", "hiprag", "multistage", "searchp1", "searchr1"]
