"""ReasonRAG (Process vs. Outcome Reward: Which is Better for Agentic RAG Reinforcement Learning, Zhang et al.;
``docs/methods/reasonrag.md``): process-level preference data by MCTS + SPRE, and step-level DPO.

Pipeline::

    agentrag-verl reasonrag generate   # MCTS per question -> trees.jsonl -> pairs.jsonl (RAG-ProGuide) + stats
    agentrag-verl reasonrag pairs      # rebuild pairs/stats from trees.jsonl with other filters
    agentrag-verl reasonrag train dpo  # step-level DPO (Eq. 3) with TRL's DPOTrainer; `train sft`: SFT baseline

Inference and evaluation use the ReasonRAG agent loop (``reasonrag_agent``,
:mod:`agentrag_verl.methods.reasonrag.agent_loop`), which sends the same stage prompts.

Modules:

- :mod:`~agentrag_verl.methods.reasonrag.spre`: Eq. 1 (SPRE), Eq. 5 (UCT), the authors' UCB1 and bottom-up tree rewards.
- :mod:`~agentrag_verl.methods.reasonrag.tree`: states (question, previous steps, stage), actions, transitions.
- :mod:`~agentrag_verl.methods.reasonrag.mcts`: selection, expansion, SPRE / process-evaluation values, backpropagation.
- :mod:`~agentrag_verl.methods.reasonrag.judge`: the Figure 14 process-evaluation judge (prompt, score parser,
  fallback).
- :mod:`~agentrag_verl.methods.reasonrag.policy`: the policy behind any OpenAI-compatible endpoint (chat or
completions).
- :mod:`~agentrag_verl.methods.reasonrag.pairs`: RAG-ProGuide pairs and Table 1 statistics.
- :mod:`~agentrag_verl.methods.reasonrag.generate`: the resumable, concurrent generation job.
- :mod:`~agentrag_verl.methods.reasonrag.train`: DPO and SFT with TRL.

Importing this package imports neither torch nor trl.
"""

from __future__ import annotations

from agentrag_verl._lazy import lazy_exports
from agentrag_verl.methods.reasonrag.grammar import FORMAT
from agentrag_verl.methods.reasonrag.teacher import SCRIPT
from agentrag_verl.registry import Method, register_method

METHOD = register_method(
    Method(
        name="reasonrag",
        data_presets="agentrag_verl.methods.reasonrag.data:PRESETS",
        title="ReasonRAG",
        format=FORMAT,
        agent_loop="agentrag_verl.methods.reasonrag.agent_loop.ReasonRAGAgentLoop",
        agent_loop_comment="ReasonRAG: staged Reasoning / Grounding workflow (Alg. 1, Figures 12-13), BGE top-3.",
        paper_metric="em",  # ReasonRAG reports EM and F1
        commands=("agentrag_verl.methods.reasonrag.cli",),
        teacher=SCRIPT,
    )
)

_EXPORTS = {
    "MCTSConfig": "mcts",
    "MCTSEnv": "mcts",
    "run_mcts": "mcts",
    "Tree": "tree",
    "Node": "tree",
    "PolicyClient": "policy",
    "PolicyConfig": "policy",
    "PairConfig": "pairs",
    "build_pairs": "pairs",
    "dataset_statistics": "pairs",
    "spre_value": "spre",
    "uct_score": "spre",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
