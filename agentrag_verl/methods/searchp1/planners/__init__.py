"""Search-P1 reference planners (Search-P1 §3.2.1, Algorithm 1, Eq. 5, Figure 8), built offline before training.

- :mod:`agentrag_verl.methods.searchp1.planners.generate`: K candidate plans per training question from a strong LLM
(Figure 8
  prompt through :mod:`agentrag_verl.judges`), a correctness filter, an LLM vote over the correct candidates when
  there are several (Eq. 5), a resumable JSONL cache keyed by question id.
- :mod:`agentrag_verl.methods.searchp1.planners.prompts`: the vote prompt (the paper prints none; ours).
- :mod:`agentrag_verl.methods.searchp1.planners.cli`: ``agentrag-verl planners generate``.

The cache is what :class:`~agentrag_verl.methods.searchp1.manager.SearchP1RewardManager` reads
(``reward.reward_kwargs.planner_cache``): JSONL lines ``{"id", "planner", "reasoning_path", ...}``. Importing this
package imports no torch or verl.
"""

from __future__ import annotations

__all__ = ["generate", "prompts"]
