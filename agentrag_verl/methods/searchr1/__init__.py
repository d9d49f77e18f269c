"""Search-R1 (Jin et al.), the baseline every paper compares against.

Declares the ``searchr1`` method (:class:`agentrag_verl.registry.Method`): its grammar, its reward manager
(``reward.reward_manager.name=searchr1``), the shared search loop, its teacher templates and its data preset; see
:mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.methods.searchr1.grammar import FORMAT
from agentrag_verl.methods.searchr1.teacher import TEMPLATES
from agentrag_verl.registry import Method, register_method

METHOD = register_method(
    Method(
        name="searchr1",
        data_presets="agentrag_verl.methods.searchr1.data:PRESETS",
        title="Search-R1",
        format=FORMAT,
        reward_manager="agentrag_verl.methods.searchr1.manager:SearchR1RewardManager",
        agent_loop_comment=(
            "Search-R1 baseline: <search> / <information>, B = 4 search turns then a final turn without search, top-3."
        ),
        scores_formats=("searchr1", "autosearch"),  # AutoSearch trajectories are in Search-R1's tags
        paper_metric="em",  # exact match of the last answer
        teacher=TEMPLATES,
    )
)
