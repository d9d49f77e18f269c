"""AutoSearch's grammar: Search-R1's tags (:mod:`agentrag_verl.methods.searchr1.grammar`) with AutoSearch's per-step
validity, its intermediate-answer prompt and its fixed-depth prompts (AutoSearch: Adaptive Search Depth for
Efficient Agentic RAG, §4.1 step format reward Eq. 1, Prompt 1, Figures 8-13; decisions:
``docs/methods/autosearch.md#decisions``).

The ``autosearch`` format parses, checks and renders exactly as ``searchr1`` does and rolls out the same way; its
agent loop (:mod:`agentrag_verl.methods.autosearch.agent_loop`) adds the intermediate answers.

AutoSearch per-step validity (:func:`step_validity`, Eq. 1): the response is cut into turns at the
environment's ``<information>`` blocks; turns 1..T-1 are retrieval steps and turn T is the answer step.

- Retrieval step valid iff the turn is exactly ``<think>...</think> <search>q</search>`` (tag-free contents,
  whitespace between), q is not blank, and q does not repeat an earlier query (TF-IDF cosine > 0.8,
  :mod:`~agentrag_verl.methods.autosearch.tfidf`). Decision: the think block is required because the prescribed format
  (Search-R1 prompt: "reasoning inside <think> and </think> first every time you get new information") puts
  it there; ``require_think=False`` relaxes it. Earlier queries include those of malformed steps.
- Answer step valid iff the final turn holds exactly one ``<answer>`` and one ``</answer>``, in order, with a
  non-blank answer and nothing after ``</answer>`` ("At the final step, only the format of the produced
  answer is evaluated", §4.1); the text before ``<answer>`` is not checked, so a forced answer is valid.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from agentrag_verl.formats.base import PromptTemplate, as_text
from agentrag_verl.methods.autosearch.tfidf import REPEAT_THRESHOLD, repeated_queries
from agentrag_verl.methods.searchr1 import grammar as sr1

__all__ = [
    "step_validity",
    "retrieval_step_prefixes",
    "fixed_depth_prompt",
    "INTERMEDIATE_ANSWER_PROMPT",
    "FORMAT",
]

_RETRIEVAL_TURN = re.compile(r"TS")
_RETRIEVAL_TURN_NO_THINK = re.compile(r"T?S")


def retrieval_step_prefixes(response: Any) -> list[str]:
    """The response up to the end of each retrieval step's observation: AutoSearch's ``x_t`` (Eq. 4) without
    the question, for the ``{trajectory}`` slot of :data:`INTERMEDIATE_ANSWER_PROMPT`.

    >>> retrieval_step_prefixes("<think>a</think><search>q</search><information>d</information><answer>x</answer>")
    ['<think>a</think><search>q</search><information>d</information>']
    """
    text = as_text(response)
    return [text[:end] for _, end in sr1.information_blocks(text)]


def _terminal_valid(turn: str) -> bool:
    if turn.count("<answer>") != 1 or turn.count("</answer>") != 1:
        return False
    o = turn.find("<answer>")
    c = turn.find("</answer>", o)
    if c < 0 or not turn[o + len("<answer>") : c].strip():
        return False
    return not turn[c + len("</answer>") :].strip()


def step_validity(
    response: Any, *, repeat_threshold: float = REPEAT_THRESHOLD, require_think: bool = True
) -> list[bool]:
    """AutoSearch's ``valid_t`` (Eq. 1) for each step: the retrieval steps, then the answer step.

    Args:
        response: The whole response with its ``<information>`` blocks.
        repeat_threshold: TF-IDF cosine above which a query repeats an earlier one.
        require_think: Whether a retrieval step must open with a ``<think>`` block.

    Returns:
        ``T`` flags: one per retrieval step (one per ``<information>`` block), then the answer step.

    >>> step_validity("<think>a</think><search>q</search><information>d</information>"
    ...               "<think>b</think><search>q</search><information>d</information><think>c</think>"
    ...               "<answer>x</answer>")
    [True, False, True]
    """
    text = as_text(response)
    turns = []
    pos = 0
    for start, end in sr1.information_blocks(text):
        turns.append(text[pos:start])
        pos = end
    final = text[pos:]
    shape = _RETRIEVAL_TURN if require_think else _RETRIEVAL_TURN_NO_THINK
    formed = []
    queries: list[str] = []
    query_index: list[int | None] = []
    for turn in turns:
        word = sr1.block_word(turn)
        ok = word is not None and shape.fullmatch(word) is not None
        action = sr1.ACTION_SPEC.extract_action(turn)
        if action is not None and action.kind == "search":
            query_index.append(len(queries))
            queries.append(action.content)
            ok = ok and bool(action.content)
        else:
            query_index.append(None)
            ok = False
        formed.append(ok)
    repeats = repeated_queries(queries, repeat_threshold)
    valid = [ok and (i is None or not repeats[i]) for ok, i in zip(formed, query_index, strict=True)]
    valid.append(_terminal_valid(final))
    return valid


# AutoSearch Prompt 1 (§4.2). The extraction set the slots in bold; line breaks follow the listing.
INTERMEDIATE_ANSWER_PROMPT = PromptTemplate(
    name="intermediate_answer",
    source="AutoSearch Prompt 1 (Intermediate Answer Prompt, Eq. 5)",
    user=(
        "Answer the given question according to search trajectories, which consists of multiple reasoning, "
        "search calls, and retrieved information. Important instructions:\n"
        "(1) You must conduct reasoning inside <think> and </think> first.\n"
        "(2) After reasoning, output the final answer wrapped in <answer> and </answer>.\n"
        "For example: <think> Reasoning </think>\n"
        "<answer> Jaden Smith </answer>.\n"
        "Search trajectory: Question: {question}. Below are your previous reasoning, search calls, and retrieved "
        "information: {trajectory}."
    ),
)

_NUMBER_WORDS = ("one", "two", "three", "four")


def fixed_depth_prompt(num_searches: int) -> PromptTemplate:
    """AutoSearch's fixed-depth prompts (Figures 8-12, the search-depth analysis of §3) for 0-4 searches.

    >>> "exactly two times" in fixed_depth_prompt(2).user
    True
    """
    if num_searches == 0:
        user = (
            "Answer the given question. You must conduct reasoning inside <think> and </think> first. After "
            "reasoning, you can directly provide the answer inside <answer> and </answer>, without detailed "
            "illustrations. For example, <answer> Beijing </answer>. Question: {question}"
        )
    elif 1 <= num_searches <= len(_NUMBER_WORDS):
        word = _NUMBER_WORDS[num_searches - 1]
        times = "time" if num_searches == 1 else "times"
        after = "After searching" if num_searches == 1 else "After all searching"
        user = (
            "Answer the given question. You must conduct reasoning inside <think> and </think> first every time "
            "you get new information. After reasoning, you can call a search engine by <search> query </search> "
            "and it will return the top searched results between <information> and </information>. You should "
            f"search exactly {word} {times}. The number of searches must be no less than {word}. {after}, you can "
            "directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
            "example, <answer> Beijing </answer>. Question: {question}"
        )
    else:
        raise ValueError(
            f"AutoSearch gives fixed-depth prompts for 0-4 searches (Figures 8-12); got num_searches={num_searches}."
        )
    return PromptTemplate(name=f"fixed_depth_{num_searches}", source=f"AutoSearch Figure {8 + num_searches}", user=user)


FORMAT = dataclasses.replace(
    sr1.FORMAT,
    name="autosearch",
    paper="AutoSearch §4.1 (Eq. 1), Prompt 1, Figures 8-13, on Search-R1's tags (Jin et al., 2025)",
    prompts={
        "searchr1": sr1.PROMPT,
        "intermediate_answer": INTERMEDIATE_ANSWER_PROMPT,
        **{f"fixed_depth_{n}": fixed_depth_prompt(n) for n in range(5)},
    },
)
