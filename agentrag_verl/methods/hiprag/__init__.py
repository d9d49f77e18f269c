"""HiPRAG: hierarchical process rewards for efficient agentic RAG.

Registers the ``hiprag`` grammar and declares the ``hiprag`` reward manager
(``reward.reward_manager.name=hiprag``); see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.formats import register_format
from agentrag_verl.methods.hiprag.grammar import FORMAT
from agentrag_verl.registry import register_reward_manager

register_format(FORMAT)
register_reward_manager("hiprag", "agentrag_verl.methods.hiprag.manager:HipragRewardManager")
