""" "Learning When to Search": multi-stage reward for efficient search agents.

Registers the ``multistage`` grammar and declares the ``multistage`` reward manager
(``reward.reward_manager.name=multistage``); see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.formats import register_format
from agentrag_verl.methods.multistage.grammar import FORMAT
from agentrag_verl.registry import register_reward_manager

register_format(FORMAT)
register_reward_manager("multistage", "agentrag_verl.methods.multistage.manager:MultistageRewardManager")
