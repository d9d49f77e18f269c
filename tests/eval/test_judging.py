"""The evaluation's judge metrics are the rewards' own judging: HiPRAG's step counts (OSR / USR, Eq. 2) equal what
the HiPRAG reward's step part finds for the same trajectory and verdicts, and judge accuracy sends the multi-stage
reward's B.4 request."""

from __future__ import annotations

import pytest

from agentrag_verl.eval.judging import judge_correctness
from agentrag_verl.judges.client import Verdict
from agentrag_verl.methods.hiprag.evaluation import step_judgements as hiprag_step_judgements
from agentrag_verl.methods.hiprag.parts import HipragProcessBonus, HipragStepOptimality
from agentrag_verl.methods.multistage.judge import correctness_request
from agentrag_verl.methods.multistage.parts import JudgeCorrectness
from agentrag_verl.rewards import parts as P
from agentrag_verl.rewards.parts import RewardContext
from agentrag_verl.rewards.record import Sample

# four HiPRAG steps: non-search (verified correct), non-search (verified wrong), search (its re-answer equals the
# conclusion: over-search), search (no re-answer recorded); the last one's judge would never be asked
RESPONSE = (
    "<think><step><reasoning>Known.</reasoning><conclusion>Rome is in Italy.</conclusion></step>"
    "<step><reasoning>WRONG guess.</reasoning><conclusion>Milan is the capital.</conclusion></step>"
    "<step><reasoning>Check.</reasoning><search>capital of Italy</search><context>Rome ...</context>"
    "<conclusion>The capital of Italy is Rome.</conclusion></step>"
    "<step><reasoning>And France?</reasoning><search>capital of France</search><context>Paris ...</context>"
    "<conclusion>The capital of France is Paris.</conclusion></step></think><answer>Rome</answer>"
)
FIELDS = {"agentrag_reanswers": [{"step": 0, "query": "capital of Italy", "text": "The capital of Italy is Rome."}]}


class ScriptedJudge:
    """Over-search: equivalent iff the statements are equal; under-search: correct unless the reasoning says WRONG;
    a request whose text contains ``fail_on`` fails (a timeout after retries)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.requests: list = []

    async def judge(self, request):
        self.requests.append(request)
        text = request.messages[-1]["content"]
        if self.fail_on and self.fail_on in text:
            return Verdict(None, None, False, "timeout", "scripted failure")
        if text.startswith("Statement 1:"):
            first, second = (line.split(":", 1)[1].strip() for line in text.splitlines())
            return Verdict(first == second, "", True)
        if text.startswith("<reasoning>"):
            return Verdict("WRONG" not in text, "", True)
        return Verdict(True, "YES", True)  # B.4

    async def judge_many(self, requests):
        return [await self.judge(r) for r in requests]


def provider(judge):
    async def get(name, config):
        return judge

    return get


@pytest.mark.parametrize("fail_on", [None, "Known.", "Statement 1"], ids=["all-ok", "under-fails", "over-fails"])
async def test_eval_hiprag_counts_equal_the_rewards_step_judging(fail_on):
    eval_judge, reward_judge = ScriptedJudge(fail_on), ScriptedJudge(fail_on)
    counts = await hiprag_step_judgements(eval_judge, eval_judge, RESPONSE, FIELDS)
    scored = await RewardContext(Sample(RESPONSE, ["Rome"], extra_fields=FIELDS), provider(reward_judge)).get(
        HipragStepOptimality()
    )
    info = scored.info
    assert counts["search_steps"] == 2 and counts["non_search_steps"] == 2
    assert counts["over_search"] == info["hiprag_over_search"]
    assert counts["under_search"] == info["hiprag_under_search"]
    assert counts["failures"] == info["judge_failures"]
    assert counts["missing_reanswers"] == info["hiprag_missing_reanswers"] == 1
    # under the reward's default policy (exclude) N is exactly the steps with a valid verdict
    assert counts["judged_search"] + counts["judged_non_search"] == info["hiprag_judged"] == scored.data.n_judged
    assert [r.messages for r in eval_judge.requests] == [r.messages for r in reward_judge.requests]


async def test_eval_judges_every_trajectory_the_reward_gates_on_a_correct_answer():
    """Eq. 2 pools over the test set: the evaluation judges the steps of a wrong answer too, while the reward's
    bonus (λp·A·F·Ncorr/N) asks for no verdict when A = 0."""
    wrong = RESPONSE.replace("<answer>Rome</answer>", "<answer>Lyon</answer>")
    eval_judge, reward_judge = ScriptedJudge(), ScriptedJudge()
    counts = await hiprag_step_judgements(eval_judge, eval_judge, wrong, FIELDS)
    answer, fmt = P.AnswerMetrics("hiprag", metric="cem"), P.FormatCheck("hiprag")
    bonus = HipragProcessBonus(answer, fmt, HipragStepOptimality())
    scored = await RewardContext(Sample(wrong, ["Rome"], extra_fields=FIELDS), provider(reward_judge)).get(bonus)
    assert scored.value == 0.0 and reward_judge.requests == []
    assert (counts["over_search"], counts["under_search"], len(eval_judge.requests)) == (1, 1, 3)


async def test_eval_judge_accuracy_sends_the_multistage_request():
    eval_judge, reward_judge = ScriptedJudge(), ScriptedJudge()
    assert await judge_correctness(eval_judge, "It was Rome", ["Rome"]) == {"correct": True, "ok": True, "called": True}
    answer = P.AnswerMetrics("hiprag")
    scored = await RewardContext(
        Sample(RESPONSE.replace(">Rome<", ">It was Rome<"), ["Rome"]), provider(reward_judge)
    ).get(JudgeCorrectness(answer))
    assert scored.value == 1.0
    expected = correctness_request("It was Rome", ["Rome"]).messages
    assert eval_judge.requests[0].messages == reward_judge.requests[0].messages == expected
    # no answer: wrong, without a call
    assert await judge_correctness(eval_judge, None, ["Rome"]) == {"correct": False, "ok": True, "called": False}
    assert len(eval_judge.requests) == 1
