"""Property tests: the parsers and checkers never raise, spans index the text, render/parse round-trips."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrag_verl.formats import Step, Trajectory, available_formats, get_format
from agentrag_verl.methods.autosearch import grammar as autosearch
from agentrag_verl.methods.reasonrag import grammar as reasonrag
from agentrag_verl.metrics import extract_answer

from . import paper_examples

FORMATS = available_formats()
TAGS = [
    "think", "step", "reasoning", "search", "context", "conclusion", "information", "reflect", "answer", "query",
    "evidence", "tool_call", "tool_response",
]  # fmt: skip
TOKENS = (
    [f"<{t}>" for t in TAGS]
    + [f"</{t}>" for t in TAGS]
    + ["So the next query is ", "So the answer is ", "Based on the query, the relevant evidence is ", "None"]
    + ["word", "Doc 1(Title: x)", " ", "\n", "\r\n", "\t", "<", ">", "{", '{"arguments": {"query": "q"}}', "…"]
)
GOLDEN = [v for k, v in vars(paper_examples).items() if k.isupper() and isinstance(v, str)]
OBSERVATION_TAGS = {
    "searchr1": "<information>",
    "autosearch": "<information>",
    "multistage": "<information>",
    "hiprag": "<context>",
    "searchp1": "<tool_response>",
    "reasonrag": None,
}

# Up to 40 tokens / 300 characters: enough for several nested or broken blocks while keeping examples fast.
tag_soup = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
any_text = st.one_of(st.text(max_size=300), tag_soup)


@st.composite
def mutated_golden(draw):
    """A paper trajectory after 1-4 random edits: insert a tag or word, delete or duplicate a slice."""
    text = draw(st.sampled_from(GOLDEN))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 60)))  # slices up to 60 chars: about one tag block
        if op == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


def _exercise(name: str, text: str) -> None:
    fmt = get_format(name)
    trajectory = fmt.parse(text)
    fmt.check_format(text)
    assert isinstance(fmt.is_valid(text), bool)
    fmt.action_spec.extract_action(text)
    for step in trajectory.steps:
        assert step.kind == ("search" if step.query is not None else "non_search")
        for field_name, (start, end) in step.spans.items():
            raw = text[start:end]
            if name == "searchp1" and field_name == "query" and raw.startswith("{"):
                continue  # JSON tool calls: the query is read from the JSON, the span covers the raw content
            assert raw == getattr(step, field_name)
    if trajectory.answer is not None:
        start, end = trajectory.answer_span
        assert text[start:end] == trajectory.answer
    observation = OBSERVATION_TAGS[name]
    if observation is None or observation not in text:
        assert trajectory.answer == extract_answer(text)  # docs/decisions.md#answer-metrics, no observation in the way


@pytest.mark.parametrize("name", FORMATS)
@given(text=any_text)
def test_never_raises_on_random_text(name, text):
    _exercise(name, text)


@pytest.mark.parametrize("name", FORMATS)
@given(text=mutated_golden())
def test_never_raises_on_mutated_paper_trajectories(name, text):
    _exercise(name, text)


@given(text=st.one_of(any_text, mutated_golden()))
def test_format_specific_helpers_never_raise(text):
    flags = autosearch.step_validity(text)
    assert len(flags) == len(autosearch.retrieval_step_prefixes(text)) + 1
    reasonrag.next_stage(text)


@pytest.mark.parametrize("name", FORMATS)
def test_non_string_input(name):
    fmt = get_format(name)
    for value in (None, b"<answer>x</answer>", 42):
        fmt.parse(value)
        fmt.check_format(value)


# ---- round trip ----------------------------------------------------------------------------------------------

# Field contents: any characters but angle brackets (which could form tags), 1-30 long, stripped as parse does.
field_text = (
    st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), min_size=1, max_size=30)
    .map(str.strip)
    .filter(bool)
)
query_text = field_text.filter(lambda s: not s.startswith("{"))  # Search-P1 reads "{...}" as a JSON tool call


def _step(kind, **fields):
    return Step(kind=kind, span=(0, 0), **fields)


def _answered(draw, steps):
    """The trajectory of ``steps``, maybe (as drawn) a last non-search step of reasoning, and an answer."""
    if draw(st.booleans()):
        steps.append(_step("non_search", reasoning=draw(field_text)))
    return Trajectory(steps=tuple(steps), answer=draw(field_text))


@st.composite
def hiprag_trajectories(draw):
    steps = []
    for _ in range(draw(st.integers(1, 5))):  # 1-5 steps, as realistic trajectories
        if draw(st.booleans()):
            steps.append(
                _step(
                    "search",
                    reasoning=draw(field_text),
                    query=draw(field_text),
                    observation=draw(field_text),
                    conclusion=draw(field_text),
                )
            )
        else:
            steps.append(_step("non_search", reasoning=draw(field_text), conclusion=draw(field_text)))
    return Trajectory(steps=tuple(steps), answer=draw(field_text))


@st.composite
def searchr1_trajectories(draw):
    steps = [
        _step("search", reasoning=draw(field_text), query=draw(field_text), observation=draw(field_text))
        for _ in range(draw(st.integers(0, 4)))
    ]
    steps.append(_step("non_search", reasoning=draw(field_text)))
    return Trajectory(steps=tuple(steps), answer=draw(field_text))


@st.composite
def multistage_trajectories(draw):
    n = draw(st.integers(0, 4))
    if n == 0:
        steps = [_step("non_search", reasoning=draw(field_text), reflect=draw(field_text))]
    else:
        steps = [
            _step(
                "search",
                reasoning=draw(field_text) if i == 0 else None,
                query=draw(field_text),
                observation=draw(field_text),
                reflect=draw(field_text),
            )
            for i in range(n)
        ]
    return Trajectory(steps=tuple(steps), answer=draw(field_text))


@st.composite
def reasonrag_trajectories(draw):
    steps = [
        _step(
            "search",
            reasoning=draw(st.none() | field_text),
            query=draw(field_text),
            evidence=draw(field_text | st.just("None")),
        )
        for _ in range(draw(st.integers(0, 4)))
    ]
    return _answered(draw, steps)


@st.composite
def searchp1_trajectories(draw):
    steps = [
        _step(
            "search",
            reasoning=draw(field_text) if i == 0 else draw(st.none() | field_text),
            query=draw(query_text),
            observation=draw(field_text),
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    return _answered(draw, steps)


STRATEGIES = {
    "hiprag": hiprag_trajectories(),
    "searchr1": searchr1_trajectories(),
    "autosearch": searchr1_trajectories(),  # Search-R1's tags
    "multistage": multistage_trajectories(),
    "reasonrag": reasonrag_trajectories(),
    "searchp1": searchp1_trajectories(),
}


def _content(t: Trajectory):
    fields = [(s.kind, s.reasoning, s.query, s.observation, s.conclusion, s.reflect, s.evidence) for s in t.steps]
    return fields, t.answer


@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=60)  # 60 trajectories per format keep the suite fast and cover 0-5 step shapes
@given(data=st.data())
def test_render_parse_round_trip(name, data):
    fmt = get_format(name)
    trajectory = data.draw(STRATEGIES[name])
    text = fmt.render(trajectory)
    parsed = fmt.parse(text)
    assert _content(parsed) == _content(trajectory)
    assert fmt.is_valid(text)
    if name == "hiprag":
        assert fmt.check_format(text) == (1, len(trajectory.steps))
    for step in parsed.steps:
        for field_name, (start, end) in step.spans.items():
            assert text[start:end] == getattr(step, field_name)
