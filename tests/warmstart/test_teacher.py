"""The scripted stand-in teacher: it plays a row's plan from what a model would see (prompt + trajectory so far)."""

from __future__ import annotations

import pytest

from agentrag_verl.formats import get_format
from agentrag_verl.methods.multistage.reward import is_concise, search_reward
from agentrag_verl.warmstart.teacher import GIVE_UP_ANSWER, ScriptedTeacher, plan_from_row
from tests.warmstart.conftest import ROWS

ROW = {r["id"]: r for rows in ROWS.values() for r in rows}


def teacher(fmt: str = "hiprag") -> ScriptedTeacher:
    return ScriptedTeacher(fmt, [plan_from_row(r["question"], r["golden_answers"], r) for r in ROW.values()])


def prompt(question: str, fmt: str = "hiprag") -> str:
    messages = get_format(fmt).prompt.messages(question)
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def play(fmt: str, question: str, observations: list[str]) -> str:
    """The whole response the teacher writes when the environment answers each search with the next observation."""
    t, spec = teacher(fmt), get_format(fmt).action_spec
    response = spec.response_prefix or ""  # written by the environment, as the agent loop does
    for obs in [*observations, None]:
        response += t(prompt(question, fmt) + response)
        if obs is None or not response.endswith(spec.search_tags[1]):
            break
        response += spec.observation_template.replace("{docs}", obs)
    return response


MULTI_HOP = ["Caldra ... Its capital is Mérida-Lune.", "Mérida-Lune ... Halvern University."]
"""The passages the environment returns for m0's two hops."""
M0_QUERIES = ["What is the capital of Caldra?", "Which university is in Mérida-Lune?"]


def test_multi_hop_hiprag_is_valid_and_follows_the_hops():
    q = ROW["m0"]["question"]
    response = play("hiprag", q, MULTI_HOP)
    fmt = get_format("hiprag")
    assert fmt.check_format(response) == (1, 2)  # HiPRAG Alg. 2: valid, N = 2 steps (both with a search)
    parsed = fmt.parse(response)
    assert parsed.queries == M0_QUERIES
    assert [s.conclusion for s in parsed.steps] == [
        "The capital of Caldra is Mérida-Lune.",
        "Mérida-Lune is home to Halvern University.",
    ]
    assert parsed.answer == "Halvern University"


def test_common_knowledge_is_answered_without_search():
    response = play("hiprag", ROW["c0"]["question"], [])
    parsed = get_format("hiprag").parse(response)
    assert get_format("hiprag").check_format(response) == (1, 1)
    assert parsed.num_searches == 0 and parsed.answer == "Rome"
    assert parsed.steps[0].conclusion == "The capital of Italy is Rome."


def test_gives_up_when_the_passages_lack_the_answer():
    response = play("hiprag", ROW["s0"]["question"], ["The Velda is a moth of coastal heathland."])
    parsed = get_format("hiprag").parse(response)
    assert parsed.answer == GIVE_UP_ANSWER and parsed.num_searches == 1


@pytest.mark.parametrize("fmt", ["searchr1", "autosearch"])
def test_search_r1_layout(fmt):
    response = play(fmt, ROW["s0"]["question"], ["The Velda is a river about 212 kilometres long."])
    assert get_format(fmt).check_format(response) is True
    parsed = get_format(fmt).parse(response)
    assert parsed.queries == ["How long is the river Velda?"] and parsed.answer == "212 kilometres"


def test_multistage_layout_is_eq6s_structure_with_retrieval_and_without():
    """§3.3 (Eq. 6): ``<think> (<search> <information> <reflect>)+ <answer>`` and ``<think> <reflect> <answer>``.
    Its queries are keywords, which the search reward (Eq. 9) counts concise; the plans' questions it does not."""
    fmt = get_format("multistage")
    response = play("multistage", ROW["m0"]["question"], MULTI_HOP)
    assert fmt.check_format(response) is True
    parsed = fmt.parse(response)
    assert parsed.queries == ["capital Caldra", "university Mérida-Lune"]
    assert all(is_concise(q) for q in parsed.queries) and not any(is_concise(q) for q in M0_QUERIES)
    assert search_reward(parsed.queries[:1]) == 0.0 and search_reward(M0_QUERIES[:1]) == -1.0
    assert [s.reflect for s in parsed.steps] == [
        "The capital of Caldra is Mérida-Lune. Now I need to find the next fact.",
        "Mérida-Lune is home to Halvern University.",
    ]
    assert parsed.answer == "Halvern University"
    direct = play("multistage", ROW["c0"]["question"], [])
    assert fmt.check_format(direct) is True and fmt.parse(direct).num_searches == 0
    assert fmt.parse(direct).answer == "Rome"


def test_searchp1_layout_is_algorithm_3s_full_format():
    """Algorithm 2's environment opens the first ``<reasoning>``; the teacher's searching trajectories are FULL
    (ValidFormat, an answer, a tool call); its direct answers are well-formed but earn no format credit (no tool
    call), as Algorithm 3 reads."""
    from agentrag_verl.methods.searchp1.grammar import FormatLevel

    fmt = get_format("searchp1")
    response = play("searchp1", ROW["m0"]["question"], MULTI_HOP)
    assert response.startswith("<reasoning>I do not know this")
    assert fmt.check_format(response) is FormatLevel.FULL
    parsed = fmt.parse(response)
    assert parsed.queries == M0_QUERIES
    assert parsed.answer == "Halvern University"
    direct = play("searchp1", ROW["c0"]["question"], [])
    assert fmt.is_valid(direct) and fmt.parse(direct).answer == "Rome"
    assert fmt.check_format(direct) is FormatLevel.INVALID


def test_a_question_that_starts_with_another_is_matched_as_itself():
    short = {"question": "What is the capital?", "golden_answers": ["X"], "metadata": {"fact": "It is X."}}
    long_ = {"question": "What is the capital? Of Caldra.", "golden_answers": ["Y"], "metadata": {"fact": "It is Y."}}
    t = ScriptedTeacher("hiprag", [plan_from_row(r["question"], r["golden_answers"], r) for r in (short, long_)])
    assert "<answer>Y</answer>" in t(prompt(long_["question"]))
    assert "<answer>X</answer>" in t(prompt(short["question"]))


def test_unknown_format_and_planless_rows_are_refused(monkeypatch):
    import dataclasses

    import agentrag_verl.registry as registry

    bare = dataclasses.replace(registry.get_method("multistage"), teacher=None)  # a method that declares no script
    monkeypatch.setattr(registry, "get_method", lambda name: bare)
    with pytest.raises(ValueError, match="teacher model"):
        ScriptedTeacher("multistage", [])
    with pytest.raises(ValueError, match="metadata.hops"):
        plan_from_row("Q?", ["a"], {"type": "single-hop"})
