"""HiPRAG format: Algorithms 2-3 on the paper's examples and on one hand-made violation per rule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrag_verl.methods.hiprag import grammar as hiprag
from agentrag_verl.methods.searchr1 import grammar as searchr1

from .hiprag_reference import reference_check_format, reference_validate_step
from .paper_examples import HIPRAG_FIG3A, HIPRAG_FIG3B, HIPRAG_FIG7, HIPRAG_FIG8

# A minimal valid trajectory: a search step then a non-search step. Mutations of it hit one rule each.
BASE = (
    "<think>\n<step>\n<reasoning>r1</reasoning>\n<search>q1</search>\n<context>c1</context>\n"
    "<conclusion>o1</conclusion>\n</step>\n<step>\n<reasoning>r2</reasoning>\n<conclusion>o2</conclusion>\n"
    "</step>\n</think>\n<answer>a</answer>"
)


def test_figure_3b_parses_as_four_steps_three_with_search():
    assert hiprag.check_format(HIPRAG_FIG3B) == (1, 4)  # Figure 3 (b): four <step> blocks
    t = hiprag.parse(HIPRAG_FIG3B)
    assert [s.kind for s in t.steps] == ["search", "non_search", "search", "search"]  # step 2 is internal
    assert t.queries == [
        "latest playstation console model",
        "current CEO of AMD",
        "AMD stock price closing July 18 2025",
    ]
    assert t.answer == "Dr. Lisa Su and $175.40."
    assert [s.conclusion for s in t.steps] == ["PlayStation 5 (PS5)", "AMD", "Dr. Lisa Su", "$175.40"]
    assert t.steps[2].observation == "The current President and CEO of AMD is Dr. Lisa Su."
    assert t.steps[1].observation is None and t.steps[1].query is None


def test_figure_3a_fails_hiprag_checker_and_parses_with_searchr1():
    assert hiprag.check_format(HIPRAG_FIG3A) == (0, -1)  # several <think> blocks, no <step>
    assert searchr1.check_format(HIPRAG_FIG3A)
    t = searchr1.parse(HIPRAG_FIG3A)
    assert t.queries == [
        "latest playstation console model",
        "current CEO of AMD",
        "AMD stock price closing July 18 2025",
    ]
    assert t.answer == "Dr. Lisa Su and $175.40."


def test_case_study_figures_7_and_8():
    assert hiprag.check_format(HIPRAG_FIG7) == (1, 5)  # "five unnecessary search steps"
    assert hiprag.parse(HIPRAG_FIG7).num_searches == 5
    assert hiprag.check_format(HIPRAG_FIG8) == (1, 2)  # one internal step, one search
    assert [s.kind for s in hiprag.parse(HIPRAG_FIG8).steps] == ["non_search", "search"]


def test_base_is_valid_and_newlines_are_canonicalized():
    assert hiprag.check_format(BASE) == (1, 2)
    assert hiprag.check_format(BASE.replace("\n", "\r\n")) == (1, 2)  # Alg. 2 l. 3 Normalize
    assert hiprag.check_format(BASE.replace("\n", "\r")) == (1, 2)
    assert hiprag.check_format(BASE.replace("\n", "")) == (1, 2)  # whitespace between tags is optional
    assert hiprag.check_format("  \n" + BASE + "\n\n") == (1, 2)  # surrounding whitespace is trimmed


def _swap(text: str, a: str, b: str) -> str:
    return text.replace(a, "\0").replace(b, a).replace("\0", b)


INVALID = {
    # Algorithm 2
    "l4_duplicated_think": BASE.replace("<think>\n", "<think>\n<think>\n"),
    "l4_missing_close_think": BASE.replace("</think>", ""),
    "l4_two_think_blocks": BASE.replace("</think>", "</think>\n<think>more</think>"),
    "l5_close_think_before_open": _swap(BASE, "<think>", "</think>"),
    "l6_stray_text_before_think": "Let me think.\n" + BASE,
    "l9_text_between_think_and_answer": BASE.replace("</think>\n<answer>", "</think>\nSo: <answer>"),
    "l9_no_answer": BASE.replace("\n<answer>a</answer>", ""),
    "l9_answer_inside_think": BASE.replace("\n<answer>a</answer>", "").replace(
        "</think>", "<answer>a</answer></think>"
    ),
    "l10_duplicated_answer": BASE + "\n<answer>b</answer>",
    "l10_unclosed_answer": BASE.replace("</answer>", ""),
    "l12_empty_answer": BASE.replace("<answer>a</answer>", "<answer> \n </answer>"),
    "l13_trailing_junk": BASE + "\nHope this helps!",
    "l20_text_after_last_step": BASE.replace("</step>\n</think>", "</step>\nDone.\n</think>"),
    "l20_prose_only_think": "<think>I know this.</think>\n<answer>a</answer>",
    "l23_stray_text_between_steps": BASE.replace("</step>\n<step>", "</step>\nNext:\n<step>"),
    "l23_text_before_first_step": BASE.replace("<think>\n<step>", "<think>\nPlan.\n<step>"),
    "l25_missing_close_step": BASE.replace("</step>\n</think>", "\n</think>"),
    "l30_no_steps": "<think>\n</think>\n<answer>a</answer>",
    # Algorithm 3 (ValidateStep)
    "a3_l4_duplicated_reasoning": BASE.replace(
        "<reasoning>r2</reasoning>", "<reasoning>r2</reasoning><reasoning>x</reasoning>"
    ),
    "a3_l4_missing_reasoning": BASE.replace("<reasoning>r2</reasoning>\n", ""),
    "a3_l6_reasoning_not_first": BASE.replace(
        "<reasoning>r1</reasoning>\n<search>q1</search>", "<search>q1</search>\n<reasoning>r1</reasoning>"
    ),
    "a3_l6_text_before_reasoning": BASE.replace("<step>\n<reasoning>r2", "<step>\nHmm. <reasoning>r2"),
    "a3_l7_missing_conclusion": BASE.replace("\n<conclusion>o2</conclusion>", ""),
    "a3_l7_duplicated_conclusion": BASE.replace("<conclusion>o2</conclusion>", "<conclusion>o2</conclusion>" * 2),
    "a3_l9_conclusion_inside_reasoning": BASE.replace(
        "<reasoning>r2</reasoning>\n<conclusion>o2</conclusion>", "<reasoning>r2<conclusion>o2</conclusion></reasoning>"
    ),
    "a3_l10_text_after_conclusion": BASE.replace("<conclusion>o2</conclusion>", "<conclusion>o2</conclusion> ok"),
    "a3_l14_duplicated_search": BASE.replace("<search>q1</search>", "<search>q1</search><search>q2</search>"),
    "a3_l14_context_without_search": BASE.replace("<search>q1</search>\n", ""),
    "a3_l14_unclosed_search": BASE.replace("</search>", ""),
    "a3_l15_search_without_context": BASE.replace("<context>c1</context>\n", ""),
    "a3_l15_duplicated_context": BASE.replace("<context>c1</context>", "<context>c1</context><context>c2</context>"),
    "a3_l18_context_before_search": BASE.replace(
        "<search>q1</search>\n<context>c1</context>", "<context>c1</context>\n<search>q1</search>"
    ),
    "a3_l18_search_inside_reasoning": BASE.replace(
        "<reasoning>r1</reasoning>\n<search>q1</search>", "<reasoning>r1<search>q1</search></reasoning>"
    ),
    "a3_l18_context_inside_conclusion": BASE.replace(
        "<context>c1</context>\n<conclusion>o1</conclusion>", "<conclusion>o1<context>c1</context></conclusion>"
    ),
    "a3_l19_text_between_reasoning_and_search": BASE.replace("</reasoning>\n<search>", "</reasoning> so <search>"),
    "a3_l19_text_between_search_and_context": BASE.replace("</search>\n<context>", "</search> wait <context>"),
    "a3_l19_text_between_context_and_conclusion": BASE.replace(
        "</context>\n<conclusion>", "</context> ok <conclusion>"
    ),
    "a3_l25_text_between_reasoning_and_conclusion": BASE.replace(
        "<reasoning>r2</reasoning>\n<conclusion>", "<reasoning>r2</reasoning> thus <conclusion>"
    ),
}


@pytest.mark.parametrize("text", list(INVALID.values()), ids=list(INVALID))
def test_each_rule_of_algorithms_2_and_3_rejects(text):
    assert hiprag.check_format(text) == (0, -1)
    assert not hiprag.is_valid(text)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("<reasoning>r</reasoning><search>q</search><context>c</context><conclusion>o</conclusion>", True),
        ("  <reasoning>r</reasoning>\n<conclusion>o</conclusion>\n", True),  # Alg. 3 l. 3 strips the body
        ("<reasoning></reasoning><conclusion></conclusion>", True),  # Alg. 3 does not require content
        ("<reasoning>r</reasoning><search>q</search><conclusion>o</conclusion>", False),
        ("<conclusion>o</conclusion><reasoning>r</reasoning>", False),
        ("", False),
    ],
)
def test_validate_step(body, expected):
    assert hiprag.validate_step(body) is expected


def test_literal_counts_cover_context_text():
    # Alg. 2-3 count tags over the raw text, retrieved context included: a document mentioning <search> fails.
    text = BASE.replace("<context>c1</context>", "<context>see <search>x</search></context>")
    assert hiprag.check_format(text) == (0, -1)
    # ... while parse treats context as opaque environment text: no extra query.
    assert hiprag.parse(text).queries == ["q1"]


def test_context_never_yields_answer_or_query():
    text = BASE.replace("<context>c1</context>", "<context><answer>fake</answer> <search>fake</search></context>")
    t = hiprag.parse(text)
    assert t.answer == "a" and t.queries == ["q1"]
    assert t.steps[0].observation == "<answer>fake</answer> <search>fake</search>"


def test_parse_counts_match_checker_and_spans_index_the_text():
    for text in (BASE, HIPRAG_FIG3B, HIPRAG_FIG7, HIPRAG_FIG8):
        f, n = hiprag.check_format(text)
        t = hiprag.parse(text)
        assert f == 1 and len(t.steps) == n
        for step in t.steps:
            assert text[step.span[0] : step.span[1]].startswith("<step>")
            for name, (start, end) in step.spans.items():
                assert text[start:end] == getattr(step, name)
        assert text[t.answer_span[0] : t.answer_span[1]] == t.answer


def test_parse_is_lenient_on_invalid_text():
    t = hiprag.parse(INVALID["a3_l15_search_without_context"])
    assert t.queries == ["q1"] and t.steps[0].observation is None and t.answer == "a"
    assert hiprag.parse("").steps == () and hiprag.parse(None).answer is None


def test_render_round_trip_of_figure_3b():
    t = hiprag.parse(HIPRAG_FIG3B)
    again = hiprag.parse(hiprag.render(t))
    assert [(s.kind, s.reasoning, s.query, s.observation, s.conclusion) for s in again.steps] == [
        (s.kind, s.reasoning, s.query, s.observation, s.conclusion) for s in t.steps
    ]
    assert hiprag.check_format(hiprag.render(t)) == (1, 4)


def test_action_spec_drives_algorithm_1():
    spec = hiprag.ACTION_SPEC
    assert spec.stop == ("</search>", "</answer>")
    generated = "<think>\n<step>\n<reasoning>r</reasoning>\n<search> current CEO of AMD </search>"
    action = spec.extract_action(generated)
    assert action.kind == "search" and action.content == "current CEO of AMD"
    assert generated[action.span[0] : action.span[1]] == "current CEO of AMD"
    docs = [{"id": "7", "contents": '"AMD"\nLisa Su is the CEO.'}]
    observation = spec.render_observation(docs)
    assert observation == '<context>Doc 1(Title: "AMD") Lisa Su is the CEO.</context>\n<conclusion>'
    finished = generated + observation + " Dr. Lisa Su </conclusion>\n</step>\n</think>\n<answer>Lisa Su</answer>"
    assert hiprag.check_format(finished) == (1, 1)  # the environment's text completes a valid step
    assert spec.extract_action(finished).kind == "answer"
    # Alg. 1: B counts steps; after the B-th </conclusion> the step, the think block are closed and the answer opened
    assert spec.force_answer_prefix == "</step>\n</think>\n<answer>" and spec.budget == 4
    assert spec.budget_unit == "steps" and spec.step_close == "</conclusion>" and spec.after_budget == "force"
    assert spec.turn_stop == ("</search>", "</answer>", "</conclusion>")


def test_prompt_is_figure_4():
    messages = hiprag.PROMPT.messages("Who?")
    assert messages[0]["role"] == "system" and messages[1] == {"role": "user", "content": "Question: Who?"}
    system = messages[0]["content"]
    assert system.startswith("Answer user questions by thinking step-by-step.")
    assert "placed immediately after the closing </think> tag" in system
    assert "Format 2: Step without a Search (Internal Reasoning)" in system


# ---- the optimized checker equals the line-by-line transcription of Algorithms 2-3 ----------------------------

_HIPRAG_TOKENS = [
    *(f"<{t}>" for t in ("think", "step", "reasoning", "search", "context", "conclusion", "answer")),
    *(f"</{t}>" for t in ("think", "step", "reasoning", "search", "context", "conclusion", "answer")),
    "x",
    " ",
    "\n",
    "\r\n",
    "\r",
    "<",
    "<stepx>",
]


@st.composite
def _near_valid(draw):
    """A valid trajectory (Figure 3 (b), 7, 8 or BASE) with 1-3 random token insertions or slice deletions."""
    text = draw(st.sampled_from([BASE, HIPRAG_FIG3B, HIPRAG_FIG7, HIPRAG_FIG8]))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:i] + draw(st.sampled_from(_HIPRAG_TOKENS)) + text[i:]
        else:
            text = text[:i] + text[draw(st.integers(i, min(len(text), i + 30))) :]  # cut up to ~one tag block
    return text


@settings(max_examples=400)  # cheap (~0.1 ms each); many mutations reach deep into Algorithm 3
@given(text=st.one_of(st.lists(st.sampled_from(_HIPRAG_TOKENS), max_size=60).map("".join), _near_valid()))
def test_checker_equals_literal_transcription(text):
    assert hiprag.check_format(text) == reference_check_format(text)
    for body in text.split("<step>"):
        assert hiprag.validate_step(body) == reference_validate_step(body)


@pytest.mark.parametrize("text", [BASE, HIPRAG_FIG3B, *INVALID.values()])
def test_checker_equals_literal_transcription_on_examples(text):
    assert hiprag.check_format(text) == reference_check_format(text)
