""" "Learning When to Search": multi-stage reward for efficient search agents.

Declares the ``multistage`` method (:class:`agentrag_verl.registry.Method`): its grammar, its reward manager
(``reward.reward_manager.name=multistage``), its correctness judge (B.4; also the evaluation's answer judge) and its
stand-in judge rule; see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.methods.multistage.grammar import FORMAT
from agentrag_verl.methods.multistage.teacher import TEMPLATES
from agentrag_verl.registry import Method, register_method


def _eval_reward_kwargs(judge, retriever_root):
    out = {"correctness": "judge" if judge else "em"}  # without a judge: its string option
    if judge:
        out["judge"] = judge
    if retriever_root:
        out["embedding"] = {"kind": "retriever", "url": retriever_root}  # the search reward embeds queries
    return out


METHOD = register_method(
    Method(
        name="multistage",
        data_presets="agentrag_verl.methods.multistage.data:PRESETS",
        title="Multi-stage",
        format=FORMAT,
        reward_manager="agentrag_verl.methods.multistage.manager:MultistageRewardManager",
        agent_loop_options={"retriever_topk": 5},
        agent_loop_comment=(
            'Multi-stage "Learning When to Search": <information> + <reflect>, max_turns 5, top-5 (Table 5).'
        ),
        paper_metric="em",  # the paper's LLM judge; exact match is its string option
        eval_reward_kwargs=_eval_reward_kwargs,
        answer_judge="agentrag_verl.methods.multistage.judge:correctness_request",
        standin="agentrag_verl.methods.multistage.standin:reply",
        teacher=TEMPLATES,
    )
)
