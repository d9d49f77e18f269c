"""AutoSearch: per-step rewards from the policy's own intermediate answers.

Declares the ``autosearch`` method (:class:`agentrag_verl.registry.Method`): its grammar (Search-R1's tags with the
per-step validity of Eq. 1), its agent loop (intermediate answers), its reward manager
(``reward.reward_manager.name=autosearch``) and its evaluation metrics (OSR); see :mod:`agentrag_verl.methods` for
what each file holds.
"""

from agentrag_verl.methods.autosearch.grammar import FORMAT
from agentrag_verl.methods.searchr1.teacher import TEMPLATES
from agentrag_verl.registry import Method, register_method


def _eval_reward_kwargs(judge, retriever_root):
    return {"per_step": False}  # evaluation scores whole trajectories: the outcome reward of Eq. 2


METHOD = register_method(
    Method(
        name="autosearch",
        title="AutoSearch",
        format=FORMAT,
        reward_manager="agentrag_verl.methods.autosearch.manager:AutoSearchRewardManager",
        agent_loop="agentrag_verl.methods.autosearch.agent_loop.AutoSearchAgentLoop",
        agent_loop_options={"intermediate_answers": True},
        agent_loop_comment=(
            "AutoSearch (§4): Search-R1 tags + intermediate answers (Prompt 1, Eq. 5) after every retrieval step."
        ),
        paper_metric="em",  # Eq. 2
        eval_reward_kwargs=_eval_reward_kwargs,
        eval_hooks="agentrag_verl.methods.autosearch.evaluation:HOOKS",
        teacher=TEMPLATES,  # the same tags as Search-R1
    )
)
