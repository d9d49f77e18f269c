"""HiPRAG's parsable step format (HiPRAG: Hierarchical Process Rewards for Efficient Agentic RAG, Wu et al.).

Implements Section 3.1, the format checker F(T) of **Algorithms 2 and 3** (Appendix C), the rollout of
Algorithm 1 (with the deviation below), the system prompt of **Figure 4** (Appendix D) and the policy's
over-search re-answer prompt (§3.2; the judges' Figures 5-6 are in :mod:`agentrag_verl.methods.hiprag.judge`).
Decisions: ``docs/methods/hiprag.md#decisions``.

Grammar: exactly one ``<think>`` holding one or more ``<step>`` blocks, then ``<answer>``. A search step is
``<reasoning> <search> <context> <conclusion>``, a non-search step ``<reasoning> <conclusion>``; ``<context>``
is written by the environment.

:func:`check_format` follows Algorithms 2-3 line by line, with two readings the pseudo-code forces:

- ``SpanBetween`` returns content indices, which would make the literal checks of Alg. 2 l. 6 and Alg. 3
  l. 6/19/25 unsatisfiable (``y[0:i_open]`` would contain ``<think>`` itself). We read them as intended: the
  text *outside* the tags (before the opening tag, between a closing tag and the next opening tag) must be
  whitespace. Strict order (Alg. 3 l. 9/18) compares tag positions.
- ``Normalize`` (Alg. 2 l. 3) canonicalizes ``\\r\\n`` and ``\\r`` to ``\\n``; ``Trim`` is ``str.strip``.

Implementation: the text is split once at the seven tags (one C-level regex split); every Count, Find and Trim of
the pseudo-code is then answered from the tag list and the text pieces between tags, which is exact because the
tags cannot overlap. ``tests/formats/hiprag_reference.py`` keeps the line-by-line ``str``-method transcription
and a property test asserts both agree. Throughput: ``benchmarks/formats_bench.py`` (figures in
``benchmarks/README.md``).

Like the pseudo-code, counts are taken over the raw text (a ``<think>`` inside retrieved context fails the
check), and tags inside a field's content (e.g. ``<answer>`` inside ``<reasoning>``) are not checked.
Special tokens such as ``<|im_end|>`` must be removed before checking (decode with ``skip_special_tokens``).

Rollout (Alg. 1): generation stops at ``</search>``, ``</conclusion>`` and ``</answer>`` (l. 5); after ``</search>``
the environment appends ``<context>{docs}</context>\\n<conclusion>`` (l. 12, masked); every ``</conclusion>``
closes a step, and the budget B counts steps (l. 16, B = 4 as in the authors' scripts; the paper gives no value):
after the B-th ``</conclusion>`` the environment appends ``</step>\\n</think>\\n<answer>`` (l. 15, 22-24, masked) and
the model writes the answer. Every search before that is executed (Alg. 1 has no separate search budget). Deviation:
the model writes the other tags itself (``response_prefix`` is empty, Alg. 1 l. 3 and 18 pre-write
``<step><reasoning>``; with the tags generated, the tokens are the model's own, which token-in-token-out training
needs); a trajectory Alg. 1 would score fully is unchanged by it.

:func:`parse` is lenient (any text, never raises) and agrees with the checker on valid text: N steps with
the right kinds. For text without ``<step>`` tags a ``<reasoning>`` starts a step and ``<conclusion>`` ends it.
"""

from __future__ import annotations

import re
from typing import Any

from agentrag_verl.formats.base import (
    ActionSpec,
    Format,
    PromptTemplate,
    Trajectory,
    as_text,
    build_steps,
    scan_blocks,
    tag_pattern,
)

__all__ = [
    "check_format",
    "is_valid",
    "parse",
    "render",
    "validate_step",
    "SYSTEM_PROMPT",
    "PROMPT",
    "COMPACT_PROMPT",
    "REANSWER_PROMPT",
    "ACTION_SPEC",
    "FORMAT",
]

_FAIL = (0, -1)

_THINK_O, _THINK_C = "<think>", "</think>"
_ANSWER_O, _ANSWER_C = "<answer>", "</answer>"
_STEP_O, _STEP_C = "<step>", "</step>"
_REASON_O, _REASON_C = "<reasoning>", "</reasoning>"
_CONCL_O, _CONCL_C = "<conclusion>", "</conclusion>"
_SEARCH_O, _SEARCH_C = "<search>", "</search>"
_CTX_O, _CTX_C = "<context>", "</context>"

# Every tag Algorithms 2-3 look at. The checker splits the text once at these tags into alternating text and tag
# parts (``parts[0::2]`` the texts, ``parts[1::2]`` the tags); Count / Find / SpanBetween / Trim are then answered
# from the two lists. This equals the str-method reading because these tags cannot overlap (each has its only "<"
# in first position): one left-to-right split finds exactly the occurrences str.count / str.find see, and a
# stretch of text is whitespace iff it holds no tag and its text part is whitespace.
_SPLIT = re.compile(r"(</?(?:think|step|reasoning|search|context|conclusion|answer)>)")


def _validate_step(tags: list[str], texts: list[str]) -> bool:
    """Algorithm 3 on a step body given as its tags and the texts around them (``len(texts) == len(tags) + 1``,
    ``texts[i]`` precedes ``tags[i]``)."""
    # l. 3 (Strip) only matters to l. 6 and l. 10, which look at the first and last text parts.
    if tags.count(_REASON_O) != 1 or tags.count(_REASON_C) != 1:  # l. 4
        return False
    ro, rc = tags.index(_REASON_O), tags.index(_REASON_C)  # l. 5
    if rc < ro:  # SpanBetween finds no </reasoning> after <reasoning>
        return False
    if ro != 0 or texts[0].strip():  # l. 6: <reasoning> must be first
        return False
    if tags.count(_CONCL_O) != 1 or tags.count(_CONCL_C) != 1:  # l. 7
        return False
    co, cc = tags.index(_CONCL_O), tags.index(_CONCL_C)  # l. 8
    if cc < co or co < rc:  # l. 9: <conclusion> after </reasoning>
        return False
    if cc != len(tags) - 1 or texts[-1].strip():  # l. 10: the step ends at </conclusion>
        return False
    if _SEARCH_O in tags or _CTX_O in tags:  # l. 13: case A, step with search
        if tags.count(_SEARCH_O) != 1 or tags.count(_SEARCH_C) != 1:  # l. 14
            return False
        if tags.count(_CTX_O) != 1 or tags.count(_CTX_C) != 1:  # l. 15
            return False
        qo, qc = tags.index(_SEARCH_O), tags.index(_SEARCH_C)  # l. 16
        xo, xc = tags.index(_CTX_O), tags.index(_CTX_C)  # l. 17
        if qc < qo or xc < xo:
            return False
        if qo < rc or xo < qc or co < xc:  # l. 18: strict order
            return False
        # l. 19: nothing but whitespace between the blocks: adjacent tags with a blank text between them
        return (
            qo == rc + 1
            and xo == qc + 1
            and co == xc + 1
            and not (texts[qo].strip() or texts[xo].strip() or texts[co].strip())
        )
    return co == rc + 1 and not texts[co].strip()  # l. 24-26: case B (l. 24 cannot fire after l. 13)


def validate_step(body: str) -> bool:
    """Algorithm 3 (``ValidateStep``): whether a ``<step>`` body matches one of the two step schemas.

    Args:
        body: Text between ``<step>`` and ``</step>``.

    Returns:
        True iff the body is ``<reasoning>`` then (``<search>`` ``<context>``) then ``<conclusion>``, each tag
        exactly once, in order, with only whitespace between and around them.

    >>> validate_step("<reasoning>r</reasoning> <conclusion>c</conclusion>")
    True
    >>> validate_step("<reasoning>r</reasoning><search>q</search><conclusion>c</conclusion>")
    False
    """
    parts = _SPLIT.split(as_text(body))
    return _validate_step(parts[1::2], parts[0::2])


def check_format(response: Any) -> tuple[int, int]:
    """Algorithm 2, the format checker F(T).

    Args:
        response: The model's whole response (with the environment's ``<context>`` blocks).

    Returns:
        ``(1, N)`` with N the number of steps, or ``(0, -1)``.

    >>> check_format("<think><step><reasoning>r</reasoning><conclusion>c</conclusion></step></think><answer>a</answer>")
    (1, 1)
    >>> check_format("<think></think><answer>a</answer>")
    (0, -1)
    """
    y = as_text(response)
    if "\r" in y:  # l. 3: canonicalize newlines
        y = y.replace("\r\n", "\n").replace("\r", "\n")
    parts = _SPLIT.split(y)
    tags, texts = parts[1::2], parts[0::2]  # texts[i] precedes tags[i]; texts[-1] follows the last tag
    if tags.count(_THINK_O) != 1 or tags.count(_THINK_C) != 1:  # l. 4
        return _FAIL
    to, tc = tags.index(_THINK_O), tags.index(_THINK_C)  # l. 5
    if tc < to:
        return _FAIL
    if to != 0 or texts[0].strip():  # l. 6: no stray text before <think>
        return _FAIL
    # l. 7-8: t is tags[to + 1 : tc] with their texts, post is everything after tags[tc].
    a = tc + 1
    if a >= len(tags) or tags[a] != _ANSWER_O or texts[a].strip():  # l. 9: <answer> right after </think>
        return _FAIL
    post = tags[a:]
    if post.count(_ANSWER_O) != 1 or post.count(_ANSWER_C) != 1:  # l. 10
        return _FAIL
    ac = a + post.index(_ANSWER_C)  # l. 11: the answer spans texts[a + 1 : ac + 1] and the tags between
    if ac == a + 1 and not texts[ac].strip():  # l. 12: non-empty answer
        return _FAIL
    if ac != len(tags) - 1 or texts[-1].strip():  # l. 13: no trailing junk
        return _FAIL
    prev = to  # l. 16: p is just after tags[prev]
    n = 0
    while True:  # l. 17
        try:  # l. 18
            j = tags.index(_STEP_O, prev + 1, tc)
        except ValueError:  # l. 19
            if tc != prev + 1 or texts[tc].strip():  # l. 20: no stray text between steps
                return _FAIL
            break
        if j != prev + 1 or texts[j].strip():  # l. 23: no text before the next <step>
            return _FAIL
        try:  # l. 24
            k = tags.index(_STEP_C, j + 1, tc)
        except ValueError:  # l. 25
            return _FAIL
        if not _validate_step(tags[j + 1 : k], texts[j + 1 : k + 1]):  # l. 26-27
            return _FAIL
        prev = k  # l. 28
        n += 1
    if n < 1:  # l. 30
        return _FAIL
    return 1, n  # l. 31


def is_valid(response: Any) -> bool:
    """``F(T) == 1``."""
    return check_format(response)[0] == 1


_TAGS = ("think", "step", "reasoning", "search", "context", "conclusion", "answer")
_PATTERN = tag_pattern(_TAGS)
_OBSERVATION = frozenset({"context"})
_CONTAINERS = frozenset({"think", "step"})
_FIELDS = {"reasoning": "reasoning", "search": "query", "context": "observation", "conclusion": "conclusion"}


def parse(response: Any) -> Trajectory:
    """Parse a HiPRAG response into steps ``(r, q, c, o)`` / ``(r, o)`` and the answer. Never raises.

    >>> t = parse("<think><step><reasoning>r</reasoning><search>q</search><context>Doc 1</context>"
    ...           "<conclusion>o</conclusion></step></think><answer>a</answer>")
    >>> [s.kind for s in t.steps], t.queries, t.answer
    (['search'], ['q'], 'a')
    """
    text = as_text(response)
    blocks = scan_blocks(text, _PATTERN, _OBSERVATION, _CONTAINERS)
    return build_steps(
        text,
        blocks,
        _FIELDS,
        start_tags=frozenset({"reasoning"}),
        end_tags=frozenset({"conclusion"}),
        boundary_tags=frozenset({"step"}),
    )


def render(trajectory: Trajectory) -> str:
    """Canonical HiPRAG text for a trajectory (one tag per line, as Figure 3 (b))."""
    lines = ["<think>"]
    for step in trajectory.steps:
        lines.append("<step>")
        if step.reasoning is not None:
            lines.append(f"<reasoning>{step.reasoning}</reasoning>")
        if step.query is not None:
            lines.append(f"<search>{step.query}</search>")
        if step.observation is not None:
            lines.append(f"<context>{step.observation}</context>")
        if step.conclusion is not None:
            lines.append(f"<conclusion>{step.conclusion}</conclusion>")
        lines.append("</step>")
    lines.append("</think>")
    if trajectory.answer is not None:
        lines.append(f"<answer>{trajectory.answer}</answer>")
    return "\n".join(lines)


# Figure 4 (Appendix D), "System Prompt for Parsable Output Format". Line breaks follow the figure's layout
# (lost in the text extraction); the typographic apostrophe of "user's" is written in ASCII.
SYSTEM_PROMPT = """\
Answer user questions by thinking step-by-step. Your entire reasoning process must be encapsulated within a \
single <think></think> block, which contains one or more <step></step> blocks. Each step must begin with your \
analysis in <reasoning>. If you identify a knowledge gap, you may use <search>query</search> to query a search \
engine; search results will then be provided in a <context> tag. Every step must end with a <conclusion> \
summarizing what you learned in that step. After your thinking process is complete, provide the final, \
conclusive answer inside an <answer> tag placed immediately after the closing </think> tag. You can use as many \
steps as you need. Ensure all XML tags are properly formed and nested.

**## Output Format Specification**

Your output must follow this overall structure. The <think> block contains all the steps, and the <answer> \
block follows it.

<think>
<step>
...
</step>
<step>
...
</step>
</think>
<answer>Your final, conclusive answer to the user's question.</answer>

**## Step Formats (to be used inside <think>)**

Format 1: Step with a Search
<step>
<reasoning>Your detailed analysis...</reasoning>
<search>The precise search query...</search>
<context>[Provided by system]</context>
<conclusion>Your conclusion for this step.</conclusion>
</step>

Format 2: Step without a Search (Internal Reasoning)
<step>
<reasoning>Your detailed analysis...</reasoning>
<conclusion>Your conclusion for this step.</conclusion>
</step>"""

PROMPT = PromptTemplate(
    name="hiprag",
    source="HiPRAG Figure 4 (system prompt); user turn 'Question: ...' as laid out in Figure 3",
    system=SYSTEM_PROMPT,
    user="Question: {question}",
)

COMPACT_PROMPT = PromptTemplate(
    name="hiprag_compact",
    source=(
        "ours, not the paper's: Figure 4's output format stated in three sentences, for small models whose format "
        "comes from a warm start (a fifth of Figure 4's tokens, which dominate a CPU training step)"
    ),
    system=(
        "Answer the question. Think in steps inside <think></think>: each step is <step><reasoning>...</reasoning>, "
        "then <search>query</search> only if you lack the knowledge (results arrive in <context></context>), then "
        "<conclusion>...</conclusion></step>. After </think>, give the final answer in <answer></answer>."
    ),
    user="Question: {question}",
)

REANSWER_PROMPT = PromptTemplate(
    name="reanswer",
    source=(
        "HiPRAG §3.2 over-search detection: the policy re-answers a search step's query asked standalone (the "
        "authors' wording); its answer o' goes to the Figure 5 judge (agentrag_verl.methods.hiprag.judge)"
    ),
    user="Please answer the following question or provide relevant information to the statement: {query}",
)
"""The policy prompt for the over-search re-answer ``o'`` of a query ``q`` (slot ``query``); the agent loop sends
it (wrapped in the policy's chat template) when ``reanswers`` is on. Not a judge prompt."""

ACTION_SPEC = ActionSpec(
    stop=("</search>", "</answer>"),
    search_tags=("<search>", "</search>"),
    observation_template="<context>{docs}</context>\n<conclusion>",
    # Alg. 1 l. 15 and 22-24: after the B-th </conclusion> the environment closes the step and the think block and
    # opens the answer
    force_answer_prefix="</step>\n</think>\n<answer>",
    # Alg. 1 counts steps (i += 1 at each </conclusion>); the paper gives no value for B, 4 is the authors' scripts'
    budget=4,
    budget_unit="steps",
    step_close="</conclusion>",
    after_budget="force",
)

FORMAT = Format(
    name="hiprag",
    paper="HiPRAG (Wu et al.): Section 3.1, Algorithms 1-3, Figure 4",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={"hiprag": PROMPT, "hiprag_compact": COMPACT_PROMPT, "reanswer": REANSWER_PROMPT},
)
