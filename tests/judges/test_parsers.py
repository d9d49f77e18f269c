"""The shared parsing helpers, and the contract every paper's parser keeps: a value or :class:`ParseError`, nothing
else (HiPRAG Figs 5-6, multi-stage B.4, ReasonRAG Fig 14, Search-P1 Figs 8-9; each parser's own cases are in
``tests/methods/<paper>/test_judge.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrag_verl.judges.parsers import ParseError, check_reply, loads_lenient, strip_reasoning
from agentrag_verl.methods.hiprag.judge import parse_true_false
from agentrag_verl.methods.multistage.judge import parse_yes_no
from agentrag_verl.methods.reasonrag.judge import parse_score
from agentrag_verl.methods.searchp1.judge import parse_evaluation as parse_searchp1_evaluation
from agentrag_verl.methods.searchp1.judge import parse_planner as parse_searchp1_planner


def test_strip_reasoning_drops_think_blocks_and_a_cut_reasoning():
    assert strip_reasoning("<think>a</think>YES<THINK>b</THINK>") == "YES"
    assert strip_reasoning("  <think>cut before the verdict") == ""


def test_check_reply_accepts_text_only():
    assert check_reply("") == ""
    with pytest.raises(ParseError, match="NoneType"):
        check_reply(None)


def test_parsers_reject_non_text():
    for parser in (parse_true_false, parse_yes_no, parse_score, parse_searchp1_evaluation, parse_searchp1_planner):
        with pytest.raises(ParseError):
            parser(None)


def test_loads_lenient_maps_python_literals_outside_strings():
    assert loads_lenient("{'ok': True, 'none': None, 'text': 'True story'}") == {
        "ok": True,
        "none": None,
        "text": "True story",
    }


# ----------------------------------------------------------------------------------------------- contract

JUDGE_ALPHABET = st.sampled_from(list("{}[]\"',:/*#\\ \n0123456789.-abTrueFalsNoYESYnscoreiplan_<>") + ["```"])


@given(st.one_of(st.text(max_size=200), st.lists(JUDGE_ALPHABET, max_size=120).map("".join)))
def test_parsers_fail_only_with_parse_error(text):
    """Whatever the judge says, a parser returns a value or raises ParseError (never another exception)."""
    for parser in (parse_true_false, parse_yes_no, parse_score, parse_searchp1_evaluation, parse_searchp1_planner):
        try:
            parser(text)
        except ParseError:
            pass
