"""Search-R1's think/search/information/answer format (Search-R1, Jin et al., 2025; the baseline every other paper
compares with).

Structure rule (:func:`check_format`, the "valid" of Search-R1 v0.3's outcome + format reward):
the response is ``<think> (<search> <information> <think>)* <answer>`` with only whitespace between blocks,
no tag of the format inside a model block, and nothing after ``</answer>``. This is the state machine of
Search-R1's reference format check (think first; after a think, a search or the answer; after a search, the
environment's information; after information, a think); empty contents are allowed there and here.

AutoSearch builds on this grammar (its own ``autosearch`` format adds the per-step validity of Eq. 1, the
intermediate-answer prompt and the fixed-depth prompts: :mod:`agentrag_verl.methods.autosearch.grammar`).

Rollout: stop at ``</search>`` / ``</answer>``; the environment appends
``\\n\\n<information>{docs}</information>\\n\\n`` (Search-R1's layout); default budget 4 search turns (as HiPRAG
and Search-P1; the AutoSearch paper states only a "relatively low maximum", its fixed-depth prompts go up to 4),
every search action the environment answers counting (an empty query too); then Search-R1's final turn, in which a
search is not run: a ``<search>`` opened there is cut from the response and ``<answer>`` appended, so the response
never holds an unexecuted search.

Prompt: Search-R1's instruction (from the Search-R1 paper and code, reproduced by AutoSearch Figures 8-12;
it keeps the published "as many times as your want" wording that Search-R1 checkpoints were trained on).
"""

from __future__ import annotations

from typing import Any

from agentrag_verl.formats.base import ActionSpec, Format, PromptTemplate, TagGrammar, Trajectory

__all__ = [
    "check_format",
    "is_valid",
    "parse",
    "render",
    "information_blocks",
    "block_word",
    "PROMPT",
    "ACTION_SPEC",
    "FORMAT",
]

_TAGS = TagGrammar(
    {"think": "T", "search": "S", "information": "I", "answer": "A"},
    structure=r"T(?:SIT)*A",
    layout=(
        ("reasoning", "<think>", "</think>\n"),
        ("query", "<search>", "</search>"),
        ("observation", "\n\n<information>", "</information>\n\n"),
    ),
    observation_tags=("information",),
    start_tags=("think",),
)


def check_format(response: Any) -> bool:
    """Search-R1's structure rule: ``think (search information think)* answer``, whitespace between blocks.

    >>> check_format("<think>t</think><search>q</search><information>d</information><think>t</think>"
    ...              "<answer>a</answer>")
    True
    >>> check_format("<think>t</think> so <answer>a</answer>")
    False
    """
    return _TAGS.matches(response)


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
    return _TAGS.parse(response)


def render(trajectory: Trajectory) -> str:
    """Canonical Search-R1 text (observations laid out as the environment appends them)."""
    return _TAGS.render(trajectory)


def information_blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) of each observation block, lexed as :func:`parse` does.

    >>> information_blocks("<think>a</think><search>q</search><information>d</information><answer>x</answer>")
    [(34, 62)]
    """
    return _TAGS.observation_spans(text)


def block_word(text: str) -> str | None:
    """The blocks of ``text`` as letters (``T`` think, ``S`` search, ``I`` information, ``A`` answer), or None when
    anything but whitespace lies between them or a tag of the format is misplaced (the strict lexer).

    >>> block_word("<think>a</think> <search>q</search>"), block_word("<think>a</think> so <search>q</search>")
    ('TS', None)
    """
    return _TAGS.word(text)


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
    paper="Search-R1 (Jin et al., 2025)",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={"searchr1": PROMPT},
)
