"""HiPRAG: hierarchical process rewards for efficient agentic RAG.

Declares the ``hiprag`` method (:class:`agentrag_verl.registry.Method`): its grammar, its agent loop (over-search
re-answers), its reward manager (``reward.reward_manager.name=hiprag``), its evaluation metrics (OSR / USR), its
teacher templates and its stand-in judge rules; see :mod:`agentrag_verl.methods` for what each file holds.
"""

from agentrag_verl.methods.hiprag.grammar import FORMAT
from agentrag_verl.methods.hiprag.teacher import TEMPLATES
from agentrag_verl.registry import Method, register_method


def _eval_reward_kwargs(judge, retriever_root):
    return {"judge": judge}


METHOD = register_method(
    Method(
        name="hiprag",
        title="HiPRAG",
        format=FORMAT,
        reward_manager="agentrag_verl.methods.hiprag.manager:HipragRewardManager",
        agent_loop="agentrag_verl.methods.hiprag.agent_loop.HipragAgentLoop",
        agent_loop_options={"reanswers": True},
        agent_loop_comment=(
            "HiPRAG (Alg. 1): <context>{docs}</context>\\n<conclusion> after </search>, B = 4 steps, "
            "over-search re-answers."
        ),
        paper_metric="cem",  # Eq. 1: A = cover exact match
        eval_reward_kwargs=_eval_reward_kwargs,
        reward_needs_judge=True,
        eval_hooks="agentrag_verl.methods.hiprag.evaluation:HOOKS",
        teacher=TEMPLATES,
        standin="agentrag_verl.methods.hiprag.standin:reply",
        # the "over-search only" ablation on CPU: the runs recorded in docs/warmstart.md and docs/learning.md; the
        # stand-in's under-search verifier (world = the mini-wiki corpus) turns the detector on with
        # reward.reward_kwargs.under_search_detector=true
        local_reward_kwargs={"under_search_detector": False, "judge_error_policy": "exclude"},
        # the embedded demo: our three-sentence statement of Figure 4's format, a fifth of the paper prompt's tokens
        # (the prompt is most of every sequence a CPU step trains on; the format itself comes from the warm start)
        demo={"prompt_name": "hiprag_compact"},
        score_reading="agentrag_verl.methods.hiprag.reward:read_score",
    )
)
