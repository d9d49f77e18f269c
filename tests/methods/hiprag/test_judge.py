"""HiPRAG's step judges (Figures 5-6): prompts, the True/False parser, requests, the failure policy, and the
detectors over one trajectory (:func:`judge_steps`, shared by the reward and the evaluation)."""

from __future__ import annotations

import pytest

from agentrag_verl.formats import get_format
from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError
from agentrag_verl.methods.hiprag import judge
from agentrag_verl.methods.hiprag.judge import HipragErrorPolicy, parse_true_false, step_optimal

FAILED = Verdict(None, None, False, "timeout", "no reply")


# ----------------------------------------------------------------------------------------------- prompts


def test_over_search_messages():
    messages = judge.over_search_messages("Paris is the capital of France.", "The capital of France is Paris.")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == judge.OVER_SEARCH_SYSTEM
    assert messages[1]["content"] == (
        "Statement 1: Paris is the capital of France.\nStatement 2: The capital of France is Paris."
    )


def test_under_search_messages_wrap_the_step_in_its_tags():
    messages = judge.under_search_messages("Einstein was born in 1879.", "So he was 26 in 1905.")
    assert messages[0]["content"] == judge.UNDER_SEARCH_SYSTEM
    assert messages[1]["content"] == (
        "<reasoning>Einstein was born in 1879.</reasoning>\n<conclusion>So he was 26 in 1905.</conclusion>"
    )


def test_slot_values_with_braces_are_sent_verbatim():
    messages = judge.under_search_messages("a {reasoning} b", "{0} {}")
    assert "a {reasoning} b" in messages[1]["content"] and "{0} {}" in messages[1]["content"]


def test_reanswer_is_the_authors_policy_prompt():
    expected = {
        "role": "user",
        "content": "Please answer the following question or provide relevant information to the statement: "
        "capital of France",
    }
    (message,) = judge.reanswer_messages("capital of France")
    assert message == expected
    # the agent loop sends the format's own prompt: the same message
    assert get_format("hiprag").prompts["reanswer"].messages("", query="capital of France") == [expected]


@pytest.mark.parametrize(
    "request_", [judge.over_search_request("a", "b"), judge.under_search_request("r", "c")], ids=["over", "under"]
)
def test_requests_pair_each_prompt_with_its_parser(request_):
    assert isinstance(request_, JudgeRequest)
    assert request_.parser is parse_true_false
    assert all(set(m) == {"role", "content"} for m in request_.messages)


# ----------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<answer>True</answer>", True),
        ("<answer>False</answer>", False),
        ("Both say Paris is the capital.\n<answer>True</answer>", True),
        ("<answer> false </answer>", False),
        ('<answer>"True"</answer>', True),
        ("<answer>**False**.</answer>", False),
        ("<ANSWER>TRUE</ANSWER>", True),
        ("<think>They differ? <answer>True</answer></think><answer>False</answer>", False),  # reasoning stripped
        # a judge echoing the prompt's example before its verdict: the last tag decides
        ("Format: <answer>True</answer> or <answer>False</answer>. Mine: <answer>False</answer>", False),
    ],
)
def test_true_false_accepts_the_figure_5_6_format(reply, expected):
    assert parse_true_false(reply) is expected


@pytest.mark.parametrize(
    "reply",
    [
        "True",  # the paper requires the tag
        "",
        "<answer></answer>",
        "<answer>maybe</answer>",
        "<answer>True or False</answer>",
        "<answer>Yes</answer>",
        "<think><answer>True</answer>",  # cut inside the reasoning
    ],
)
def test_true_false_rejects_replies_without_a_verdict(reply):
    with pytest.raises(ParseError):
        parse_true_false(reply)


# ----------------------------------------------------------------------------------------------- failure policy


@pytest.mark.parametrize(
    ("detector", "judged", "optimal"),
    [
        ("over_search", True, False),  # Figure 5: equivalent re-answer => the search was redundant
        ("over_search", False, True),
        ("under_search", True, True),  # Figure 6: a correct non-search step is fine
        ("under_search", False, False),  # an incorrect one is an under-search
    ],
)
def test_verdicts_map_to_step_optimality(detector, judged, optimal):
    for policy in HipragErrorPolicy:  # the policy only matters for failures
        assert step_optimal(Verdict(judged, "", True), detector, policy) is optimal


@pytest.mark.parametrize(("policy", "expected"), [("exclude", None), ("optimal", True), ("suboptimal", False)])
def test_failed_verdicts_follow_the_policy(policy, expected):
    assert step_optimal(FAILED, "over_search", policy) is expected
    assert step_optimal(FAILED, "under_search", HipragErrorPolicy(policy)) is expected


def test_policy_errors_name_the_choices():
    with pytest.raises(ValueError, match=r"'exclude', 'optimal', 'suboptimal'"):
        step_optimal(FAILED, "over_search", "ignore")
    with pytest.raises(ValueError, match="over_search"):
        step_optimal(FAILED, "oversearch")


# ----------------------------------------------------------------------------------------------- the detectors

# HiPRAG grammar: a non-search step, then two search steps (the Figure 3 layout)
RESPONSE = (
    "<think><step><reasoning>I know this.</reasoning><conclusion>Rome is in Italy.</conclusion></step>"
    "<step><reasoning>Look it up.</reasoning><search>capital of Italy</search><context>Rome ...</context>"
    "<conclusion>The capital of Italy is Rome.</conclusion></step>"
    "<step><reasoning>And France?</reasoning><search>capital of France</search><context>Paris ...</context>"
    "<conclusion>The capital of France is Paris.</conclusion></step></think><answer>Rome</answer>"
)


class ScriptedJudge:
    """Over-search: equivalent iff the two statements are equal; under-search: correct; one scripted failure."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.batches: list[int] = []

    async def judge_many(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            text = r.messages[-1]["content"]
            if self.fail_on and self.fail_on in text:
                out.append(FAILED)
            elif text.startswith("Statement 1:"):
                first, second = (line.split(":", 1)[1].strip() for line in text.splitlines())
                out.append(Verdict(first == second, "", True))
            else:
                out.append(Verdict(True, "", True))
        return out


def reanswers(*pairs):
    return {"agentrag_reanswers": [{"step": i, "query": q, "text": t} for i, q, t in pairs]}


async def test_judge_steps_counts_and_flags():
    steps = get_format("hiprag").parse(RESPONSE).steps
    fields = reanswers((0, "capital of Italy", "The capital of Italy is Rome."), (1, "capital of France", "Lyon."))
    scripted = ScriptedJudge()
    asked = []

    async def client(detector):
        asked.append(detector)
        return scripted

    found = await judge.judge_steps(steps, fields, client)
    # step 2's conclusion equals its re-answer (over-search); step 3's does not; step 1 is verified correct
    assert found.is_search == (False, True, True)
    assert found.flagged == (False, True, False)
    assert (found.over_search, found.under_search, found.judged_search, found.judged_non_search) == (1, 0, 2, 1)
    assert (found.failures, found.missing_reanswers, found.requests) == (0, 0, 3)
    assert asked == ["over_search", "under_search"] and scripted.batches == [2, 1]  # one batch per detector


@pytest.mark.parametrize(("policy", "flag"), [("exclude", None), ("optimal", False), ("suboptimal", True)])
async def test_judge_steps_failures_and_missing_reanswers_follow_the_policy(policy, flag):
    steps = get_format("hiprag").parse(RESPONSE).steps
    fields = reanswers((0, "capital of Italy", "Rome is the capital."))  # the second search step has none
    found = await judge.judge_steps(steps, fields, _const(ScriptedJudge(fail_on="I know this.")), policy=policy)
    # the non-search step's verdict failed, the third step was never sent: both decided by the policy
    assert found.flagged == (flag, False, flag)
    assert (found.failures, found.missing_reanswers, found.requests) == (1, 1, 2)
    assert (found.judged_search, found.judged_non_search, found.over_search, found.under_search) == (1, 0, 0, 0)
    assert found.counts() == {
        "search_steps": 2,
        "non_search_steps": 1,
        "judged_search": 1,
        "judged_non_search": 0,
        "over_search": 0,
        "under_search": 0,
        "failures": 1,
        "missing_reanswers": 1,
    }


async def test_judge_steps_with_a_detector_off_asks_only_the_other():
    steps = get_format("hiprag").parse(RESPONSE).steps
    asked = []

    async def client(detector):
        asked.append(detector)
        return ScriptedJudge()

    found = await judge.judge_steps(steps, {}, client, over_search_detector=False)
    assert asked == ["under_search"] and found.flagged == (False, None, None) and found.missing_reanswers == 0


def _const(client):
    async def get(detector):
        return client

    return get
