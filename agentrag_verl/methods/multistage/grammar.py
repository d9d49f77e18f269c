"""The think/search/information/reflect/answer format of "Learning When to Search: Multi-Stage Reward Design for
Efficient Agentic RAG with Reasoning Language Models" (decisions: ``docs/methods/multistage.md#decisions``).

Implements the two output structures of the format reward r_f (§3.3, Eq. 6), the rollout of §3.2 ("Rollout with
Search") and the prompt "Instruction for Trained RLM" (Appendix B.4).

Structures (:func:`check_format`, r_f = +1 iff it holds): without retrieval ``<think> <reflect> <answer>``;
with retrieval ``<think> (<search> <information> <reflect>)+ <answer>``. Only whitespace may lie between blocks
and around the response; a model block may not contain a tag of the format (``<information>`` content is
environment text and may contain anything). Empty contents are allowed (the paper states no rule). The
response must include the opening ``<think>``: if a chat template opens the think block in the prompt (Qwen3
thinking mode), prepend ``"<think>"`` before checking.

Rollout (§3.2): stop at ``</search>`` (and ``</answer>``, after which nothing is valid), append
``\\n\\n<information>{docs}</information>\\n\\n`` (Search-R1 layout, top-5 passages in the paper); budget
``max_turns = 5`` (Table 5) search turns, then Search-R1's final turn: a search opened there is not run, it is cut
from the response and ``<answer>`` is appended (the structure then holds only if the model reflected before it).

:func:`parse`: ``<think>`` starts a step, ``<reflect>`` ends it; a search round is one ``search`` step whose
``reasoning`` is the think only for the first round; the no-retrieval structure is one ``non_search`` step
``(reasoning, reflect)``.
"""

from __future__ import annotations

from typing import Any

from agentrag_verl.formats.base import ActionSpec, Format, PromptTemplate, TagGrammar, Trajectory

__all__ = ["check_format", "is_valid", "parse", "render", "PROMPT", "ACTION_SPEC", "FORMAT"]

_TAGS = TagGrammar(
    {"think": "T", "search": "S", "information": "I", "reflect": "R", "answer": "A"},
    structure=r"TRA|T(?:SIR)+A",
    layout=(
        ("reasoning", "<think>", "</think>\n"),
        ("query", "<search>", "</search>"),
        ("observation", "\n\n<information>", "</information>\n\n"),
        ("reflect", "<reflect>", "</reflect>\n"),
    ),
    observation_tags=("information",),
    start_tags=("think",),
    end_tags=("reflect",),
)


def check_format(response: Any) -> bool:
    """Whether the response fully matches one of the two structures (r_f = 1.0, else -1.0).

    >>> check_format("<think>t</think>\\n<reflect>r</reflect>\\n<answer>a</answer>")
    True
    >>> check_format("<think>t</think><search>q</search><information>d</information><answer>a</answer>")
    False
    """
    return _TAGS.matches(response)


is_valid = check_format


def parse(response: Any) -> Trajectory:
    """Parse a multi-stage response. Never raises.

    >>> t = parse("<think>t</think><search>q</search><information>d</information><reflect>r</reflect>"
    ...           "<answer>a</answer>")
    >>> [(s.kind, s.reasoning, s.query, s.reflect) for s in t.steps], t.answer
    ([('search', 't', 'q', 'r')], 'a')
    """
    return _TAGS.parse(response)


def render(trajectory: Trajectory) -> str:
    """Canonical multi-stage text."""
    return _TAGS.render(trajectory)


# Appendix B.4, "Instruction for Trained RLM". The extraction wrapped tags in Markdown backticks and joined the
# sub-bullets onto their item's line; both are undone here. The paper does not show where the question goes: we
# append "Question: {question}" after the instruction (reconstruction).
PROMPT = PromptTemplate(
    name="multistage",
    source="Learning When to Search, Appendix B.4 'Instruction for Trained RLM' (question placement reconstructed)",
    user="""\
Please answer the given question by following the structured reasoning protocol below:

1. Always begin with <think>...</think> to provide a brief internal reasoning sketch.
   - This reasoning must primarily rely on your internal knowledge and reasoning abilities.
   - If your internal knowledge is sufficient to answer the question, do not assume the need for external tools.
2. If your internal knowledge is sufficient to answer the question:
   - Provide a concise summary of your reasoning inside <reflect>...</reflect>.
   - Then give the final answer inside <answer>...</answer>.
   - Under no circumstances should you generate a <search> block if your internal knowledge is adequate.
3. Only if your internal knowledge is genuinely insufficient to answer the question:
   - Generate a brief keyword-based search query inside <search>...</search>. The query should be as concise as \
possible but must include sufficient factual clues, such as names, dates, locations, key concepts, etc.
   - The query should be a brief description with multiple keywords instead of a natural language question.
4. When the system returns information inside <information>...</information>:
   - If the information is reliable and sufficient, integrate it with your reasoning inside <reflect>...</reflect>.
   - Then provide the final concise answer inside <answer>...</answer>.
5. If the retrieved information is insufficient or contradicts your internal knowledge:
   - Explain the issue within <reflect>...</reflect>.
   - If necessary, generate a revised <search> query.
6. Final rule:
   - The final answer must be concise and clear, placed inside <answer></answer>.
   - Internal reasoning (in <think>) must always be the primary method; tool usage should be a last resort, not \
the default.

Question: {question}""",
)

ACTION_SPEC = ActionSpec(
    stop=("</search>", "</answer>"),
    search_tags=("<search>", "</search>"),
    observation_template="\n\n<information>{docs}</information>\n\n",
    force_answer_prefix="<answer>",
    budget=5,  # Table 5: max_turns = 5
    after_budget="final_turn",  # its rollout is Search-R1's (a final turn without search)
)

FORMAT = Format(
    name="multistage",
    paper="Learning When to Search (multi-stage reward): §3.2-3.3 (Eq. 6), Appendix B.4",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={"multistage": PROMPT},
)
