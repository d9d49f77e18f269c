"""Search-R1 (Jin et al.), the baseline every paper compares against.

Registers the ``searchr1`` grammar and declares the ``searchr1`` reward manager
(``reward.reward_manager.name=searchr1``); see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.formats import register_format
from agentrag_verl.methods.searchr1.grammar import FORMAT
from agentrag_verl.registry import register_reward_manager

register_format(FORMAT)
register_reward_manager("searchr1", "agentrag_verl.methods.searchr1.manager:SearchR1RewardManager")
