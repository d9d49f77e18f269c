"""HiPRAG's step judges (HiPRAG §3.2, Appendix D Figures 5-6): prompts, verdict parser, requests, failure policy,
and the detectors that judge every step of one trajectory.

- Over-search (Figure 5, "Prompt for Over-search Detection"): a search step's conclusion ``o`` and the policy's
  standalone re-answer ``o'`` of its query (the re-answer prompt is
  :data:`agentrag_verl.methods.hiprag.grammar.REANSWER_PROMPT`, a policy prompt the agent loop sends) are
  semantically equivalent: the search was redundant.
- Under-search (Figure 6, "Prompt for Under-search Detection"): a non-search step is factually wrong or its
  conclusion does not follow from its reasoning: the agent should have searched.

Both figures are system prompts; the paper gives no user-message layout, so the two statements are sent as
``Statement 1`` / ``Statement 2`` (Figure 5 speaks of "these two statements") and the step as
``<reasoning>``/``<conclusion>`` tags (the tags Figure 6 refers to). Texts are the paper's own words, line breaks
laid out; the typographic quotes around True/False are ASCII quotes.

:func:`judge_steps` is the one place a trajectory's steps are judged: the reward
(:class:`agentrag_verl.methods.hiprag.parts.HipragStepOptimality`, called only for A = F = 1 by the gated bonus)
and the evaluation's OSR / USR (Eq. 2, every parsable step of every trajectory) both call it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrag_verl.judges.client import JudgeRequest, Verdict
from agentrag_verl.judges.parsers import ParseError, check_reply, strip_reasoning
from agentrag_verl.judges.policy import choose_policy
from agentrag_verl.judges.prompts import Message, system_user
from agentrag_verl.methods.hiprag.grammar import REANSWER_PROMPT

__all__ = [
    "OVER_SEARCH_SYSTEM",
    "OVER_SEARCH_USER",
    "UNDER_SEARCH_SYSTEM",
    "UNDER_SEARCH_USER",
    "over_search_messages",
    "under_search_messages",
    "reanswer_messages",
    "parse_true_false",
    "over_search_request",
    "under_search_request",
    "HipragErrorPolicy",
    "step_optimal",
    "Detector",
    "StepJudgements",
    "judge_steps",
]

Detector = Literal["over_search", "under_search"]
"""The two detectors of §3.2."""

# --- prompts: Figures 5 and 6 ----------------------------------------------------------------------------------

OVER_SEARCH_SYSTEM = (
    "You are an expert in Natural Language Understanding and Semantic Analysis. Your goal is to determine if these "
    "two statements are semantically equivalent\u2014that is, if they mean the same thing and convey the same core "
    'information. Provide your answers with a single boolean value "True" or "False" in the tag <answer></answer> '
    "(e.g. <answer>True</answer> or <answer>False</answer>)."
)
"""HiPRAG Figure 5, Prompt for Over-search Detection (system). Verdict True = equivalent = over-search."""

OVER_SEARCH_USER = "Statement 1: {statement}\nStatement 2: {regenerated}"
"""User message for Figure 5: the search step's conclusion ``o`` and the policy's re-answer ``o'``."""

UNDER_SEARCH_SYSTEM = (
    "You are an expert Fact-Checker and Logic Verifier. Your task is to evaluate a single, isolated reasoning step "
    "from an AI agent. This step was generated without using a search tool. Your goal is to determine if the agent "
    "made a mistake by not searching, based only on the information within this single step and your own general "
    "knowledge.\n"
    "Analyze the provided step by asking two questions:\n"
    "1. Factual Accuracy: Is the statement in the <reasoning></reasoning> and <conclusion></conclusion> factually "
    "correct?\n"
    "2. Internal Logic: Does the <conclusion></conclusion> logically follow from the <reasoning></reasoning> "
    "provided within this same step?\n"
    'If both questions are answered correctly, provide your answers with a single boolean value "True" or "False" '
    "in the tag <answer></answer> (e.g. <answer>True</answer> or <answer>False</answer>)."
)
"""HiPRAG Figure 6, Prompt for Under-search Detection (system). Verdict False = under-search."""

UNDER_SEARCH_USER = "<reasoning>{reasoning}</reasoning>\n<conclusion>{conclusion}</conclusion>"
"""User message for Figure 6: the non-search step's reasoning ``r`` and conclusion ``o``."""


def over_search_messages(statement: str, regenerated: str) -> list[Message]:
    """Messages for the over-search judge (Figure 5).

    Args:
        statement: The search step's conclusion ``o_i``.
        regenerated: The policy's re-generated answer ``o'_i`` to the step's query asked standalone.

    Returns:
        ``[system, user]`` messages; the judge answers ``<answer>True</answer>`` if they are equivalent.

    >>> over_search_messages("Paris is the capital.", "The capital is Paris.")[1]["content"]
    'Statement 1: Paris is the capital.\\nStatement 2: The capital is Paris.'
    """
    return system_user(OVER_SEARCH_SYSTEM, OVER_SEARCH_USER.format(statement=statement, regenerated=regenerated))


def under_search_messages(reasoning: str, conclusion: str) -> list[Message]:
    """Messages for the under-search verifier (Figure 6).

    Args:
        reasoning: The non-search step's ``<reasoning>`` text ``r_i``.
        conclusion: Its ``<conclusion>`` text ``o_i``.

    Returns:
        ``[system, user]`` messages; the verifier answers ``<answer>False</answer>`` for an incorrect step.
    """
    return system_user(UNDER_SEARCH_SYSTEM, UNDER_SEARCH_USER.format(reasoning=reasoning, conclusion=conclusion))


def reanswer_messages(query: str) -> list[Message]:
    """The policy prompt re-answering a search query standalone (:data:`~agentrag_verl.methods.hiprag.grammar.
    REANSWER_PROMPT`); its answer ``o'`` goes into Figure 5. Not a judge prompt: the policy answers it.

    >>> reanswer_messages("capital of France")[0]["content"][-17:]
    'capital of France'
    """
    return REANSWER_PROMPT.messages("", query=query)


# --- parser ----------------------------------------------------------------------------------------------------

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_EMPHASIS = " \t\r\n\"'`*_.,;:!()[]{}\u201c\u201d\u2018\u2019"


def parse_true_false(text: str) -> bool:
    """Parses the boolean verdict of Figures 5 and 6: ``<answer>True</answer>`` or ``<answer>False</answer>``.

    The last ``<answer>`` tag decides (a judge may quote the prompt's example first). Inside it, case, quotes,
    Markdown emphasis and trailing punctuation are ignored; a reasoning model's ``<think>`` block is removed first.
    Over-search (Figure 5): True = the two statements are equivalent. Under-search (Figure 6): True = the step is
    factually and logically correct.

    Args:
        text: The judge's reply.

    Returns:
        The boolean in the last answer tag.

    Raises:
        ParseError: No ``<answer>`` tag, or its content is not a single True/False.

    >>> parse_true_false("They mean the same. <answer>True</answer>")
    True
    >>> parse_true_false("<answer> **false**. </answer>")
    False
    >>> parse_true_false("True")
    Traceback (most recent call last):
    ...
    agentrag_verl.judges.parsers.ParseError: no <answer>True|False</answer> tag in the reply
    """
    text = strip_reasoning(check_reply(text))
    tags = _ANSWER_TAG.findall(text)
    if not tags:
        raise ParseError("no <answer>True|False</answer> tag in the reply")
    word = tags[-1].strip(_EMPHASIS).lower()
    if word == "true":
        return True
    if word == "false":
        return False
    raise ParseError(f"the answer tag holds {tags[-1].strip()[:40]!r}, not True or False")


# --- requests --------------------------------------------------------------------------------------------------


def over_search_request(
    statement: str, regenerated: str, params: Mapping[str, Any] | None = None
) -> JudgeRequest[bool]:
    """The over-search judge (Figure 5): True = the step's conclusion and the re-answer are equivalent, i.e. the
    search step is an over-search.

    Args:
        statement: The search step's conclusion ``o``.
        regenerated: The policy's standalone re-answer ``o'`` to the step's query.
        params: Per-request sampling overrides.
    """
    return JudgeRequest(over_search_messages(statement, regenerated), parse_true_false, params)


def under_search_request(
    reasoning: str, conclusion: str, params: Mapping[str, Any] | None = None
) -> JudgeRequest[bool]:
    """The under-search verifier (Figure 6): False = the non-search step is wrong, i.e. an under-search.

    Args:
        reasoning: The step's reasoning ``r``.
        conclusion: The step's conclusion ``o``.
        params: Per-request sampling overrides.
    """
    return JudgeRequest(under_search_messages(reasoning, conclusion), parse_true_false, params)


# --- failure policy ----------------------------------------------------------------------------------------------


class HipragErrorPolicy(str, enum.Enum):
    """How a step whose judge failed enters the process bonus ``Ncorr / N`` (``docs/methods/hiprag.md#decisions``)."""

    EXCLUDE = "exclude"
    """The step leaves numerator and denominator; if no step is judged the bonus is 0 (our default)."""
    OPTIMAL = "optimal"
    """The step counts as correct (what the authors' code does, since it counts errors as successes)."""
    SUBOPTIMAL = "suboptimal"
    """The step counts as over-/under-search."""


def step_optimal(
    verdict: Verdict[bool],
    detector: Detector,
    policy: HipragErrorPolicy | str = HipragErrorPolicy.EXCLUDE,
) -> bool | None:
    """Whether a step is optimal (neither over- nor under-search) given its judge verdict.

    Over-search (Figure 5): the judge's True means the conclusion equals the standalone re-answer, so the search
    was redundant: not optimal. Under-search (Figure 6): True means the non-search step is correct: optimal.

    Args:
        verdict: The judge's verdict for the step.
        detector: Which detector judged it.
        policy: The error policy for a failed verdict.

    Returns:
        True (optimal), False (over-/under-search) or ``None`` (failed and excluded).

    Raises:
        ValueError: Unknown ``detector`` or ``policy``.

    >>> step_optimal(Verdict(True, "<answer>True</answer>", True), "over_search")
    False
    >>> print(step_optimal(Verdict(None, None, False, "timeout"), "under_search", "exclude"))
    None
    """
    policy = choose_policy(HipragErrorPolicy, policy, "reward.reward_kwargs.judge_error_policy")
    if detector not in ("over_search", "under_search"):
        raise ValueError(f"Unknown HiPRAG detector {detector!r}; choose one of ['over_search', 'under_search']")
    if verdict.ok:
        return not verdict.value if detector == "over_search" else bool(verdict.value)
    if policy is HipragErrorPolicy.EXCLUDE:
        return None
    return policy is HipragErrorPolicy.OPTIMAL


# --- the detectors over one trajectory ---------------------------------------------------------------------------

_MISSING_REANSWER = Verdict(None, None, False, "missing_input", "no policy re-answer for this search step")


@dataclass(frozen=True)
class StepJudgements:
    """What the detectors found in one trajectory's parsed steps (HiPRAG §3.2).

    Attributes:
        is_search: Per step, whether it searched.
        flagged: Per step, True = over-/under-search, False = optimal, ``None`` = not counted: its detector is off,
            or its verdict failed (a missing re-answer included) under the ``exclude`` policy. The other policies
            decide failed steps here (``optimal`` -> False, ``suboptimal`` -> True).
        over_search: Search steps a valid verdict found over-searched.
        under_search: Non-search steps a valid verdict found under-searched.
        judged_search: Search steps with a valid verdict.
        judged_non_search: Non-search steps with a valid verdict.
        failures: Failed verdicts (after the client's retries); missing re-answers are not among them.
        missing_reanswers: Search steps without a policy re-answer (never sent to the judge).
        requests: Judge requests sent.
    """

    is_search: tuple[bool, ...]
    flagged: tuple[bool | None, ...]
    over_search: int
    under_search: int
    judged_search: int
    judged_non_search: int
    failures: int
    missing_reanswers: int
    requests: int

    def counts(self) -> dict[str, int]:
        """The evaluation's per-trajectory counts (pooled over a dataset into OSR / USR, Eq. 2).

        Keys: ``search_steps``, ``non_search_steps`` (parsed), ``judged_search``, ``judged_non_search``,
        ``over_search``, ``under_search``, ``failures``, ``missing_reanswers``.
        """
        n_search = sum(self.is_search)
        return {
            "search_steps": n_search,
            "non_search_steps": len(self.is_search) - n_search,
            "judged_search": self.judged_search,
            "judged_non_search": self.judged_non_search,
            "over_search": self.over_search,
            "under_search": self.under_search,
            "failures": self.failures,
            "missing_reanswers": self.missing_reanswers,
        }


async def judge_steps(
    steps: Sequence[Any],
    extra_fields: Mapping[str, Any] | None,
    judge: Callable[[Detector], Awaitable[Any]],
    *,
    over_search_detector: bool = True,
    under_search_detector: bool = True,
    policy: HipragErrorPolicy | str = HipragErrorPolicy.EXCLUDE,
) -> StepJudgements:
    """Judges every step of one trajectory: search steps by the over-search judge (conclusion vs the policy's
    re-answer, Figure 5), non-search steps by the under-search verifier (Figure 6), each detector's steps in one
    concurrent batch.

    Re-answers are paired with the search steps by :func:`agentrag_verl.agent_loops.steps.search_step_reanswers`
    (the pairing the agent loop, the reward and the evaluation share); a search step without one is not sent and
    counts as a failed verdict under ``policy``.

    Args:
        steps: The parsed steps (:attr:`agentrag_verl.formats.Trajectory.steps` of the HiPRAG grammar).
        extra_fields: The agent loop's ``extra_fields`` (``agentrag_reanswers``, ``agentrag_steps``).
        judge: ``await judge(detector)`` returns the :class:`~agentrag_verl.judges.JudgeClient` of a detector;
            called only when that detector has steps to judge.
        over_search_detector: Judge search steps (off: ablation "under-search only"; they are not counted here).
        under_search_detector: Judge non-search steps (off: ablation "over-search only").
        policy: How a failed verdict enters ``flagged``.

    Returns:
        The findings; the verdict counts hold valid verdicts only, whatever ``policy``.
    """
    from agentrag_verl.agent_loops.steps import search_step_reanswers

    policy = choose_policy(HipragErrorPolicy, policy, "reward.reward_kwargs.judge_error_policy")
    steps = list(steps)
    reanswers = search_step_reanswers(steps, extra_fields)
    requests: dict[Detector, dict[int, JudgeRequest[bool]]] = {"over_search": {}, "under_search": {}}
    for i, step in enumerate(steps):
        if step.is_search and over_search_detector:
            if reanswers[i] is not None:
                requests["over_search"][i] = over_search_request(step.conclusion or "", reanswers[i])
        elif not step.is_search and under_search_detector:
            requests["under_search"][i] = under_search_request(step.reasoning or "", step.conclusion or "")
    verdicts: dict[int, Verdict[bool]] = {}
    for detector, reqs in requests.items():
        if reqs:
            client = await judge(detector)
            verdicts.update(zip(reqs, await client.judge_many(list(reqs.values())), strict=True))

    flagged: list[bool | None] = [None] * len(steps)
    found = {"over_search": 0, "under_search": 0}
    judged = {"over_search": 0, "under_search": 0}
    failures = missing = 0
    for i, step in enumerate(steps):
        detector: Detector = "over_search" if step.is_search else "under_search"
        if not (over_search_detector if step.is_search else under_search_detector):
            continue
        verdict = verdicts.get(i)
        if verdict is None:
            verdict = _MISSING_REANSWER
            missing += 1
        elif not verdict.ok:
            failures += 1
        optimal = step_optimal(verdict, detector, policy)
        if verdict.ok:
            judged[detector] += 1
            found[detector] += optimal is False
        flagged[i] = None if optimal is None else not optimal
    return StepJudgements(
        is_search=tuple(s.is_search for s in steps),
        flagged=tuple(flagged),
        over_search=found["over_search"],
        under_search=found["under_search"],
        judged_search=judged["over_search"],
        judged_non_search=judged["under_search"],
        failures=failures,
        missing_reanswers=missing,
        requests=sum(len(r) for r in requests.values()),
    )
