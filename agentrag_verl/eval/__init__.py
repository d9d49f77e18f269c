"""Evaluation harness (``agentrag-verl eval``): a policy behind any OpenAI-compatible completions endpoint, run
through our agent loops against the retriever, on FlashRAG-layout test files.

- :mod:`~agentrag_verl.eval.data`: dataset specs and questions.
- :mod:`~agentrag_verl.eval.runner`: :class:`AgentLoopRunner`, verl's ``AgentLoopWorker`` in-process with the
  completions client.
- :mod:`~agentrag_verl.eval.metrics`: per-question metrics and their aggregation (pure).
- :mod:`~agentrag_verl.eval.judging`: judge accuracy and HiPRAG over-/under-search steps.
- :mod:`~agentrag_verl.eval.rewards`: every reward design's score through the verl reward managers.
- :mod:`~agentrag_verl.eval.harness`: the concurrent, resumable loop (:func:`evaluate`).
- :mod:`~agentrag_verl.eval.report`: markdown / rich tables and plots.
- :mod:`~agentrag_verl.eval.cli`: the ``eval`` subcommand.

Importing this package imports neither verl nor torch; the runner and the reward scorer do.
"""

from __future__ import annotations

from agentrag_verl._lazy import lazy_exports

_EXPORTS = {
    "load_datasets": "data",
    "RunnerConfig": "runner",
    "AgentLoopRunner": "runner",
    "aggregate": "metrics",
    "question_metrics": "metrics",
    "EvalConfig": "harness",
    "EvalIncomplete": "harness",
    "evaluate": "harness",
    "run_eval": "harness",
    "RewardScorer": "rewards",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
