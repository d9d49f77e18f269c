"""Search-R1's think/search/information/answer format, shared by AutoSearch (decisions:
``docs/methods/autosearch.md#decisions``).

Papers: Search-R1 (Jin et al., 2025; the baseline every other paper compares with) and AutoSearch: Adaptive
Search Depth for Efficient Agentic RAG (§4.1 step format reward Eq. 1, Prompt 1, Figures 8-13).

Structure rule (:func:`check_format`, the "valid" of Search-R1 v0.3's outcome + format reward):
the response is ``<think> (<search> <information> <think>)* <answer>`` with only whitespace between blocks,
no tag of the format inside a model block, and nothing after ``</answer>``. This is the state machine of
Search-R1's reference format check (think first; after a think, a search or the answer; after a search, the
environment's information; after information, a think); empty contents are allowed there and here.

AutoSearch per-step validity (:func:`step_validity`, Eq. 1): the response is cut into turns at the
environment's ``<information>`` blocks; turns 1..T-1 are retrieval steps and turn T is the answer step.

- Retrieval step valid iff the turn is exactly ``<think>...</think> <search>q</search>`` (tag-free contents,
  whitespace between), q is not blank, and q does not repeat an earlier query (TF-IDF cosine > 0.8,
  :mod:`~agentrag_verl.formats.tfidf`). Decision: the think block is required because the prescribed format
  (Search-R1 prompt: "reasoning inside <think> and </think> first every time you get new information") puts
  it there; ``require_think=False`` relaxes it. Earlier queries include those of malformed steps.
- Answer step valid iff the final turn holds exactly one ``<answer>`` and one ``</answer>``, in order, with a
  non-blank answer and nothing after ``</answer>`` ("At the final step, only the format of the produced
  answer is evaluated", §4.1); the text before ``<answer>`` is not checked, so a forced answer is valid.

Rollout: stop at ``</search>`` / ``</answer>``; the environment appends
``\\n\\n<information>{docs}</information>\\n\\n`` (Search-R1's layout); default budget 4 search turns (as HiPRAG
and Search-P1; the AutoSearch paper states only a "relatively low maximum", its fixed-depth prompts go up to 4),
every search action the environment answers counting (an empty query too); then Search-R1's final turn, in which a
search is not run: a ``<search>`` opened there is cut from the response and ``<answer>`` appended, so the response
never holds an unexecuted search.

Prompts: Search-R1's instruction (from the Search-R1 paper and code, reproduced by AutoSearch Figures 8-12;
it keeps the published "as many times as your want" wording that Search-R1 checkpoints were trained on),
AutoSearch Prompt 1 (intermediate answers, Eq. 5) and AutoSearch's fixed-depth prompts (Figures 8-12).
"""

from __future__ import annotations

import re
from typing import Any

from agentrag_verl.formats.base import (
    ActionSpec,
    Format,
    PromptTemplate,
    StrictLexer,
    Trajectory,
    as_text,
    build_steps,
    render_steps,
    scan_blocks,
    tag_pattern,
)
from agentrag_verl.formats.tfidf import REPEAT_THRESHOLD, repeated_queries

__all__ = [
    "check_format",
    "is_valid",
    "parse",
    "render",
    "step_validity",
    "retrieval_step_prefixes",
    "fixed_depth_prompt",
    "PROMPT",
    "INTERMEDIATE_ANSWER_PROMPT",
    "ACTION_SPEC",
    "FORMAT",
]

_MODEL_TAGS = ("think", "search", "answer")
_OBSERVATION = frozenset({"information"})
_PATTERN = tag_pattern((*_MODEL_TAGS, "information"))
_STRICT = StrictLexer(_MODEL_TAGS, ("information",))
_LETTER = {"think": "T", "search": "S", "information": "I", "answer": "A"}
_GRAMMAR = re.compile(r"T(?:SIT)*A")
_LAYOUT = (
    ("reasoning", "<think>", "</think>\n"),
    ("query", "<search>", "</search>"),
    ("observation", "\n\n<information>", "</information>\n\n"),
)
_RETRIEVAL_TURN = re.compile(r"TS")
_RETRIEVAL_TURN_NO_THINK = re.compile(r"T?S")
_FIELDS = {"think": "reasoning", "search": "query", "information": "observation"}


def check_format(response: Any) -> bool:
    """Search-R1's structure rule: ``think (search information think)* answer``, whitespace between blocks.

    >>> check_format("<think>t</think><search>q</search><information>d</information><think>t</think>"
    ...              "<answer>a</answer>")
    True
    >>> check_format("<think>t</think> so <answer>a</answer>")
    False
    """
    text = as_text(response)
    word = _STRICT.word(text, _LETTER)
    return word is not None and _GRAMMAR.fullmatch(word) is not None


is_valid = check_format


def parse(response: Any) -> Trajectory:
    """Parse a Search-R1 response. Never raises.

    Each ``<think>`` starts a step; the following ``<search>`` and ``<information>`` belong to it (a search
    without a preceding think forms its own step). The think before the answer is a ``non_search`` step.

    >>> t = parse("<think>a</think><search>q</search><information>Doc 1</information><think>b</think>"
    ...           "<answer>x</answer>")
    >>> [s.kind for s in t.steps], t.queries, t.answer
    (['search', 'non_search'], ['q'], 'x')
    """
    text = as_text(response)
    blocks = scan_blocks(text, _PATTERN, _OBSERVATION)
    return build_steps(text, blocks, _FIELDS, start_tags=frozenset({"think"}))


def render(trajectory: Trajectory) -> str:
    """Canonical Search-R1 text (observations laid out as the environment appends them)."""
    return render_steps(trajectory, _LAYOUT)


def _information_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of each observation block, lexed as :func:`parse` does."""
    return [(b.start, b.end) for b in scan_blocks(text, _PATTERN, _OBSERVATION) if b.tag == "information"]


def retrieval_step_prefixes(response: Any) -> list[str]:
    """The response up to the end of each retrieval step's observation: AutoSearch's ``x_t`` (Eq. 4) without
    the question, for the ``{trajectory}`` slot of :data:`INTERMEDIATE_ANSWER_PROMPT`.

    >>> retrieval_step_prefixes("<think>a</think><search>q</search><information>d</information><answer>x</answer>")
    ['<think>a</think><search>q</search><information>d</information>']
    """
    text = as_text(response)
    return [text[:end] for _, end in _information_blocks(text)]


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
    for start, end in _information_blocks(text):
        turns.append(text[pos:start])
        pos = end
    final = text[pos:]
    shape = _RETRIEVAL_TURN if require_think else _RETRIEVAL_TURN_NO_THINK
    formed = []
    queries: list[str] = []
    query_index: list[int | None] = []
    for turn in turns:
        word = _STRICT.word(turn, _LETTER)
        ok = word is not None and shape.fullmatch(word) is not None
        action = ACTION_SPEC.extract_action(turn)
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


PROMPT = PromptTemplate(
    name="searchr1",
    source="Search-R1 instruction (Jin et al., 2025), as reproduced in AutoSearch Figures 8-12",
    user=(
        "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
        "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine "
        "by <search> query </search> and it will return the top searched results between <information> and "
        "</information>. You can search as many times as your want. If you find no further external knowledge "
        "needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
        "illustrations. For example, <answer> Beijing </answer>. Question: {question}\n"
    ),
)

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


ACTION_SPEC = ActionSpec(
    stop=("</search>", "</answer>"),
    search_tags=("<search>", "</search>"),
    observation_template="\n\n<information>{docs}</information>\n\n",
    force_answer_prefix="<answer>",
    budget=4,
    # Search-R1's rollout: after the last search turn one final generation in which a search is not run
    after_budget="final_turn",
)

FORMAT = Format(
    name="searchr1",
    paper="Search-R1 (Jin et al., 2025); AutoSearch §4.1 (Eq. 1), Prompt 1, Figures 8-13",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={
        "searchr1": PROMPT,
        "intermediate_answer": INTERMEDIATE_ANSWER_PROMPT,
        **{f"fixed_depth_{n}": fixed_depth_prompt(n) for n in range(5)},
    },
)
