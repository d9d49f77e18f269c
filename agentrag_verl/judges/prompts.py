"""Every judge and planner prompt the papers give, with the slots each one needs.

Texts are the papers' own words (only line breaks are laid out, since the text extractions flatten them):

- HiPRAG (Appendix D): Figure 5 "Prompt for Over-search Detection" and Figure 6 "Prompt for
  Under-search Detection" are system prompts; the paper gives no user-message layout, so the two statements are
  sent as ``Statement 1`` / ``Statement 2`` (Figure 5 speaks of "these two statements") and the step as
  ``<reasoning>``/``<conclusion>`` tags (the tags Figure 6 refers to). The over-search re-answer prompt for the
  *policy* (not a judge) comes from the authors' code (``docs/methods/hiprag.md``) and is here for completeness.
- Multi-stage paper (Appendix B.4 "Instruction for Judge LLM"): one user message with
  the normalized prediction and the normalized gold answers inline. It has no question slot.
- ReasonRAG (Figure 14 "System prompt for Process Evaluation"); the user
  message follows the layout of the paper's judge cases (Figures 8-10): Question, Golden Answers, Agent Thoughts.
- Search-P1 (Appendix D): Figure 8 reference planner generation and Figure 9 dual-track
  evaluation, each one user message with the slots in braces exactly as the figures name them.

Decisions: several gold answers are joined with ``" | "`` (after normalization they contain no punctuation, so the
separator is unambiguous); the extraction's typographic quotes around True/False in Figures 5-6 are ASCII quotes.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence

from agentrag_verl.metrics import normalize_answer

__all__ = [
    "Message",
    "HIPRAG_OVER_SEARCH_SYSTEM",
    "HIPRAG_OVER_SEARCH_USER",
    "HIPRAG_UNDER_SEARCH_SYSTEM",
    "HIPRAG_UNDER_SEARCH_USER",
    "HIPRAG_REANSWER_TEMPLATE",
    "MULTISTAGE_JUDGE_TEMPLATE",
    "REASONRAG_PROCESS_SYSTEM",
    "REASONRAG_PROCESS_USER",
    "SEARCHP1_PLANNER_TEMPLATE",
    "SEARCHP1_EVALUATION_TEMPLATE",
    "ANSWER_SEPARATOR",
    "template_slots",
    "format_answers",
    "format_reasoning_path",
    "hiprag_over_search",
    "hiprag_under_search",
    "hiprag_reanswer",
    "multistage_correctness",
    "reasonrag_process_score",
    "searchp1_planner",
    "searchp1_evaluate",
]

Message = dict[str, str]
"""A chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""

ANSWER_SEPARATOR = " | "
"""Joins several gold answers in one slot."""

# --- HiPRAG, Appendix D -----------------------------------------------------------------------------------------

HIPRAG_OVER_SEARCH_SYSTEM = (
    "You are an expert in Natural Language Understanding and Semantic Analysis. Your goal is to determine if these "
    "two statements are semantically equivalent\u2014that is, if they mean the same thing and convey the same core "
    'information. Provide your answers with a single boolean value "True" or "False" in the tag <answer></answer> '
    "(e.g. <answer>True</answer> or <answer>False</answer>)."
)
"""HiPRAG Figure 5, Prompt for Over-search Detection (system). Verdict True = equivalent = over-search."""

HIPRAG_OVER_SEARCH_USER = "Statement 1: {statement}\nStatement 2: {regenerated}"
"""User message for Figure 5: the search step's conclusion ``o`` and the policy's re-answer ``o'``."""

HIPRAG_UNDER_SEARCH_SYSTEM = (
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

HIPRAG_UNDER_SEARCH_USER = "<reasoning>{reasoning}</reasoning>\n<conclusion>{conclusion}</conclusion>"
"""User message for Figure 6: the non-search step's reasoning ``r`` and conclusion ``o``."""

HIPRAG_REANSWER_TEMPLATE = (
    "Please answer the following question or provide relevant information to the statement: {query}"
)
"""The policy prompt (HiPRAG authors' code, ``docs/methods/hiprag.md``) that re-answers a search query ``q`` as a
standalone question; wrap it in the policy's chat template. Not a judge prompt: its answer ``o'`` goes into Figure 5."""

# --- Multi-stage paper, B.4 -------------------------------------------------------------------------------------

MULTISTAGE_JUDGE_TEMPLATE = (
    "You are an evaluation assistant. Your task is to determine whether the given prediction semantically matches "
    "any of the reference answers. This is a flexible match: even if the wording is different, if the meaning is the "
    "same, consider it a match.\n"
    "Prediction: {prediction}\n"
    "Reference Answers: {references}\n"
    "Please answer with a single word:\n"
    "- YES \u2192 if the prediction expresses the same meaning as any of the reference answers.\n"
    "- NO \u2192 otherwise.\n"
    "Only respond with YES or NO."
)
"""Multi-stage paper, B.4 "Instruction for Judge LLM" (one user message)."""

# --- ReasonRAG, Figure 14 ---------------------------------------------------------------------------------------

REASONRAG_PROCESS_SYSTEM = (
    "An agent is tasked with answering a question using a retrieval tool. Critically assess its intermediate "
    "reasoning process to determine if it leads to the correct answer. Identify all flaws, inconsistencies, and "
    "mistakes in the thought process. Every imperfection, no matter how small, must be acknowledged. Evaluate how "
    "effectively the reasoning supports the final answer and the overall accuracy of the response. Ensure the "
    "evaluation is extremely harsh, leaving no leniency. Even if the answer seems close to correct, do not award full "
    "marks to maintain strict grading standards. Assign a score between [0, 1] based on the severity of flaws and the "
    "reasoning's accuracy in leading to the golden answer. Respond briefly and conclude with: So the score is [Score]."
)
"""ReasonRAG Figure 14, System prompt for Process Evaluation."""

REASONRAG_PROCESS_USER = "Question: {question}\nGolden Answers: {golden_answers}\nAgent Thoughts: {trajectory}"
"""User message for Figure 14, laid out like the paper's judge cases (Figures 8-10)."""

# --- Search-P1, Appendix D --------------------------------------------------------------------------------------

SEARCHP1_PLANNER_TEMPLATE = (
    "You are an expert planner and reasoning optimizer.\n"
    "Current Question: {question}\n"
    "Correct Answer: {golden_answers}\n"
    "Your task is to generate:\n"
    "1. Optimized Reasoning Path: A sequence of search queries that would lead directly to the correct answer in the "
    "most efficient way. Format as a numbered list.\n"
    "2. Optimized Planner: A concise, step-by-step instruction on how a reasoning agent should solve this question "
    "correctly and efficiently.\n"
    "Important: Focus on the minimal set of queries needed. Avoid redundant or inefficient steps.\n"
    "Output format:\n"
    "<correct_reasoning_path>\n"
    "1. query 1\n"
    "2. query 2\n"
    "</correct_reasoning_path>\n"
    "<optimized_planner>\n"
    "To solve this, first search for... then...\n"
    "</optimized_planner>"
)
"""Search-P1 Figure 8, Reference Planner Generation Prompt (one user message)."""

SEARCHP1_EVALUATION_TEMPLATE = (
    "You are an expert RL researcher evaluating an AI agent\u2019s trajectory. Your task is to conduct a Dual-Track "
    "Evaluation:\n"
    "1. Self-Consistency Track: How well did the agent execute its OWN plan?\n"
    "2. Reference-Alignment Track: How well did the agent follow the Expert plan?\n"
    "3. Outcome Evaluation: Assess accuracy and reasoning quality.\n"
    "Evaluation Inputs:\n"
    "Question: {question}\n"
    "Correct Answer: {golden_answers}\n"
    "Reference Planner: {ref_planner}\n"
    "Reference Path: {ref_reasoning_path}\n"
    "Model Trajectory: {trajectory}\n"
    "Scoring Criteria:\n"
    "Planner Score: 0.2 (Bad) / 0.6 (Average) / 1.0 (Good) / 1.2 (Excellent)\n"
    "Outcome Accuracy: 0.0 (Wrong) / 0.5 (Partial) / 1.0 (Correct)\n"
    "Reasoning Quality: 0.0 / 0.5 / 0.8 / 1.0\n"
    "Output: JSON with planner_score, model_plan_steps, effective_steps_self, effective_steps_ref, "
    "outcome_accuracy_score, outcome_reasoning_score."
)
"""Search-P1 Figure 9, Dual-Track Evaluation Prompt (one user message)."""


def template_slots(template: str) -> list[str]:
    """The named ``{slots}`` of a template, in order of appearance.

    >>> template_slots(HIPRAG_UNDER_SEARCH_USER)
    ['reasoning', 'conclusion']
    """
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def format_answers(answers: str | Iterable[str], normalize: bool = False) -> str:
    """Formats one or several gold answers for a prompt slot.

    Args:
        answers: A string or an iterable of strings (verl hands ``ground_truth.target`` over as a numpy array).
        normalize: Apply :func:`~agentrag_verl.metrics.normalize_answer` to each.

    Returns:
        The answers joined with :data:`ANSWER_SEPARATOR`.

    >>> format_answers(["The Eiffel Tower", "Eiffel Tower"], normalize=True)
    'eiffel tower | eiffel tower'
    """
    items = [answers] if isinstance(answers, str) else [str(a) for a in answers]
    if normalize:
        items = [normalize_answer(a) for a in items]
    return ANSWER_SEPARATOR.join(items)


def format_reasoning_path(queries: Sequence[str] | str) -> str:
    """Formats a reference reasoning path as the numbered list Figure 8 asks for (a string passes through).

    >>> print(format_reasoning_path(["director of Il Coraggio", "Domenico Paolella death"]))
    1. director of Il Coraggio
    2. Domenico Paolella death
    """
    if isinstance(queries, str):
        return queries
    return "\n".join(f"{i}. {q}" for i, q in enumerate(queries, 1))


def _system_user(system: str, user: str) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def hiprag_over_search(statement: str, regenerated: str) -> list[Message]:
    """Messages for HiPRAG's over-search judge (Figure 5).

    Args:
        statement: The search step's conclusion ``o_i``.
        regenerated: The policy's re-generated answer ``o'_i`` to the step's query asked standalone.

    Returns:
        ``[system, user]`` messages; the judge answers ``<answer>True</answer>`` if they are equivalent.

    >>> hiprag_over_search("Paris is the capital.", "The capital is Paris.")[1]["content"]
    'Statement 1: Paris is the capital.\\nStatement 2: The capital is Paris.'
    """
    return _system_user(
        HIPRAG_OVER_SEARCH_SYSTEM, HIPRAG_OVER_SEARCH_USER.format(statement=statement, regenerated=regenerated)
    )


def hiprag_under_search(reasoning: str, conclusion: str) -> list[Message]:
    """Messages for HiPRAG's under-search verifier (Figure 6).

    Args:
        reasoning: The non-search step's ``<reasoning>`` text ``r_i``.
        conclusion: Its ``<conclusion>`` text ``o_i``.

    Returns:
        ``[system, user]`` messages; the verifier answers ``<answer>False</answer>`` for an incorrect step.
    """
    return _system_user(
        HIPRAG_UNDER_SEARCH_SYSTEM, HIPRAG_UNDER_SEARCH_USER.format(reasoning=reasoning, conclusion=conclusion)
    )


def hiprag_reanswer(query: str) -> list[Message]:
    """The policy prompt re-answering a search query standalone (authors' code; for the over-search detector).

    >>> hiprag_reanswer("capital of France")[0]["content"][-17:]
    'capital of France'
    """
    return [{"role": "user", "content": HIPRAG_REANSWER_TEMPLATE.format(query=query)}]


def multistage_correctness(
    prediction: str, references: str | Iterable[str], *, normalize: bool = True
) -> list[Message]:
    """Messages for the multi-stage paper's correctness judge (B.4 "Instruction for Judge LLM").

    Args:
        prediction: The extracted final answer.
        references: The gold answers.
        normalize: Normalize prediction and references (the prompt says "normalized prediction" / "normalized
            golden"); ``False`` sends them verbatim.

    Returns:
        One user message; the judge answers YES or NO.

    >>> "Prediction: eiffel tower" in multistage_correctness("The Eiffel Tower", ["Eiffel Tower"])[0]["content"]
    True
    """
    shown = normalize_answer(prediction) if normalize else prediction
    text = MULTISTAGE_JUDGE_TEMPLATE.format(prediction=shown, references=format_answers(references, normalize))
    return [{"role": "user", "content": text}]


def reasonrag_process_score(question: str, golden_answers: str | Iterable[str], trajectory: str) -> list[Message]:
    """Messages for ReasonRAG's process evaluation of a (partial) trajectory (Figure 14, Eq. 6).

    Args:
        question: The question.
        golden_answers: The gold answers.
        trajectory: The agent's thoughts so far (queries, evidence, possibly an answer).

    Returns:
        ``[system, user]`` messages; the judge ends with "So the score is X".
    """
    user = REASONRAG_PROCESS_USER.format(
        question=question, golden_answers=format_answers(golden_answers), trajectory=trajectory
    )
    return _system_user(REASONRAG_PROCESS_SYSTEM, user)


def searchp1_planner(question: str, golden_answers: str | Iterable[str]) -> list[Message]:
    """Messages asking a strong LLM for a reference planner (Search-P1 Figure 8, Algorithm 1).

    Args:
        question: The training question.
        golden_answers: Its gold answers.

    Returns:
        One user message; parse the reply with :func:`~agentrag_verl.judges.parsers.parse_searchp1_planner`.
    """
    text = SEARCHP1_PLANNER_TEMPLATE.format(question=question, golden_answers=format_answers(golden_answers))
    return [{"role": "user", "content": text}]


def searchp1_evaluate(
    question: str,
    golden_answers: str | Iterable[str],
    ref_planner: str,
    ref_reasoning_path: Sequence[str] | str,
    trajectory: str,
) -> list[Message]:
    """Messages for Search-P1's dual-track evaluator (Figure 9).

    Args:
        question: The question.
        golden_answers: The gold answers.
        ref_planner: The reference planner text ``P_ref``.
        ref_reasoning_path: The reference queries ``R_ref`` (a list is numbered; a string passes through).
        trajectory: The model's trajectory text.

    Returns:
        One user message; parse the reply with :func:`~agentrag_verl.judges.parsers.parse_searchp1_evaluation`.
    """
    text = SEARCHP1_EVALUATION_TEMPLATE.format(
        question=question,
        golden_answers=format_answers(golden_answers),
        ref_planner=ref_planner,
        ref_reasoning_path=format_reasoning_path(ref_reasoning_path),
        trajectory=trajectory,
    )
    return [{"role": "user", "content": text}]
