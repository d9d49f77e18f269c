"""Search-R1 / AutoSearch format: structure rule, AutoSearch per-step validity, TF-IDF repeats, prompts."""

import math

import pytest

from agentrag_verl.methods.autosearch import grammar as autosearch
from agentrag_verl.methods.autosearch.tfidf import cosine, repeated_queries, tfidf_vectors
from agentrag_verl.methods.searchr1 import grammar as searchr1

from .paper_examples import (
    AUTOSEARCH_FIG13_AUTOSEARCH,
    AUTOSEARCH_FIG13_SEARCHR1,
    HIPRAG_FIG3A,
    SEARCHP1_FIG10_SEARCHR1,
)

BASE = (
    "<think>t1</think>\n<search>q1</search>\n\n<information>d1</information>\n\n<think>t2</think>\n<answer>a</answer>"
)


def test_figure_3a_parses_into_three_search_steps_and_a_final_think():
    t = searchr1.parse(HIPRAG_FIG3A)
    assert [s.kind for s in t.steps] == ["search", "search", "search", "non_search"]
    assert t.steps[0].observation.startswith("The latest PlayStation console is the PlayStation 5")
    assert t.steps[1].reasoning.startswith("So, the latest console is the PlayStation 5")
    assert t.steps[3].reasoning.startswith("I have all the necessary information.")
    assert t.answer == "Dr. Lisa Su and $175.40."


def test_autosearch_figure_13_second_identical_query_is_an_invalid_retrieval_step():
    assert searchr1.check_format(AUTOSEARCH_FIG13_SEARCHR1)  # well formed per Search-R1's rule...
    assert searchr1.parse(AUTOSEARCH_FIG13_SEARCHR1).queries == ["what genre is suits", "what genre is suits"]
    # ...but the second retrieval step repeats the first query (AutoSearch §4.1): [step 1, step 2, answer step].
    assert autosearch.step_validity(AUTOSEARCH_FIG13_SEARCHR1) == [True, False, True]


def test_autosearch_figure_13_reformulated_query_is_not_a_repeat():
    assert searchr1.parse(AUTOSEARCH_FIG13_AUTOSEARCH).queries == ["what genre is suits", "what is the genre of suits"]
    assert autosearch.step_validity(AUTOSEARCH_FIG13_AUTOSEARCH) == [True, True, True]


def test_tfidf_matches_hand_computed_smoothed_idf():
    # Fitted on 2 queries: shared terms have idf ln(3/3)+1 = 1, "the"/"of" ln(3/2)+1. Cosine = 4 / (2 * sqrt(4 + 2
    # idf^2)) because the first query is 4 shared terms (norm 2) and the dot product counts those 4 terms.
    idf = math.log(3 / 2) + 1
    expected = 4 / (2 * math.sqrt(4 + 2 * idf**2))
    v = tfidf_vectors(["what genre is suits", "what is the genre of suits"])
    assert cosine(v[0], v[1]) == pytest.approx(expected)
    assert expected < 0.8  # below AutoSearch's repeat threshold


def test_repeated_queries_rules():
    assert repeated_queries([]) == []
    assert repeated_queries(["a", " A "]) == [False, True]  # identical after strip/lower, even without tokens
    assert repeated_queries(["Suits TV genre", "suits tv genre?"]) == [False, True]  # case and punctuation ignored
    assert repeated_queries(["x y", "u v"]) == [False, False]  # single-character words are not tokens
    assert repeated_queries(["one two", "three four", "one two"]) == [False, False, True]  # any earlier query
    assert repeated_queries(["a b c", "a b c d"], threshold=0.99) == [False, False]


INVALID = {
    "no_think_first": "<search>q1</search><information>d1</information><think>t2</think><answer>a</answer>",
    "no_answer": BASE.replace("<answer>a</answer>", ""),
    "search_without_information": "<think>t1</think><search>q1</search><think>t2</think><answer>a</answer>",
    "information_without_search": "<think>t1</think><information>d1</information><think>t2</think><answer>a</answer>",
    "answer_without_think_after_information": BASE.replace("<think>t2</think>\n", ""),
    "two_answers": BASE + "<answer>b</answer>",
    "trailing_text": BASE + " done",
    "stray_text_between_blocks": BASE.replace("</think>\n<search>", "</think> then <search>"),
    "nested_tag_in_think": BASE.replace("<think>t1</think>", "<think>t1 <answer>x</answer></think>"),
    "unclosed_think": BASE.replace("</think>\n<search>", "\n<search>"),
    "two_consecutive_thinks": BASE.replace("<think>t1</think>", "<think>t0</think><think>t1</think>"),
}


@pytest.mark.parametrize("text", list(INVALID.values()), ids=list(INVALID))
def test_structure_rule_rejects(text):
    assert not searchr1.check_format(text)


def test_structure_rule_accepts():
    assert searchr1.check_format(BASE)
    assert searchr1.check_format("<think>t</think><answer>a</answer>")  # no retrieval
    assert searchr1.check_format("<think></think><answer></answer>")  # Search-R1's rule has no content check
    assert searchr1.check_format(BASE.replace("d1", "<answer>x</answer> </think>"))  # information is opaque


def test_search_p1_figure_10_search_r1_side_is_not_search_r1_format():
    # Printed with <result> observations and "Final:" instead of <answer>.
    assert not searchr1.check_format(SEARCHP1_FIG10_SEARCHR1)
    assert searchr1.parse(SEARCHP1_FIG10_SEARCHR1).answer is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE, [True, True]),
        ("<think>t</think><answer>a</answer>", [True]),  # T = 1: only the answer step
        ("<answer>a</answer>", [True]),  # forced answer: only the answer's format counts at t = T
        (BASE.replace("<think>t1</think>\n", ""), [False, True]),  # retrieval step without <think>
        (BASE.replace("<search>q1</search>", "<search>  </search>"), [False, True]),  # blank query
        (BASE.replace("</think>\n<search>", "</think> so <search>"), [False, True]),  # stray text
        (BASE.replace("<answer>a</answer>", "<answer> </answer>"), [True, False]),  # blank answer
        (BASE.replace("<answer>a</answer>", "<answer>a</answer> ok"), [True, False]),  # text after the answer
        (BASE.replace("<answer>a</answer>", "<answer>a</answer><answer>b</answer>"), [True, False]),
        (BASE.replace("<answer>a</answer>", ""), [True, False]),  # no answer
        (BASE + "<information>d2</information>", [True, False, False]),  # information without a search
    ],
)
def test_step_validity(text, expected):
    assert autosearch.step_validity(text) == expected


def test_step_validity_options():
    no_think = BASE.replace("<think>t1</think>\n", "")
    assert autosearch.step_validity(no_think, require_think=False) == [True, True]
    near = BASE.replace("q1", "genre of suits tv")
    # Cosine of the two queries is 3 / (3 + idf^2) with idf = ln(3/2) + 1, about 0.60: valid at 0.8, a repeat at 0.5.
    text = near.replace(
        "<think>t2</think>",
        "<think>t2</think><search>genre of suits show</search><information>d</information><think>t3</think>",
    )
    assert autosearch.step_validity(text) == [True, True, True]
    assert autosearch.step_validity(text, repeat_threshold=0.5) == [True, False, True]


def test_retrieval_step_prefixes_end_at_each_observation():
    prefixes = autosearch.retrieval_step_prefixes(AUTOSEARCH_FIG13_AUTOSEARCH)
    assert len(prefixes) == 2 and all(p.endswith("</information>") for p in prefixes)
    assert AUTOSEARCH_FIG13_AUTOSEARCH.startswith(prefixes[1]) and prefixes[1].startswith(prefixes[0])


def test_observations_never_yield_queries_or_answers():
    text = BASE.replace("d1", "<search>fake</search> <answer>fake</answer>")
    t = searchr1.parse(text)
    assert t.queries == ["q1"] and t.answer == "a"
    unclosed = "<think>t</think><search>q</search><information>doc <answer>fake</answer>"
    assert searchr1.parse(unclosed).answer is None


def test_search_inside_think_is_still_the_executed_query():
    # The environment stops at any </search>; parse reports the query it ran.
    text = "<think>let me <search>q</search>\n\n<information>d</information>\n\n ok</think><answer>a</answer>"
    t = searchr1.parse(text)
    assert t.queries == ["q"] and t.steps[0].observation == "d" and t.answer == "a"


def test_action_spec():
    spec = searchr1.ACTION_SPEC
    assert spec.stop == ("</search>", "</answer>")
    assert spec.extract_action("<think>x</think>\n<search> who wrote Hamlet </search>").content == "who wrote Hamlet"
    assert spec.extract_action("<search>a</search> and <search>b</search>\n").content == "b"  # LastBetween
    answer = spec.extract_action("<think>x</think><answer> Paris </answer>")
    assert (answer.kind, answer.content) == ("answer", "Paris")
    assert spec.extract_action("<think>x</think><answer>Paris</answer>.").content == "Paris"  # trailing period
    assert spec.extract_action("<think>unfinished") is None
    assert spec.extract_action("</search>") is None  # a closing tag alone is no action
    hits = [
        {"document": {"id": "1", "contents": '"Suits (American TV series)"\nSuits is a legal drama.'}, "score": 0.9},
        {"id": "2", "contents": "Genre\nGenre is any form of communication."},
    ]
    assert spec.render_observation(hits) == (
        '\n\n<information>Doc 1(Title: "Suits (American TV series)") Suits is a legal drama.\n'
        "Doc 2(Title: Genre) Genre is any form of communication.</information>\n\n"
    )
    assert spec.force_answer_prefix == "<answer>"


def test_prompts():
    user = searchr1.PROMPT.format("who wrote Hamlet?")
    assert user.startswith("Answer the given question. You must conduct reasoning inside <think> and </think>")
    assert user.endswith("Question: who wrote Hamlet?\n")
    inter = autosearch.INTERMEDIATE_ANSWER_PROMPT
    assert inter.slots == ("question", "trajectory")
    filled = inter.format("What genre is Suits?", trajectory="<think>x</think>")
    assert "Search trajectory: Question: What genre is Suits?. Below are your previous" in filled
    assert filled.endswith("retrieved information: <think>x</think>.")
    with pytest.raises(ValueError, match="trajectory"):
        inter.format("q")
    assert "search exactly four times" in autosearch.fixed_depth_prompt(4).user
    assert "<search>" not in autosearch.fixed_depth_prompt(0).user  # Figure 8: answer without retrieval
    with pytest.raises(ValueError, match="0-4"):
        autosearch.fixed_depth_prompt(5)
