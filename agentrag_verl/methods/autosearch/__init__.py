"""AutoSearch: per-step rewards from the policy's own intermediate answers.

Registers the ``autosearch`` format (an alias of Search-R1's grammar) and declares the ``autosearch`` reward manager
(``reward.reward_manager.name=autosearch``); see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.formats import register_alias
from agentrag_verl.methods.searchr1.grammar import FORMAT as SEARCHR1_FORMAT
from agentrag_verl.registry import register_reward_manager

register_alias("autosearch", SEARCHR1_FORMAT.name)  # Search-R1 tags + intermediate answers
register_reward_manager("autosearch", "agentrag_verl.methods.autosearch.manager:AutoSearchRewardManager")
