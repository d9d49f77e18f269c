"""Shared pieces of the trajectory grammars: data model, action spec, prompt templates and a tag lexer.

Every format module (:mod:`~agentrag_verl.methods.hiprag.grammar`, :mod:`~agentrag_verl.methods.searchr1.grammar`, ...)
builds
on these:

- :class:`Trajectory` / :class:`Step`: what ``parse`` returns. Field values are the *stripped* contents of the
  format's tags; ``Step.spans[field]`` is the ``(start, end)`` character span of that value in the response,
  so ``response[start:end] == value`` (one documented exception: Search-P1 queries written as tool-call JSON).
  The final answer is never a step; it lives in ``Trajectory.answer`` (the last answer block of model text).
- :class:`ActionSpec`: what the rollout needs: stop strings, action extraction, observation rendering
  (``Doc i(Title: ...) text`` lines, as Search-R1 renders passages), forced-answer prefix, the budget B and what it
  counts.
- :class:`PromptTemplate`: a paper's prompt with ``{question}`` (and other) slots.
- :class:`Format`: the bundle registered under a name in :func:`agentrag_verl.formats.get_format`.
- :class:`TagGrammar`: the parse, structure check and render of a tag format declared as a table (its tags and
  their letters, the structure rule over the letters, the step layout), for the grammars made of tag blocks only.

Lexing rules shared by every lenient ``parse`` (:func:`scan_blocks`):

- Observation blocks (``<information>``, ``<context>``, ``<tool_response>``) are environment text and opaque:
  tags inside them are ignored, so retrieved documents never produce queries or answers. An unclosed
  observation runs to the end of the text.
- A model block ``<x>...</x>`` closes at the first ``</x>`` after it (the leftmost, non-greedy pairing of
  ``re.finditer(r"<x>(.*?)</x>")``), so the answer is exactly :func:`agentrag_verl.metrics.extract_answer`'s
  whenever the text has no observation. A model block may not span an observation (it was never closed
  before the environment spoke), except for container tags (HiPRAG's ``<think>`` and ``<step>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

__all__ = [
    "Span",
    "StepKind",
    "Step",
    "Trajectory",
    "Action",
    "ActionSpec",
    "PromptTemplate",
    "Format",
    "Block",
    "format_docs",
    "as_text",
    "scan_blocks",
    "StrictLexer",
    "build_steps",
    "render_steps",
    "strip_span",
    "tag_pattern",
    "TagGrammar",
]

Span = tuple[int, int]
"""``(start, end)`` character offsets into the response string."""

StepKind = Literal["search", "non_search"]


@dataclass(frozen=True, slots=True)
class Step:
    """One reasoning step of a trajectory.

    Attributes:
        kind: ``"search"`` when the step issued a query, else ``"non_search"``.
        span: Character span of the whole step in the response.
        reasoning: The step's reasoning text (``<think>`` / ``<reasoning>`` / ReasonRAG prose), stripped.
        query: The search query, stripped (the text the environment sends to the retriever).
        observation: The environment's retrieved text for this step (``<information>`` / ``<context>`` /
            ``<tool_response>`` content), stripped; ``None`` when no observation followed the query.
        conclusion: HiPRAG's ``<conclusion>``.
        reflect: The multi-stage format's ``<reflect>``.
        evidence: ReasonRAG's ``<evidence>`` (the literal ``"None"`` when the model found none).
        spans: Content span per non-``None`` field name, e.g. ``spans["query"]``.
    """

    kind: StepKind
    span: Span
    reasoning: str | None = None
    query: str | None = None
    observation: str | None = None
    conclusion: str | None = None
    reflect: str | None = None
    evidence: str | None = None
    spans: Mapping[str, Span] = field(default_factory=dict)

    @property
    def is_search(self) -> bool:
        """Whether the step issued a search."""
        return self.kind == "search"


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A parsed response.

    Attributes:
        steps: The steps in order (the final answer is not a step).
        answer: Stripped content of the last ``<answer>...</answer>`` in model text, ``None`` if there is none.
        answer_span: Span of ``answer`` in the response.
    """

    steps: tuple[Step, ...] = ()
    answer: str | None = None
    answer_span: Span | None = None

    @property
    def queries(self) -> list[str]:
        """The queries of the search steps, in order."""
        return [s.query for s in self.steps if s.query is not None]

    @property
    def num_searches(self) -> int:
        """Number of search steps (RC, the retrieval count)."""
        return sum(1 for s in self.steps if s.query is not None)


@dataclass(frozen=True, slots=True)
class Action:
    """An action the environment must execute.

    Attributes:
        kind: ``"search"`` (run the retriever on ``content``) or ``"answer"`` (the episode ends).
        content: The stripped query or answer text.
        span: Span of ``content`` in the text given to :meth:`ActionSpec.extract_action`.
    """

    kind: Literal["search", "answer"]
    content: str
    span: Span


def as_text(response: Any) -> str:
    """Coerce a response to ``str`` so that parsers never raise: ``None`` -> ``""``, bytes are UTF-8 decoded.

    >>> as_text(None), as_text(b"<answer>x</answer>")
    ('', '<answer>x</answer>')
    """
    if isinstance(response, str):
        return response
    if response is None:
        return ""
    if isinstance(response, (bytes, bytearray)):
        return bytes(response).decode("utf-8", errors="replace")
    return str(response)


def _doc_contents(hit: Any) -> str:
    doc = hit.get("document", hit) if isinstance(hit, Mapping) else hit
    if isinstance(doc, str):
        return doc
    if isinstance(doc, Mapping):
        contents = doc.get("contents")
        if contents is not None:
            return str(contents)
        return f"{doc.get('title', '')}\n{doc.get('text', '')}"
    return str(doc)


def format_docs(docs: Iterable[Any]) -> str:
    """Render retriever hits as Search-R1's lines ``Doc i(Title: <title>) <text>``, one per hit.

    Args:
        docs: Hits as the retriever returns them: ``{"id", "contents": "\\"Title\\"\\ntext", ...}`` documents,
            ``{"document": {...}, "score": float}`` wrappers, FlashRAG ``{"title", "text"}`` dicts, or strings.
            The title is the first line of ``contents`` (wiki-18 keeps its quotes), the text the rest.

    Returns:
        The lines joined by ``"\\n"`` (no trailing newline), as Search-R1 renders them.

    >>> format_docs([{"id": "1", "contents": '"Paris"\\nParis is the capital of France.'}])
    'Doc 1(Title: "Paris") Paris is the capital of France.'
    """
    lines = []
    for i, hit in enumerate(docs, start=1):
        title, _, text = _doc_contents(hit).partition("\n")
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


@dataclass(frozen=True)
class ActionSpec:
    """How the rollout drives one format (``docs/decisions.md#rollout-and-budgets``).

    Attributes:
        stop: Stop strings for generation; the text given to :meth:`extract_action` must include them
            (vLLM ``include_stop_str_in_output=True``).
        search_tags: Opening and closing tags around a query.
        observation_template: What the environment appends after a search action; ``{docs}`` is replaced by
            :func:`format_docs` of the hits. Everything it appends gets ``response_mask = 0``.
        force_answer_prefix: Text appended when the budget is used up, after which the policy generates up to the
            answer's closing tag (HiPRAG Alg. 1 l. 15 and 22-24, Search-P1 Alg. 2 l. 15-16).
        budget: Default budget B (the paper's value; the agent loop's ``budget`` option overrides it).
        answer_tags: Opening and closing tags around the final answer.
        response_prefix: Text the environment writes at the start of the response before the first generation
            (masked); empty when the model writes its own opening tag.
        query_from_content: Maps the raw text between the search tags to the query sent to the retriever
            (default: strip).
        budget_unit: What B counts: ``"searches"`` (search actions the environment answered, empty queries
            included) or ``"steps"`` (closed steps: HiPRAG Alg. 1 counts ``</conclusion>`` boundaries).
        step_close: With ``budget_unit="steps"``: the tag that closes a step; generation also stops there.
        after_budget: What happens once B is used up. ``"force"``: the forced-answer prefix is appended at once,
            right after the B-th observation or step (Search-P1 Alg. 2, HiPRAG Alg. 1). ``"final_turn"``: the model
            gets one more turn in which a search is not run (Search-R1's final rollout); a search it opens there is
            cut from the response before its opening tag and the answer is forced, so no unexecuted search stays.
    """

    stop: tuple[str, ...]
    search_tags: tuple[str, str]
    observation_template: str
    force_answer_prefix: str
    budget: int
    answer_tags: tuple[str, str] = ("<answer>", "</answer>")
    response_prefix: str = ""
    query_from_content: Callable[[str], str] | None = None
    budget_unit: Literal["searches", "steps"] = "searches"
    step_close: str | None = None
    after_budget: Literal["force", "final_turn"] = "force"

    def __post_init__(self) -> None:
        if self.budget_unit not in ("searches", "steps"):
            raise ValueError(f"Unknown budget_unit {self.budget_unit!r}; choose one of ['searches', 'steps']")
        if self.after_budget not in ("force", "final_turn"):
            raise ValueError(f"Unknown after_budget {self.after_budget!r}; choose one of ['force', 'final_turn']")
        if self.budget_unit == "steps" and not self.step_close:
            raise ValueError("ActionSpec(budget_unit='steps') needs step_close, the tag that closes a step")

    @property
    def turn_stop(self) -> tuple[str, ...]:
        """Stop strings of a regular generation: :attr:`stop`, plus :attr:`step_close` when B counts steps."""
        if self.budget_unit == "steps" and self.step_close and self.step_close not in self.stop:
            return (*self.stop, self.step_close)
        return self.stop

    @property
    def final_turn_stop(self) -> tuple[str, ...]:
        """Stop strings of the final turn (``after_budget="final_turn"``): the search's opening tag (the search is
        not run, so generating its query is wasted) and the answer's closing tag."""
        return (self.search_tags[0], self.answer_tags[1])

    def extract_action(self, text: str) -> Action | None:
        """Find the action at the end of a generation.

        A search is the content between the **last** opening search tag and a closing search tag that ends
        the text (HiPRAG Alg. 1 ``LastBetween``); an answer ends the text the same way, or is otherwise the
        last complete answer block anywhere in ``text`` (the model may add a period after ``</answer>``).
        ``None`` means no action: the episode ends.

        Args:
            text: The newly generated text, including the stop string.

        Returns:
            The :class:`Action`, or ``None``.
        """
        text = as_text(text)
        stripped = text.rstrip()
        for kind, (open_tag, close_tag) in (("search", self.search_tags), ("answer", self.answer_tags)):
            if stripped.endswith(close_tag):
                end = len(stripped) - len(close_tag)
                start = stripped.rfind(open_tag, 0, end)
                if start < 0:
                    continue
                cs = start + len(open_tag)
                raw = stripped[cs:end]
                if kind == "search" and self.query_from_content is not None:
                    return Action("search", self.query_from_content(raw), strip_span(stripped, cs, end)[1])
                value, span = strip_span(stripped, cs, end)
                return Action(kind, value, span)
        open_tag, close_tag = self.answer_tags
        end = text.rfind(close_tag)
        if end >= 0:
            # Leftmost non-greedy pairing, as extract_answer: the last pair is found by scanning forward.
            last = None
            pos = 0
            while True:
                start = text.find(open_tag, pos)
                if start < 0:
                    break
                close = text.find(close_tag, start + len(open_tag))
                if close < 0:
                    break
                last = (start + len(open_tag), close)
                pos = close + len(close_tag)
            if last is not None:
                value, span = strip_span(text, *last)
                return Action("answer", value, span)
        return None

    def render_observation(self, docs: Iterable[Any]) -> str:
        """The text the environment appends after a search action, with ``docs`` rendered by
        :func:`format_docs`."""
        return self.observation_template.replace("{docs}", format_docs(docs))


_SLOT = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class PromptTemplate:
    """A paper's prompt with named slots such as ``{question}``.

    Attributes:
        name: Short identifier, e.g. ``"hiprag"`` or ``"intermediate_answer"``.
        source: Where the text comes from, e.g. ``"HiPRAG Figure 4"``; reconstruction notes included.
        user: The user-turn text with slots.
        system: The system-turn text (no slots), or ``None`` when the paper puts everything in the user turn.
    """

    name: str
    source: str
    user: str
    system: str | None = None

    @property
    def slots(self) -> tuple[str, ...]:
        """Slot names of the user text, in order of first appearance."""
        return tuple(dict.fromkeys(_SLOT.findall(self.user)))

    def format(self, question: str, **slots: str) -> str:
        """Fill the user text. Slot values are inserted verbatim (braces in them are safe).

        >>> PromptTemplate("t", "test", "Question: {question}").format("Who?")
        'Question: Who?'
        """
        values = {"question": question, **slots}
        missing = [s for s in self.slots if s not in values]
        if missing:
            raise ValueError(
                f"Prompt {self.name!r} ({self.source}) needs slots {list(self.slots)}; missing {missing}. "
                f"Pass them as keyword arguments, e.g. .format(question, {missing[0]}=...)."
            )
        return _SLOT.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), self.user)

    def messages(self, question: str, **slots: str) -> list[dict[str, str]]:
        """Chat messages: the system turn (if any) and the filled user turn."""
        out = [] if self.system is None else [{"role": "system", "content": self.system}]
        out.append({"role": "user", "content": self.format(question, **slots)})
        return out


@dataclass(frozen=True)
class Format:
    """A trajectory grammar registered by name (see :func:`agentrag_verl.formats.get_format`).

    Attributes:
        name: Registry name.
        paper: The paper (and figures/algorithms) the grammar comes from.
        parse: ``parse(response) -> Trajectory``; lenient, never raises.
        check_format: The paper's structure rule; its return type is the paper's (HiPRAG: ``(F, N)``;
            Search-P1: :class:`~agentrag_verl.methods.searchp1.grammar.FormatLevel`; others: ``bool``).
        is_valid: ``is_valid(response) -> bool``, the uniform view used for format-compliance rates.
        render: ``render(trajectory) -> str``, canonical text that ``parse`` maps back to the same content.
        action_spec: Rollout description.
        prompt: The policy prompt used by data prep and agent loops.
        prompts: Every prompt of the paper this format owns, by name (includes ``prompt``).
    """

    name: str
    paper: str
    parse: Callable[[str], Trajectory]
    check_format: Callable[[str], Any]
    is_valid: Callable[[str], bool]
    render: Callable[[Trajectory], str]
    action_spec: ActionSpec
    prompt: PromptTemplate
    prompts: Mapping[str, PromptTemplate]

    def policy_prompt(self, name: str | None = None) -> PromptTemplate:
        """The policy prompt: :attr:`prompt` (the paper's) when ``name`` is None, else ``prompts[name]``.

        Raises:
            ValueError: ``name`` is not one of :attr:`prompts` (the message lists them).
        """
        if name is None or name == self.prompt.name:
            return self.prompt
        if name not in self.prompts:
            raise ValueError(
                f"Format {self.name!r} has no prompt {name!r}; choose one of {sorted(self.prompts)} (prompt_name)."
            )
        return self.prompts[name]


# --------------------------------------------------------------------------------------------------------------
# Lexing
# --------------------------------------------------------------------------------------------------------------


class Block(NamedTuple):
    """A tagged block ``<tag>content</tag>`` located in a text."""

    tag: str
    start: int
    """Index of the ``<`` of the opening tag."""
    content_start: int
    content_end: int
    """Index of the closing tag, or ``len(text)`` for an unclosed observation."""
    end: int
    """Index just after the closing tag, or ``len(text)``."""
    closed: bool


def tag_pattern(tags: Iterable[str]) -> re.Pattern[str]:
    """Compile a pattern matching any opening or closing tag of ``tags``; group 1 is ``/`` or empty, group 2
    the tag name."""
    return re.compile(r"<(/?)(" + "|".join(re.escape(t) for t in tags) + r")>")


def scan_blocks(
    text: str,
    pattern: re.Pattern[str],
    observation_tags: frozenset[str],
    containers: frozenset[str] = frozenset(),
) -> list[Block]:
    """Lenient lexer: the closed model blocks and all observation blocks of ``text``, sorted by start.

    Args:
        text: The response.
        pattern: :func:`tag_pattern` of the format's tags.
        observation_tags: Environment tags whose content is opaque.
        containers: Tags whose blocks may span observations (HiPRAG's ``think``/``step``).

    Returns:
        Blocks sorted by start. Unclosed model blocks are dropped; an unclosed observation runs to the end.
    """
    blocks: list[Block] = []
    pending: dict[str, tuple[int, int]] = {}
    n = len(text)
    pos = 0
    search = pattern.search
    while True:
        m = search(text, pos)
        if m is None:
            break
        closing, tag = m.group(1), m.group(2)
        if tag in observation_tags:
            if closing:  # a stray closing observation tag is text
                pos = m.end()
                continue
            for t in [t for t in pending if t not in containers]:
                del pending[t]
            close = f"</{tag}>"
            ce = text.find(close, m.end())
            if ce < 0:
                blocks.append(Block(tag, m.start(), m.end(), n, n, False))
                break
            blocks.append(Block(tag, m.start(), m.end(), ce, ce + len(close), True))
            pos = ce + len(close)
            continue
        if not closing:
            pending.setdefault(tag, (m.start(), m.end()))
        elif tag in pending:
            start, cs = pending.pop(tag)
            blocks.append(Block(tag, start, cs, m.start(), m.end(), True))
        pos = m.end()
    blocks.sort(key=lambda b: b.start)
    return blocks


class StrictLexer:
    """Strict lexer of the structure checkers: the text must be whitespace-separated tag blocks.

    A model block's content may hold no tag of the format (neither model nor observation tags); an observation
    block's content is environment text and may hold anything up to its closing tag.

    Args:
        model_tags: Tags the model writes.
        observation_tags: Tags the environment writes.
    """

    def __init__(self, model_tags: Iterable[str], observation_tags: Iterable[str] = ()) -> None:
        model_tags, observation_tags = list(model_tags), list(observation_tags)
        alternatives = "|".join(re.escape(t) for t in model_tags + observation_tags)
        self._open = re.compile(rf"\s*<({alternatives})>")
        # Unrolled loop: runs of non-'<' characters, or a '<' that does not start one of the format's tags; the
        # first tag after the content must then be the block's closing tag.
        self._body = re.compile(rf"[^<]*(?:<(?!/?(?:{alternatives})>)[^<]*)*</({alternatives})>")
        self._observation_close = {t: f"</{t}>" for t in observation_tags}

    def blocks(self, text: str) -> list[tuple[str, int, int]] | None:
        """Split ``text`` into blocks.

        Returns:
            ``[(tag, content_start, content_end), ...]``, or ``None`` when anything other than whitespace lies
            between or around blocks, a tag is unclosed, or a model block contains a tag.
        """
        out: list[tuple[str, int, int]] = []
        pos = 0
        open_match, body_match = self._open.match, self._body.match
        while True:
            m = open_match(text, pos)
            if m is None:
                return None if text[pos:].strip() else out
            tag, start = m.group(1), m.end()
            close = self._observation_close.get(tag)
            if close is not None:
                end = text.find(close, start)
                if end < 0:
                    return None
                out.append((tag, start, end))
                pos = end + len(close)
                continue
            b = body_match(text, start)
            if b is None or b.group(1) != tag:
                return None
            end = b.start(1) - 2  # the "</" of the closing tag
            out.append((tag, start, end))
            pos = b.end()

    def word(self, text: str, letters: Mapping[str, str]) -> str | None:
        """The blocks of ``text`` spelled one letter per tag (``letters``), for a structure rule written as a regex
        over that alphabet; ``None`` when :meth:`blocks` rejects the text.

        >>> StrictLexer(["think", "answer"]).word("<think>t</think> <answer>a</answer>", {"think": "T", "answer": "A"})
        'TA'
        """
        blocks = self.blocks(text)
        return None if blocks is None else "".join(letters[tag] for tag, _, _ in blocks)


def render_steps(
    trajectory: Trajectory, layout: Sequence[tuple[str, str, str]], answer: str = "<answer>{}</answer>"
) -> str:
    """Canonical text of a tag format whose steps are laid out field by field.

    Args:
        trajectory: The trajectory to write.
        layout: ``(step_field, before, after)`` per :class:`Step` field, in writing order; a field that is ``None``
            is skipped.
        answer: The answer's layout (``{}`` = the answer), written when the trajectory has one.

    >>> layout = [("reasoning", "<think>", "</think>"), ("query", "<search>", "</search>")]
    >>> step = Step(kind="search", span=(0, 0), reasoning="r", query="q")
    >>> render_steps(Trajectory(steps=(step,), answer="a"), layout)
    '<think>r</think><search>q</search><answer>a</answer>'
    """
    parts = [
        f"{before}{value}{after}"
        for step in trajectory.steps
        for name, before, after in layout
        if (value := getattr(step, name)) is not None
    ]
    if trajectory.answer is not None:
        before, _, after = answer.partition("{}")
        parts.append(f"{before}{trajectory.answer}{after}")
    return "".join(parts)


def strip_span(text: str, start: int, end: int) -> tuple[str, Span]:
    """The stripped ``text[start:end]`` and its span.

    >>> strip_span("a  b  ", 1, 6)
    ('b', (3, 4))
    """
    raw = text[start:end]
    lead = len(raw) - len(raw.lstrip())
    value = raw.strip()
    return value, (start + lead, start + lead + len(value))


@dataclass
class _StepBuilder:
    start: int
    end: int
    container_end: int | None = None
    values: dict[str, str] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)

    def freeze(self) -> Step:
        kind: StepKind = "search" if "query" in self.values else "non_search"
        return Step(kind=kind, span=(self.start, self.end), spans=dict(self.spans), **self.values)


def build_steps(
    text: str,
    blocks: Sequence[Block],
    fields: Mapping[str, str],
    *,
    start_tags: frozenset[str] = frozenset(),
    end_tags: frozenset[str] = frozenset(),
    boundary_tags: frozenset[str] = frozenset(),
    answer_tag: str = "answer",
    normalizers: Mapping[str, Callable[[str], str]] | None = None,
) -> Trajectory:
    """Group lexed blocks into steps with a few declarative rules.

    Args:
        text: The response the blocks index into.
        blocks: :func:`scan_blocks` output.
        fields: Tag name -> :class:`Step` field name, e.g. ``{"think": "reasoning", "search": "query"}``.
        start_tags: Tags that begin a new step when the current one already has content.
        end_tags: Tags that complete the current step once stored.
        boundary_tags: Container tags (HiPRAG ``step``) whose blocks delimit exactly one step.
        answer_tag: The final answer's tag; an answer block also completes the current step.
        normalizers: Field name -> function applied to the stripped value (span kept on the raw content).

    Returns:
        The :class:`Trajectory`. A field seen twice in one step starts a new step.
    """
    steps: list[Step] = []
    current: _StepBuilder | None = None
    answer: str | None = None
    answer_span: Span | None = None

    def flush() -> None:
        nonlocal current
        if current is not None and current.values:
            steps.append(current.freeze())
        current = None

    for b in blocks:
        if current is not None and current.container_end is not None and b.start >= current.container_end:
            flush()
        if b.tag in boundary_tags:
            flush()
            current = _StepBuilder(b.start, b.end, container_end=b.end)
            continue
        if b.tag == answer_tag:
            flush()
            answer, answer_span = strip_span(text, b.content_start, b.content_end)
            continue
        name = fields.get(b.tag)
        if name is None:
            continue
        if current is not None and (name in current.values or (b.tag in start_tags and current.values)):
            flush()
        if current is None:
            current = _StepBuilder(b.start, b.end)
        value, span = strip_span(text, b.content_start, b.content_end)
        if normalizers and name in normalizers:
            value = normalizers[name](value)
        current.values[name] = value
        current.spans[name] = span
        if current.container_end is None:
            current.end = max(current.end, b.end)
        if b.tag in end_tags:
            flush()
    flush()
    return Trajectory(steps=tuple(steps), answer=answer, answer_span=answer_span)


class TagGrammar:
    """A tag format written as a table: the lenient :meth:`parse`, the strict structure check (:meth:`valid_blocks`)
    and the canonical :meth:`render` of a grammar made of ``<tag>...</tag>`` blocks, the model's blocks holding no
    tag of the format and the environment's observation blocks holding anything (the lexing rules above).

    Args:
        letters: Every tag of the format (the model's, the observations', the answer's) and its letter in
            ``structure``.
        structure: The structure rule, a regex over the letters that the whole response's block word
            (:class:`StrictLexer`) must match.
        layout: The step fields in writing order, ``(step_field, before, after)`` as :func:`render_steps` takes them;
            the tag written in ``before`` is the field's tag, so the layout is also :meth:`parse`'s tag -> field map.
        observation_tags: The tags the environment writes; the other tags of ``letters`` are the model's.
        start_tags: :func:`build_steps` rule of :meth:`parse`: tags that begin a new step.
        end_tags: :func:`build_steps` rule of :meth:`parse`: tags that complete the current step.
        normalizers: :func:`build_steps` rule of :meth:`parse`: step field -> function applied to its value.

    >>> g = TagGrammar(
    ...     {"think": "T", "search": "S", "obs": "O", "answer": "A"},
    ...     structure="T(?:SOT)*A",
    ...     layout=[("reasoning", "<think>", "</think>"), ("query", "<search>", "</search>"),
    ...             ("observation", "<obs>", "</obs>")],
    ...     observation_tags=("obs",),
    ...     start_tags=("think",),
    ... )
    >>> g.word("<think>t</think> <search>q</search><obs><answer>x</answer></obs>"), g.matches("<think>t</think> so")
    ('TSO', False)
    >>> t = g.parse("<think>t</think><search>q</search><obs>d</obs><think>u</think><answer>a</answer>")
    >>> [(s.kind, s.query) for s in t.steps], t.answer
    ([('search', 'q'), ('non_search', None)], 'a')
    >>> g.render(t)
    '<think>t</think><search>q</search><obs>d</obs><think>u</think><answer>a</answer>'
    """

    def __init__(
        self,
        letters: Mapping[str, str],
        *,
        structure: str,
        layout: Sequence[tuple[str, str, str]],
        observation_tags: Iterable[str] = (),
        start_tags: Iterable[str] = (),
        end_tags: Iterable[str] = (),
        normalizers: Mapping[str, Callable[[str], str]] | None = None,
    ) -> None:
        self.letters = dict(letters)
        self.observation_tags = frozenset(observation_tags)
        self.structure = re.compile(structure)
        self.layout = tuple(layout)
        self.fields: dict[str, str] = {}  # tag -> Step field, read off the layout
        for name, before, _ in self.layout:
            tag = re.search(r"<(\w+)>", before)
            if tag is None or tag.group(1) not in self.letters:
                raise ValueError(f"TagGrammar layout {name!r}: {before!r} opens none of the tags {list(self.letters)}")
            self.fields[tag.group(1)] = name
        self.start_tags = frozenset(start_tags)
        self.end_tags = frozenset(end_tags)
        self.normalizers = dict(normalizers or {})
        self.pattern = tag_pattern(self.letters)
        self.strict = StrictLexer(
            [t for t in self.letters if t not in self.observation_tags],
            [t for t in self.letters if t in self.observation_tags],
        )

    def blocks(self, text: str) -> list[Block]:
        """The lenient lexer's blocks of ``text`` (:func:`scan_blocks`)."""
        return scan_blocks(text, self.pattern, self.observation_tags)

    def observation_spans(self, text: str) -> list[Span]:
        """``(start, end)`` of each observation block, tags included, lexed as :meth:`parse` does."""
        return [(b.start, b.end) for b in self.blocks(text) if b.tag in self.observation_tags]

    def word(self, text: str) -> str | None:
        """The blocks of ``text`` as letters, or ``None`` when the strict lexer rejects the text
        (:meth:`StrictLexer.word`)."""
        return self.strict.word(text, self.letters)

    def valid_blocks(self, response: Any) -> list[tuple[str, int, int]] | None:
        """The strict blocks ``[(tag, content_start, content_end), ...]`` of a response that follows the structure
        rule, else ``None``."""
        blocks = self.strict.blocks(as_text(response))
        if blocks is None or self.structure.fullmatch("".join(self.letters[tag] for tag, _, _ in blocks)) is None:
            return None
        return blocks

    def matches(self, response: Any) -> bool:
        """Whether the response follows the structure rule."""
        return self.valid_blocks(response) is not None

    def parse(self, response: Any) -> Trajectory:
        """The lenient parse (:func:`build_steps` over :meth:`blocks`). Never raises."""
        text = as_text(response)
        return build_steps(
            text,
            self.blocks(text),
            self.fields,
            start_tags=self.start_tags,
            end_tags=self.end_tags,
            normalizers=self.normalizers,
        )

    def render(self, trajectory: Trajectory) -> str:
        """The canonical text (:func:`render_steps` with the layout)."""
        return render_steps(trajectory, self.layout)
