"""Search-P1: path-centric reward with reference planners.

Declares the ``searchp1`` method (:class:`agentrag_verl.registry.Method`): its grammar, its reward manager
(``reward.reward_manager.name=searchp1``), its ``planners`` subcommand and its stand-in judge rules; see
:mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.methods.searchp1.grammar import FORMAT
from agentrag_verl.methods.searchp1.teacher import TEMPLATES
from agentrag_verl.registry import Method, register_method


def _eval_reward_kwargs(judge, retriever_root):
    return {"judge": judge}


METHOD = register_method(
    Method(
        name="searchp1",
        title="Search-P1",
        format=FORMAT,
        reward_manager="agentrag_verl.methods.searchp1.manager:SearchP1RewardManager",
        agent_loop_comment=(
            "Search-P1 (Alg. 2): <reasoning> prefix, <tool_call> / <tool_response>, B = 4, answer forced after the "
            "B-th."
        ),
        paper_metric="em",  # Alg. 3
        eval_reward_kwargs=_eval_reward_kwargs,
        reward_needs_judge=True,
        standin="agentrag_verl.methods.searchp1.standin:reply",
        teacher=TEMPLATES,
        commands=("agentrag_verl.methods.searchp1.planners.cli",),
    )
)
