"""Search-P1 format: Algorithm 3's three-way format validity, Algorithm 2's rollout, Figure 7."""

import pytest

from agentrag_verl.methods.searchp1 import grammar as searchp1
from agentrag_verl.methods.searchp1.grammar import FormatLevel

from .paper_examples import SEARCHP1_FIG10, SEARCHP1_FIG10_TAGGED

BASE = (
    "<reasoning>1. find X 2. find Y</reasoning>\n<tool_call>X</tool_call>\n<tool_response>\nd1\n</tool_response>\n"
    "<answer>Y</answer>"
)


def test_figure_10_as_printed_has_no_answer_and_is_invalid():
    t = searchp1.parse(SEARCHP1_FIG10)
    assert t.queries == ["“Bang Bang Rock & Roll” album", "lead singer of Art Brut"]
    assert t.steps[0].reasoning.startswith("I need to: 1. Find the band")
    assert t.steps[1].reasoning is None and t.steps[1].observation.startswith("…frontman Eddie Argos")
    assert t.answer is None  # "Final: Eddie Argos" is not an <answer>
    assert not searchp1.valid_format(SEARCHP1_FIG10)
    assert searchp1.check_format(SEARCHP1_FIG10) is FormatLevel.INVALID  # no answer: whole reward 0


def test_figure_10_with_answer_tags_is_fully_valid():
    assert searchp1.parse(SEARCHP1_FIG10_TAGGED).answer == "Eddie Argos"
    assert searchp1.check_format(SEARCHP1_FIG10_TAGGED) is FormatLevel.FULL
    assert searchp1.is_valid(SEARCHP1_FIG10_TAGGED)


@pytest.mark.parametrize(
    ("text", "level"),
    [
        (BASE, FormatLevel.FULL),
        # answer + tool response, format broken -> half credit
        (SEARCHP1_FIG10.replace("Final: Eddie Argos", "Final: <answer>Eddie Argos</answer>"), FormatLevel.HALF),
        (BASE.replace("<reasoning>1. find X 2. find Y</reasoning>\n", ""), FormatLevel.HALF),  # no plan
        (BASE + " extra", FormatLevel.HALF),
        # a tool call the environment never answered, with an answer: no tool response -> invalid
        ("<reasoning>p</reasoning><tool_call>X</tool_call><answer>Y</answer>", FormatLevel.INVALID),
        # well formed but no search: Algorithm 3 gives no format credit (and returns reward 0)
        ("<reasoning>p</reasoning><answer>Y</answer>", FormatLevel.INVALID),
        (BASE.replace("<answer>Y</answer>", "<answer> </answer>"), FormatLevel.INVALID),  # blank answer
        (BASE.replace("<answer>Y</answer>", ""), FormatLevel.INVALID),
        ("", FormatLevel.INVALID),
    ],
)
def test_three_way_validity(text, level):
    assert searchp1.check_format(text) is level


def test_format_level_values_and_truthiness():
    assert [float(x) for x in FormatLevel] == [1.0, 0.5, 0.0]  # r_f before λf = 0.1 -> 0.1 / 0.05 / 0
    assert bool(FormatLevel.FULL) and bool(FormatLevel.HALF) and not FormatLevel.INVALID
    assert 0.1 * FormatLevel.HALF == pytest.approx(0.05)


@pytest.mark.parametrize(
    "text",
    [
        BASE.replace("<tool_response>\nd1\n</tool_response>\n", ""),  # call without response
        BASE.replace("<tool_call>X</tool_call>\n", ""),  # response without call
        BASE.replace("</reasoning>\n<tool_call>", "</reasoning> then <tool_call>"),  # stray text
        BASE.replace("1. find X", "<answer>x</answer>"),  # tag inside reasoning
        BASE + "<answer>Z</answer>",  # two answers
        "<tool_call>X</tool_call><tool_response>d</tool_response><reasoning>p</reasoning><answer>Y</answer>",
    ],
)
def test_valid_format_rejects(text):
    assert not searchp1.valid_format(text)


def test_valid_format_accepts_later_reasoning_turns():
    text = BASE.replace(
        "<answer>",
        "<reasoning>now Y</reasoning>\n<tool_call>Y</tool_call>\n"
        "<tool_response>d2</tool_response>\n<reasoning>done</reasoning>\n<answer>",
    )
    assert searchp1.valid_format(text)
    t = searchp1.parse(text)
    assert [(s.kind, s.reasoning, s.query) for s in t.steps] == [
        ("search", "1. find X 2. find Y", "X"),
        ("search", "now Y", "Y"),
        ("non_search", "done", None),
    ]


def test_json_tool_calls_are_read_as_queries():
    text = BASE.replace(
        "<tool_call>X</tool_call>", '<tool_call>{"name": "search", "arguments": {"query": "X"}}</tool_call>'
    )
    assert searchp1.parse(text).queries == ["X"]
    action = searchp1.ACTION_SPEC.extract_action(
        '<tool_call>\n{"name": "search", "arguments": {"query_list": ["X"]}}\n</tool_call>'
    )
    assert (action.kind, action.content) == ("search", "X")
    assert searchp1.query_from_tool_call("{not json") == "{not json"


def test_action_spec_follows_algorithm_2():
    spec = searchp1.ACTION_SPEC
    assert spec.response_prefix == "<reasoning>"  # Alg. 2 l. 1
    assert spec.stop == ("</tool_call>", "</answer>") and spec.budget == 4 and spec.after_budget == "force"
    generated = spec.response_prefix + "1. band 2. singer</reasoning>\n<tool_call> Art Brut singer </tool_call>"
    assert spec.extract_action(generated).content == "Art Brut singer"
    observation = spec.render_observation([{"contents": '"Art Brut"\nArt Brut are a rock band.'}])
    assert observation == '\n<tool_response>\nDoc 1(Title: "Art Brut") Art Brut are a rock band.\n</tool_response>\n'
    finished = generated + observation + spec.force_answer_prefix + "Eddie Argos</answer>"
    assert searchp1.check_format(finished) is FormatLevel.FULL


def test_prompt_is_figure_7():
    user = searchp1.PROMPT.format("Who is the lead singer of the band performing Bang Bang Rock & Roll?")
    assert user.startswith("You are a meticulous Deep Research Agent.")
    assert "Execute only ONE search query per turn." in user
    assert user.endswith(
        "## CURRENT TASK\nQuestion: Who is the lead singer of the band performing Bang Bang Rock & Roll?"
    )
