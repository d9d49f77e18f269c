"""verl agent loops for multi-turn search rollouts, one YAML entry per trajectory format.

- :class:`~agentrag_verl.agent_loops.search_agent_loop.SearchAgentLoop`: the tag formats (searchr1, autosearch,
  hiprag, multistage, searchp1), driven by each format's :class:`~agentrag_verl.formats.ActionSpec`.
- :class:`~agentrag_verl.methods.reasonrag.agent_loop.ReasonRAGAgentLoop`: ReasonRAG's staged workflow.
- :mod:`~agentrag_verl.agent_loops.fields`: the ``extra_fields`` keys every sample carries (read by rewards).
- :mod:`~agentrag_verl.agent_loops.openai_client`: run the same loops against an OpenAI-compatible completions
  server outside training.

``AGENT_LOOP_CONFIG`` is the shipped agent-loop YAML; pass it as
``actor_rollout_ref.rollout.agent.agent_loop_config_path``. Importing this package imports no torch or verl;
the loop modules do.
"""

from __future__ import annotations

from pathlib import Path

AGENT_LOOP_CONFIG = str(Path(__file__).with_name("agent_loops.yaml"))
"""Absolute path of the agent-loop YAML (names: searchr1_agent, autosearch_agent, hiprag_agent,
multistage_agent, searchp1_agent, reasonrag_agent)."""

AGENT_NAMES = {
    "searchr1": "searchr1_agent",
    "autosearch": "autosearch_agent",
    "hiprag": "hiprag_agent",
    "multistage": "multistage_agent",
    "searchp1": "searchp1_agent",
    "reasonrag": "reasonrag_agent",
}
"""Format name -> agent-loop name in :data:`AGENT_LOOP_CONFIG`."""

__all__ = ["AGENT_LOOP_CONFIG", "AGENT_NAMES"]
