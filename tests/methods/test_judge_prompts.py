"""Every method's judge module: its ``>>>`` examples run, and its prompts have exactly the paper's slots and carry the
paper's wording (one distinctive sentence per prompt, whitespace-normalized). Messages, parsers, requests and
fallbacks: ``<method>/test_judge.py``."""

from __future__ import annotations

import doctest
import re

import pytest

from agentrag_verl.formats import get_format
from agentrag_verl.judges.prompts import template_slots
from agentrag_verl.methods.hiprag import judge as hiprag
from agentrag_verl.methods.multistage import judge as multistage
from agentrag_verl.methods.reasonrag import judge as reasonrag
from agentrag_verl.methods.searchp1 import judge as searchp1


@pytest.mark.parametrize("module", [hiprag, multistage, reasonrag, searchp1], ids=lambda m: m.__name__.split(".")[2])
def test_module_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("template", "slots"),
    [
        pytest.param(hiprag.OVER_SEARCH_SYSTEM, [], id="hiprag-over_search_system"),  # Figure 5
        pytest.param(hiprag.OVER_SEARCH_USER, ["statement", "regenerated"], id="hiprag-over_search_user"),
        pytest.param(hiprag.UNDER_SEARCH_SYSTEM, [], id="hiprag-under_search_system"),  # Figure 6
        pytest.param(hiprag.UNDER_SEARCH_USER, ["reasoning", "conclusion"], id="hiprag-under_search_user"),
        pytest.param(get_format("hiprag").prompts["reanswer"].user, ["query"], id="hiprag-reanswer"),
        # B.4 has no question slot
        pytest.param(multistage.JUDGE_TEMPLATE, ["prediction", "references"], id="multistage-judge"),
        pytest.param(reasonrag.PROCESS_SYSTEM, [], id="reasonrag-process_system"),  # Figure 14
        pytest.param(reasonrag.PROCESS_USER, ["question", "golden_answers", "trajectory"], id="reasonrag-process_user"),
        pytest.param(searchp1.PLANNER_TEMPLATE, ["question", "golden_answers"], id="searchp1-planner"),  # Figure 8
        pytest.param(
            searchp1.EVALUATION_TEMPLATE,  # Figure 9, the slot names of the figure
            ["question", "golden_answers", "ref_planner", "ref_reasoning_path", "trajectory"],
            id="searchp1-evaluation",
        ),
    ],
)
def test_templates_have_exactly_the_papers_slots(template, slots):
    assert template_slots(template) == slots


@pytest.mark.parametrize(
    ("template", "phrase"),
    [
        pytest.param(
            hiprag.OVER_SEARCH_SYSTEM,
            "determine if these two statements are semantically equivalent",
            id="hiprag-over_search",
        ),
        pytest.param(
            hiprag.UNDER_SEARCH_SYSTEM,
            "Does the <conclusion></conclusion> logically follow from the",
            id="hiprag-under_search",
        ),
        pytest.param(multistage.JUDGE_TEMPLATE, "Only respond with YES or NO.", id="multistage-judge"),
        pytest.param(
            reasonrag.PROCESS_SYSTEM,
            "Respond briefly and conclude with: So the score is [Score].",
            id="reasonrag-process",
        ),
        pytest.param(searchp1.PLANNER_TEMPLATE, "Focus on the minimal set of queries needed.", id="searchp1-planner"),
        pytest.param(
            searchp1.EVALUATION_TEMPLATE,
            "Output: JSON with planner_score, model_plan_steps, effective_steps_self, effective_steps_ref, "
            "outcome_accuracy_score, outcome_reasoning_score.",
            id="searchp1-evaluation",
        ),
    ],
)
def test_templates_carry_the_papers_wording(template, phrase):
    assert phrase in re.sub(r"\s+", " ", template)
