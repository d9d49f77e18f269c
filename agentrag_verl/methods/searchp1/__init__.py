"""Search-P1: path-centric reward with reference planners.

Registers the ``searchp1`` grammar and declares the ``searchp1`` reward manager
(``reward.reward_manager.name=searchp1``); see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.formats import register_format
from agentrag_verl.methods.searchp1.grammar import FORMAT
from agentrag_verl.registry import register_reward_manager

register_format(FORMAT)
register_reward_manager("searchp1", "agentrag_verl.methods.searchp1.manager:SearchP1RewardManager")
