"""Multi-stage format ("Learning When to Search"): the two structures of the format reward (§3.3)."""

import pytest

from agentrag_verl.methods.multistage import grammar as multistage

from .paper_examples import MULTISTAGE_TABLE7

NO_RETRIEVAL = "<think>I know it.</think>\n<reflect>Internal knowledge suffices.</reflect>\n<answer>Paris</answer>"
TWO_ROUNDS = (
    "<think>t</think>\n<search>q1</search>\n\n<information>d1</information>\n\n<reflect>r1</reflect>\n"
    "<search>q2</search>\n\n<information>d2</information>\n\n<reflect>r2</reflect>\n<answer>a</answer>"
)


def test_table_7_trajectory():
    assert multistage.check_format(MULTISTAGE_TABLE7)
    t = multistage.parse(MULTISTAGE_TABLE7)
    assert [s.kind for s in t.steps] == ["search"]
    assert t.queries == ["when did Lavinia Norcross Dickinson's father die"]
    assert t.steps[0].reasoning.startswith("Okay, let's see.")
    assert t.steps[0].observation.startswith('Doc 1 (Title: ""Emily Norcross Dickinson"")')
    assert t.steps[0].reflect.endswith("is the answer.")
    assert t.answer == "June 16, 1874"


def test_both_structures_are_accepted():
    assert multistage.check_format(NO_RETRIEVAL)
    t = multistage.parse(NO_RETRIEVAL)
    assert [(s.kind, s.reasoning, s.reflect) for s in t.steps] == [
        ("non_search", "I know it.", "Internal knowledge suffices.")
    ]
    assert multistage.check_format(TWO_ROUNDS)
    t = multistage.parse(TWO_ROUNDS)
    assert [(s.reasoning, s.query, s.observation, s.reflect) for s in t.steps] == [
        ("t", "q1", "d1", "r1"),
        (None, "q2", "d2", "r2"),  # the think belongs to the first round only
    ]
    assert multistage.check_format(NO_RETRIEVAL.replace("\n", ""))  # whitespace between tags is optional


INVALID = {
    "missing_reflect_after_information": TWO_ROUNDS.replace("<reflect>r2</reflect>\n", ""),
    "missing_reflect_without_retrieval": "<think>t</think><answer>a</answer>",
    "missing_think": NO_RETRIEVAL.replace("<think>I know it.</think>\n", ""),
    "reflect_before_information": "<think>t</think><search>q</search><reflect>r</reflect>"
    "<information>d</information><answer>a</answer>",
    "search_without_information": "<think>t</think><search>q</search><reflect>r</reflect><answer>a</answer>",
    "think_between_rounds": TWO_ROUNDS.replace("<search>q2", "<think>again</think><search>q2"),
    "reflect_and_search_without_retrieval_result": "<think>t</think><reflect>r</reflect><search>q</search>"
    "<information>d</information><reflect>r</reflect><answer>a</answer>",
    "no_answer": NO_RETRIEVAL.replace("\n<answer>Paris</answer>", ""),
    "two_answers": NO_RETRIEVAL + "<answer>Lyon</answer>",
    "trailing_text": NO_RETRIEVAL + " Done.",
    "leading_text": "Sure. " + NO_RETRIEVAL,
    "stray_text_between": NO_RETRIEVAL.replace("</think>\n<reflect>", "</think> so <reflect>"),
    "tag_inside_reflect": NO_RETRIEVAL.replace("suffices.", "suffices <answer>x</answer>"),
}


@pytest.mark.parametrize("text", list(INVALID.values()), ids=list(INVALID))
def test_structure_rejects(text):
    assert not multistage.check_format(text)


def test_information_content_is_opaque():
    text = TWO_ROUNDS.replace("d1", "<answer>fake</answer><search>fake</search>")
    assert multistage.check_format(text)
    t = multistage.parse(text)
    assert t.queries == ["q1", "q2"] and t.answer == "a"


def test_action_spec_and_prompt():
    spec = multistage.ACTION_SPEC
    assert "</search>" in spec.stop and spec.budget == 5 and spec.after_budget == "final_turn"
    assert spec.extract_action("<think>t</think><search>Lavinia Dickinson father death</search>").content == (
        "Lavinia Dickinson father death"
    )
    assert spec.render_observation([{"contents": "T\nx"}]) == "\n\n<information>Doc 1(Title: T) x</information>\n\n"
    user = multistage.PROMPT.format("When did X die?")
    assert user.startswith("Please answer the given question by following the structured reasoning protocol below:")
    assert "Generate a brief keyword-based search query inside <search>...</search>." in user
    assert "`" not in user  # extraction backticks removed
    assert user.endswith("Question: When did X die?")
