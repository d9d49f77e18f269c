"""Search-P1's reasoning/tool_call/tool_response/answer format (Search-P1: Path-Centric Reward Shaping for Stable
and Efficient Agentic RAG Training; decisions: ``docs/methods/searchp1.md#decisions``).

Implements the rollout of **Algorithm 2**, the format reward of **Algorithm 3** (l. 1-8) and the inference prompt
of **Figure 7** (Appendix D.1).

``ValidFormat`` is not spelled out in the paper; we define it (:func:`valid_format`) as the grammar
``<reasoning> (<reasoning> | <tool_call> <tool_response>)* <answer>``: the first turn opens with the plan
(Figure 7: "In the first turn, you MUST break the question down"), every tool call is answered by the
environment's tool response, later reasoning blocks are optional, exactly one answer ends the response; only
whitespace between blocks and no tag of the format inside a model block (tool-response content is
environment text). ``HasAnswer`` is a non-blank answer, ``HasToolCall`` at least one closed ``<tool_call>``,
``HasToolResponse`` at least one ``<tool_response>``.

:func:`check_format` returns Algorithm 3's three-way validity as :class:`FormatLevel`, a ``float`` enum whose
value is r_f (1.0 / 0.5, weighted by λf = 0.1 to the listed 0.1 / 0.05):

- ``FULL`` (1.0): ValidFormat and HasAnswer and HasToolCall;
- ``HALF`` (0.5): otherwise HasAnswer and HasToolResponse;
- ``INVALID`` (0.0): otherwise; Algorithm 3 then returns a total reward of 0.

As a float, ``bool(level)`` is true for FULL and HALF ("earns format credit"). Note that a well-formed answer
without any search is INVALID, as Algorithm 3 reads. :func:`is_valid` (format compliance, Table 6) is
ValidFormat and HasAnswer.

Rollout (Algorithm 2): the environment writes ``<reasoning>`` first (l. 1, ``response_prefix``); generation
stops at ``</tool_call>`` / ``</answer>`` (l. 3); the query is the tool call's content (l. 9) and the
environment appends ``<tool_response>docs</tool_response>`` (l. 11; we add newlines around it, Qwen's hermes
layout; whitespace is insignificant to the grammar); budget B = 4 (B.4) tool calls: right after the B-th tool
response the environment appends ``<answer>`` (l. 15-16) and the model writes the answer, so a trajectory that
uses all B actions is FULL with B actions. Leniency: a tool call holding JSON
(``{"name": ..., "arguments": {"query": ...}}``, what Qwen-Instruct models emit) yields its ``query`` (first of
``query_list``); the step's span then covers the raw JSON.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from agentrag_verl.formats.base import ActionSpec, Format, PromptTemplate, TagGrammar, Trajectory, as_text

__all__ = [
    "FormatLevel",
    "check_format",
    "valid_format",
    "is_valid",
    "parse",
    "render",
    "query_from_tool_call",
    "PROMPT",
    "ACTION_SPEC",
    "FORMAT",
]


class FormatLevel(float, Enum):
    """Algorithm 3's format validity; the value is r_f before the λf weight."""

    FULL = 1.0
    """Valid format, an answer and a tool call (r_f = 0.1 after λf)."""
    HALF = 0.5
    """An answer and a tool response, format not fully valid (0.05 after λf)."""
    INVALID = 0.0
    """Neither: the trajectory's whole reward is 0."""


def query_from_tool_call(content: str) -> str:
    """The query in a tool call's content: the stripped text, or the ``query`` argument of a JSON call.

    >>> query_from_tool_call(' lead singer of Art Brut ')
    'lead singer of Art Brut'
    >>> query_from_tool_call('{"name": "search", "arguments": {"query_list": ["Art Brut"]}}')
    'Art Brut'
    """
    s = content.strip()
    if not s.startswith("{"):
        return s
    try:
        call = json.loads(s)
    except ValueError:
        return s
    args = call.get("arguments", call) if isinstance(call, dict) else None
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return s
    if not isinstance(args, dict):
        return s
    query = args.get("query", args.get("query_list"))
    if isinstance(query, list):
        query = query[0] if query else ""
    return str(query).strip() if query is not None else s


_TAGS = TagGrammar(
    {"reasoning": "R", "tool_call": "C", "tool_response": "O", "answer": "A"},
    structure=r"R(?:R|CO)*A",
    layout=(
        ("reasoning", "<reasoning>", "</reasoning>\n"),
        ("query", "<tool_call>", "</tool_call>"),
        ("observation", "\n<tool_response>\n", "\n</tool_response>\n"),
    ),
    observation_tags=("tool_response",),
    start_tags=("reasoning",),
    normalizers={"query": query_from_tool_call},
)


def valid_format(response: Any) -> bool:
    """``ValidFormat``: ``reasoning (reasoning | tool_call tool_response)* answer``, whitespace between blocks.

    >>> valid_format("<reasoning>plan</reasoning><tool_call>q</tool_call><tool_response>d</tool_response>"
    ...              "<answer>a</answer>")
    True
    """
    return _TAGS.matches(response)


def parse(response: Any) -> Trajectory:
    """Parse a Search-P1 response: one step per tool call, with the reasoning before it. Never raises.

    >>> t = parse("<reasoning>plan</reasoning><tool_call>q</tool_call><tool_response>d</tool_response>"
    ...           "<answer>a</answer>")
    >>> [(s.kind, s.reasoning, s.query, s.observation) for s in t.steps], t.answer
    ([('search', 'plan', 'q', 'd')], 'a')
    """
    return _TAGS.parse(response)


def check_format(response: Any) -> FormatLevel:
    """Algorithm 3, l. 1-8: FULL, HALF or INVALID.

    >>> check_format("<reasoning>p</reasoning><tool_call>q</tool_call><tool_response>d</tool_response>"
    ...              "<answer>a</answer>")
    <FormatLevel.FULL: 1.0>
    >>> check_format("<tool_call>q</tool_call><tool_response>d</tool_response> Final: <answer>a</answer>")
    <FormatLevel.HALF: 0.5>
    """
    text = as_text(response)
    blocks = _TAGS.valid_blocks(text)
    if blocks is not None:
        # ValidFormat: the answer is the last block; a tool response implies a tool call in this grammar.
        _, start, end = blocks[-1]
        has_answer = bool(text[start:end].strip())
        has_tool_call = any(tag == "tool_call" for tag, _, _ in blocks)
        return FormatLevel.FULL if has_answer and has_tool_call else FormatLevel.INVALID
    has_answer = bool(parse(text).answer)
    if has_answer and _TAGS.observation_spans(text):
        return FormatLevel.HALF
    return FormatLevel.INVALID


def is_valid(response: Any) -> bool:
    """Format compliance (Table 6): ValidFormat and a non-blank answer."""
    text = as_text(response)
    return valid_format(text) and bool(parse(text).answer)


def render(trajectory: Trajectory) -> str:
    """Canonical Search-P1 text (observations laid out as :data:`ACTION_SPEC` appends them)."""
    return _TAGS.render(trajectory)


# Figure 7 (Appendix D.1). Line breaks restored from the Markdown headings and numbered list; typographic quotes
# written in ASCII.
PROMPT = PromptTemplate(
    name="searchp1",
    source="Search-P1 Figure 7 (Agentic RAG Inference Prompt)",
    user="""\
You are a meticulous Deep Research Agent. Your goal is to provide a comprehensive and accurate answer by \
conducting multiple rounds of search.

## CRITICAL INSTRUCTIONS
1. Detailed Planning (<reasoning>): In the first turn, you MUST break the question down into multiple dependent \
sub-questions. Focus on one sub-question at a time.
2. Step-by-Step Execution (<tool_call>): Execute only ONE search query per turn. After receiving results, verify: \
"Is this sufficient? Do I need more details?"
3. No Guessing: If results are incomplete, issue another search. Do NOT hallucinate.
4. Final Answer (<answer>): Only output <answer> when ALL necessary information is gathered.

## CURRENT TASK
Question: {question}""",
)

ACTION_SPEC = ActionSpec(
    stop=("</tool_call>", "</answer>"),
    search_tags=("<tool_call>", "</tool_call>"),
    observation_template="\n<tool_response>\n{docs}\n</tool_response>\n",
    force_answer_prefix="<answer>",
    budget=4,  # B.4: action budget B = 4
    after_budget="force",  # Alg. 2 l. 15-16: <answer> right after the B-th <tool_response>
    response_prefix="<reasoning>",
    query_from_content=query_from_tool_call,
)

FORMAT = Format(
    name="searchp1",
    paper="Search-P1: Algorithms 2-3, Figure 7",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={"searchp1": PROMPT},
)
