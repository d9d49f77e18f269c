"""ReasonRAG's staged workflow (Process vs. Outcome Reward: Which is Better for Agentic RAG Reinforcement
Learning, Zhang et al.; decisions: ``docs/methods/reasonrag.md#decisions``).

Implements the inference workflow of **Algorithm 1** (§2.4: stages Reasoning / Grounding / Terminal) and the
prompts of **Figures 12-13** (Appendix F; Figure 14, the process-evaluation judge, is in
:mod:`agentrag_verl.methods.reasonrag.judge`).

A ReasonRAG trajectory is a sequence of stage outputs, each generated with its own system prompt:

- Reasoning: free prose ending in ``So the next query is <query>q</query>`` or ``So the answer is
  <answer>a</answer>`` (Figure 12 "Conclusion");
- Grounding (after retrieval): ``Based on the query, the relevant evidence is <evidence>e</evidence>`` or
  ``<evidence>None</evidence>`` (Figure 13).

The transcript is the stage outputs joined by single spaces (the authors' code joins "previous thoughts" so;
Figure 10 shows one). Retrieved documents appear only in the grounding prompt, never in the transcript, so
``Step.observation`` is always ``None``.

:func:`check_format` (structure check): the transcript is ``(R_q G)* R_a``: each ``R_q`` is tag-free prose then
``So the next query is <query>q</query>``; each ``G`` is tag-free prose then ``<evidence>e</evidence>``; ``R_a``
is tag-free prose then ``So the answer is <answer>a</answer>``; q, e and a are non-blank; only whitespace
after the final ``</answer>``. The phrases are required because they are how the workflow recognizes a stage
(the authors' code detects stages by them); the number of rounds N is not checked.

:func:`parse`: one ``search`` step per query round (``reasoning`` = the prose before "So the next query is",
``None`` when empty; ``evidence``), and a final ``non_search`` step only when prose precedes "So the answer
is". :func:`next_stage` is Algorithm 1's transition (l. 9-18).

Rollout: stop strings ``</query>``, ``</answer>``, ``</evidence>`` (authors' code). ``render_observation``
gives the grounding prompt's ``{reference}`` slot as Search-R1's ``Doc i(Title: ...)`` lines (deviation: the
authors' code writes ``Wikipedia Title: <title>\\n<text>``). Budget: Algorithm 1's N = 7 stage outputs (authors'
MCTS ``max_iter``) leaves room for 3 searches; a Reasoning stage past it that queries is dropped (the query is not
run) and the stage is generated again with ``So the answer is <answer>`` pre-filled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from agentrag_verl.formats.base import (
    ActionSpec,
    Format,
    PromptTemplate,
    Step,
    Trajectory,
    as_text,
    scan_blocks,
    strip_span,
    tag_pattern,
)

__all__ = [
    "check_format",
    "is_valid",
    "parse",
    "render",
    "next_stage",
    "transcript",
    "reasoning_messages",
    "grounding_messages",
    "PROMPT",
    "REASONING_PROMPT",
    "GROUNDING_PROMPT",
    "ACTION_SPEC",
    "FORMAT",
]

QUERY_PHRASE = "So the next query is"
ANSWER_PHRASE = "So the answer is"
EVIDENCE_PHRASE = "Based on the query, the relevant evidence is"
NO_EVIDENCE = "None"

_TAGS = ("query", "evidence", "answer")
_PATTERN = tag_pattern(_TAGS)
_FREE = r"[^<]*(?:<(?!/?(?:query|evidence|answer)>)[^<]*)*"  # text holding none of the format's tags
_R_QUERY = re.compile(rf"\s*({_FREE}){QUERY_PHRASE}\s*<query>({_FREE})</query>")
_GROUND = re.compile(rf"\s*({_FREE})<evidence>({_FREE})</evidence>")
_R_ANSWER = re.compile(rf"\s*({_FREE}){ANSWER_PHRASE}\s*<answer>({_FREE})</answer>\s*\Z")
_TRAILING_QUERY_PHRASE = re.compile(rf"{QUERY_PHRASE}[:\s]*\Z")
_TRAILING_ANSWER_PHRASE = re.compile(rf"{ANSWER_PHRASE}[:\s]*\Z")


def check_format(response: Any) -> bool:
    """Structure check of a ReasonRAG transcript: ``(R_q G)* R_a`` with the stage phrases.

    >>> check_format("So the next query is <query>q</query> <evidence>None</evidence> So the answer is "
    ...              "<answer>a</answer>")
    True
    >>> check_format("<query>q</query> <evidence>e</evidence> So the answer is <answer>a</answer>")
    False
    """
    text = as_text(response)
    pos = 0
    while True:
        m = _R_ANSWER.match(text, pos)
        if m is not None:
            return bool(m.group(2).strip())
        m = _R_QUERY.match(text, pos)
        if m is None or not m.group(2).strip():
            return False
        g = _GROUND.match(text, m.end())
        if g is None or not g.group(2).strip():
            return False
        pos = g.end()


is_valid = check_format


def _prose(text: str, start: int, end: int, phrase: re.Pattern[str]) -> tuple[str | None, tuple[int, int]]:
    raw = text[start:end]
    m = phrase.search(raw)
    if m is not None:
        end = start + m.start()
    value, span = strip_span(text, start, end)
    return (value or None), span


def parse(response: Any) -> Trajectory:
    """Parse a ReasonRAG transcript into query/evidence rounds and the answer. Never raises.

    >>> t = parse("So the next query is <query>q</query> Based on the query, the relevant evidence is "
    ...           "<evidence>e</evidence> So the answer is <answer>a</answer>")
    >>> [(s.kind, s.query, s.evidence) for s in t.steps], t.answer
    ([('search', 'q', 'e')], 'a')
    """
    text = as_text(response)
    steps: list[Step] = []
    current: dict[str, Any] | None = None
    answer: str | None = None
    answer_span: tuple[int, int] | None = None
    prev_end = 0

    def flush() -> None:
        nonlocal current
        if current is not None:
            values = {k: v for k, v in current["values"].items() if v is not None}
            spans = {k: current["spans"][k] for k in values}
            kind = "search" if "query" in values else "non_search"
            steps.append(Step(kind=kind, span=(current["start"], current["end"]), spans=spans, **values))
        current = None

    for b in scan_blocks(text, _PATTERN, frozenset()):
        prose_start = min(prev_end, b.start)
        if b.tag == "query":
            flush()
            reasoning, span = _prose(text, prose_start, b.start, _TRAILING_QUERY_PHRASE)
            query, qspan = strip_span(text, b.content_start, b.content_end)
            start = span[0] if reasoning is not None else b.start
            current = {
                "start": start,
                "end": b.end,
                "values": {"reasoning": reasoning, "query": query},
                "spans": {"reasoning": span, "query": qspan},
            }
        elif b.tag == "evidence":
            if current is None or "evidence" in current["values"]:
                flush()
                current = {"start": b.start, "end": b.end, "values": {}, "spans": {}}
            evidence, espan = strip_span(text, b.content_start, b.content_end)
            current["values"]["evidence"] = evidence
            current["spans"]["evidence"] = espan
            current["end"] = b.end
            flush()
        else:  # answer
            flush()
            reasoning, span = _prose(text, prose_start, b.start, _TRAILING_ANSWER_PHRASE)
            if reasoning is not None:
                steps.append(
                    Step(kind="non_search", span=(span[0], b.end), reasoning=reasoning, spans={"reasoning": span})
                )
            answer, answer_span = strip_span(text, b.content_start, b.content_end)
        prev_end = max(prev_end, b.end)
    flush()
    return Trajectory(steps=tuple(steps), answer=answer, answer_span=answer_span)


def render(trajectory: Trajectory) -> str:
    """Canonical transcript: the stage outputs joined by spaces, as Figure 10."""
    parts = []
    for step in trajectory.steps:
        if step.query is not None:
            lead = f"{step.reasoning} " if step.reasoning else ""
            parts.append(f"{lead}{QUERY_PHRASE} <query>{step.query}</query>")
        if step.evidence is not None:
            if step.evidence == NO_EVIDENCE:
                parts.append(f"<evidence>{NO_EVIDENCE}</evidence>")
            else:
                parts.append(f"{EVIDENCE_PHRASE} <evidence>{step.evidence}</evidence>")
        if step.query is None and step.evidence is None and step.reasoning is not None:
            parts.append(step.reasoning)
    if trajectory.answer is not None:
        parts.append(f"{ANSWER_PHRASE} <answer>{trajectory.answer}</answer>")
    return " ".join(parts)


def next_stage(output: str) -> Literal["grounding", "terminal", "reasoning"] | None:
    """Algorithm 1, l. 9-18: the stage after a stage output (``None``: no tag detected, the loop goes on).

    >>> next_stage("So the next query is <query>q</query>"), next_stage("<evidence>None</evidence>")
    ('grounding', 'reasoning')
    """
    output = as_text(output)
    if "<query>" in output:
        return "grounding"
    if "<answer>" in output:
        return "terminal"
    if "<evidence>" in output:
        return "reasoning"
    return None


def transcript(thoughts: Iterable[str]) -> str:
    """Join stage outputs into the transcript that :func:`parse` reads (single spaces, authors' code)."""
    return " ".join(thoughts)


# Figure 12 (Appendix F). The extraction lost the bullet layout; "{answer_format}" is filled with "answer", the
# authors' default. Same text as the authors' code apart from whitespace.
REASONING_SYSTEM = """\
You are a question-answering assistant with access to a retrieval tool. Your goal is to provide a concise and \
accurate reasoning process.
Instructions:
* Error Reflection: If errors exist in previous thoughts, identify and correct them. Skip this step if no errors \
are present.
* Information Sufficiency: Evaluate whether the current information is sufficient to fully and accurately answer \
the question. If additional retrieval is needed, deconstruct the question and generate the next query. Avoid \
repeating previous queries. If no meaningful new query can be generated, explain why and provide an answer based \
on the current information.
* Conciseness: Ensure both queries and answers are concise, using nouns or short phrases whenever possible.
* Conclusion:
If generating an answer: "So the answer is <answer>answer</answer>". If more retrieval is needed: "So the next \
query is <query>query</query>"."""

# Figure 13 (Appendix F).
GROUNDING_SYSTEM = """\
You are an information retrieval assistant. Your task is to extract relevant evidence from the provided \
Wikipedia documents based on the latest query.
Instructions:
* Identify key terms or concepts in the query.
* Search the documents for evidence that supports the query.
* Response format: If relevant evidence is found, output: Based on the query, the relevant evidence is \
<evidence>evidence</evidence>. If no relevant evidence is found, output: <evidence>None</evidence>."""

# The paper gives only the system prompts; the user turns follow the authors' code.
PROMPT = PromptTemplate(
    name="reasonrag",
    source="ReasonRAG Figure 12 (system), first Reasoning stage; user turn from the authors' code",
    system=REASONING_SYSTEM,
    user="Question: {question}",
)
REASONING_PROMPT = PromptTemplate(
    name="reasonrag_reasoning",
    source="ReasonRAG Figure 12 (system), later Reasoning stages; user turn from the authors' code",
    system=REASONING_SYSTEM,
    user="Question: {question}\nPrevious Thoughts: {previous_thoughts}",
)
GROUNDING_PROMPT = PromptTemplate(
    name="reasonrag_grounding",
    source="ReasonRAG Figure 13 (system), Grounding stage; user turn from the authors' code",
    system=GROUNDING_SYSTEM,
    user="Question: {question}\nPrevious Thoughts: {previous_thoughts}. Reference: <reference>{reference}</reference>",
)

ACTION_SPEC = ActionSpec(
    stop=("</query>", "</answer>", "</evidence>"),
    search_tags=("<query>", "</query>"),
    observation_template="{docs}",
    force_answer_prefix=f"{ANSWER_PHRASE} <answer>",
    budget=3,  # N = 7 stage outputs (authors' max_iter): R, (G, R) x 3
    after_budget="final_turn",
)


def reasoning_messages(question: str, thoughts: Sequence[str] = ()) -> list[dict[str, str]]:
    """Chat messages for a Reasoning stage (Figure 12) given the previous stage outputs."""
    if not thoughts:
        return PROMPT.messages(question)
    return REASONING_PROMPT.messages(question, previous_thoughts=transcript(thoughts))


def grounding_messages(question: str, thoughts: Sequence[str], docs: Iterable[Any]) -> list[dict[str, str]]:
    """Chat messages for a Grounding stage (Figure 13) over the retrieved ``docs``."""
    return GROUNDING_PROMPT.messages(
        question, previous_thoughts=transcript(thoughts), reference=ACTION_SPEC.render_observation(docs)
    )


FORMAT = Format(
    name="reasonrag",
    paper="ReasonRAG (Zhang et al.): §2.4 Algorithm 1, Figures 10-13",
    parse=parse,
    check_format=check_format,
    is_valid=is_valid,
    render=render,
    action_spec=ACTION_SPEC,
    prompt=PROMPT,
    prompts={"reasonrag": PROMPT, "reasonrag_reasoning": REASONING_PROMPT, "reasonrag_grounding": GROUNDING_PROMPT},
)
