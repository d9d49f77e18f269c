"""ReasonRAG staged workflow (Algorithm 1, Figures 10-13)."""

import pytest

from agentrag_verl.methods.reasonrag import grammar as reasonrag

from .paper_examples import REASONRAG_FIG10


def test_figure_10_parses_into_three_rounds_and_the_answer():
    assert reasonrag.check_format(REASONRAG_FIG10)
    t = reasonrag.parse(REASONRAG_FIG10)
    assert [s.kind for s in t.steps] == ["search"] * 3  # no prose precedes "So the answer is"
    assert t.queries == [
        "What is the release year of Il Coraggio and who directed it?",
        "Who directed Shark Monroe and when was the director’s death?",
        "When did Domenico Paolella die?",
    ]
    assert [s.evidence for s in t.steps] == [
        "Il Coraggio is a 1955 Italian comedy film directed by Domenico Paolella.",
        "William S. Hart directed Shark Monroe, which was released in 1918. William S. Hart died on December 3, 1945.",
        "Domenico Paolella died on 7 October 2002.",
    ]
    assert all(s.reasoning is None and s.observation is None for s in t.steps)
    assert t.answer == "Il Coraggio"
    for step in t.steps:
        for name, (start, end) in step.spans.items():
            assert REASONRAG_FIG10[start:end] == getattr(step, name)


def test_prose_no_evidence_and_final_reasoning():
    text = (
        "Il Coraggio is a film; I need its director. So the next query is <query>Il Coraggio director</query> "
        "<evidence>None</evidence> The documents were unhelpful; answering from memory. "
        "So the answer is <answer>Domenico Paolella</answer>"
    )
    assert reasonrag.check_format(text)
    t = reasonrag.parse(text)
    assert [(s.kind, s.reasoning, s.query, s.evidence) for s in t.steps] == [
        ("search", "Il Coraggio is a film; I need its director.", "Il Coraggio director", "None"),
        ("non_search", "The documents were unhelpful; answering from memory.", None, None),
    ]
    assert t.answer == "Domenico Paolella"


INVALID = {
    "query_without_phrase": REASONRAG_FIG10.replace("So the next query is <query>When", "<query>When"),
    "answer_without_phrase": REASONRAG_FIG10.replace("So the answer is ", ""),
    "blank_query": REASONRAG_FIG10.replace("When did Domenico Paolella die?", " "),
    "blank_evidence": REASONRAG_FIG10.replace("Domenico Paolella died on 7 October 2002. ", ""),
    "blank_answer": REASONRAG_FIG10.replace("Il Coraggio</answer>", "</answer>"),
    "missing_grounding": REASONRAG_FIG10.replace(
        "Based on the query, the relevant evidence is <evidence>Domenico Paolella died on 7 October 2002. </evidence> ",
        "",
    ),
    "grounding_first": "<evidence>None</evidence> So the answer is <answer>a</answer>",
    "no_answer": REASONRAG_FIG10.replace(" So the answer is <answer>Il Coraggio</answer>", ""),
    "text_after_answer": REASONRAG_FIG10 + " Thanks.",
    "tag_in_prose": REASONRAG_FIG10.replace("So the answer is", "<query>x</query> So the answer is"),
}


@pytest.mark.parametrize("text", list(INVALID.values()), ids=list(INVALID))
def test_structure_rejects(text):
    assert not reasonrag.check_format(text)


def test_next_stage_follows_algorithm_1():
    assert reasonrag.next_stage("So the next query is <query>q</query>") == "grounding"
    assert reasonrag.next_stage("So the answer is <answer>a</answer>") == "terminal"
    assert reasonrag.next_stage("Based on the query, the relevant evidence is <evidence>e</evidence>") == "reasoning"
    assert reasonrag.next_stage("I am not sure.") is None


def test_stage_messages_and_transcript():
    thoughts = ["So the next query is <query>q</query>", "<evidence>None</evidence>"]
    assert reasonrag.transcript(thoughts) == "So the next query is <query>q</query> <evidence>None</evidence>"
    first = reasonrag.reasoning_messages("Which film?")
    assert first[0]["content"].startswith("You are a question-answering assistant with access to a retrieval tool.")
    assert first[1]["content"] == "Question: Which film?"
    later = reasonrag.reasoning_messages("Which film?", thoughts)
    assert later[1]["content"] == f"Question: Which film?\nPrevious Thoughts: {reasonrag.transcript(thoughts)}"
    grounding = reasonrag.grounding_messages("Which film?", thoughts[:1], [{"contents": '"Il Coraggio"\nA film.'}])
    assert grounding[0]["content"].startswith("You are an information retrieval assistant.")
    assert grounding[1]["content"].endswith('Reference: <reference>Doc 1(Title: "Il Coraggio") A film.</reference>')
    # Figure 12's "{answer_format}" placeholder is filled with the authors' default.
    assert 'If generating an answer: "So the answer is <answer>answer</answer>"' in first[0]["content"]


def test_action_spec():
    spec = reasonrag.ACTION_SPEC
    assert set(spec.stop) == {"</query>", "</answer>", "</evidence>"}
    assert spec.extract_action("Need X. So the next query is <query> X founder </query>").content == "X founder"
    assert spec.extract_action("So the answer is <answer>Il Coraggio</answer>").kind == "answer"
    assert spec.extract_action("Based on the query, the relevant evidence is <evidence>e</evidence>") is None
    assert spec.force_answer_prefix == "So the answer is <answer>"
    assert reasonrag.check_format(
        "So the next query is <query>q</query> <evidence>e</evidence> " + spec.force_answer_prefix + "a</answer>"
    )
