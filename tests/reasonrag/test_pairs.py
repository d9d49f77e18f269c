"""RAG-ProGuide pairs: sibling pairs, the gap and identical-text filters, the TRL record layout, Table 1 stats."""

from __future__ import annotations

import pytest

from agentrag_verl.methods.reasonrag import grammar as reasonrag
from agentrag_verl.methods.reasonrag.pairs import PairConfig, build_pairs, dataset_statistics, statistics_markdown
from agentrag_verl.methods.reasonrag.tree import Tree, classify_step

Q = "So the next query is <query>{}</query>"
ANS = "So the answer is <answer>{}</answer>"
DOCS = [{"id": "10", "contents": '"Marrow & Tilde"\nFounded in 1934 by Orla Brennick.'}]


def tree_with(children: list[tuple[str, float | None]], stage: str = "reasoning", answered: bool = True) -> Tree:
    """A root (or, for stage 'grounding', a query node) whose children are the given (text, reward). A child that is
    not itself an answer gets one SPRE rollout that ended in an answer when ``answered`` (its branch then yields a
    final answer, §2.2.3), else one that did not."""
    tree = Tree.new("When was Marrow & Tilde founded?", ["1934"])
    parent = tree.root
    if stage == "grounding":
        parent = tree.add_child(tree.root, stage="grounding", text=Q.format("Marrow & Tilde"), action="query")
        parent.docs = DOCS
    for text, reward in children:
        action, content = classify_step(parent.stage, text)
        child = tree.add_child(parent, stage="terminal", text=text, action=action, content=content)
        child.reward, child.visits = reward, 1
        if action != "answer":
            child.rollouts = [{"answer": "1934" if answered else None, "steps": 3, "f1": 1.0, "value": 0.7}]
    return tree


def test_chosen_is_the_higher_value_and_the_record_is_trl_ready():
    tree = tree_with([(ANS.format("1950"), 0.1), (Q.format("Marrow & Tilde founded"), 0.6)])
    (pair,) = build_pairs(tree, question_id="nq/7", source="nq")
    assert pair["prompt"] == reasonrag.reasoning_messages(tree.question, [])
    assert pair["chosen"] == [{"role": "assistant", "content": Q.format("Marrow & Tilde founded")}]
    assert pair["rejected"] == [{"role": "assistant", "content": ANS.format("1950")}]
    assert (pair["chosen_value"], pair["rejected_value"], pair["gap"]) == pytest.approx((0.6, 0.1, 0.5))
    assert (pair["chosen_action"], pair["rejected_action"], pair["stage"], pair["depth"]) == (
        "query",
        "answer",
        "reasoning",
        1,
    )
    assert (pair["question_id"], pair["source"], pair["node_ids"]) == ("nq/7", "nq", [0, 2, 1])


def test_grounding_pair_prompt_holds_previous_steps_and_passages():
    e1 = "Based on the query, the relevant evidence is <evidence>Founded in 1934.</evidence>"
    tree = tree_with([(e1, 0.9), ("<evidence>None</evidence>", 0.2)], stage="grounding")
    (pair,) = build_pairs(tree)
    assert pair["prompt"] == reasonrag.grounding_messages(tree.question, [Q.format("Marrow & Tilde")], DOCS)
    assert 'Doc 1(Title: "Marrow & Tilde") Founded in 1934' in pair["prompt"][1]["content"]
    assert (pair["chosen_action"], pair["rejected_action"], pair["depth"]) == ("evidence", "evidence", 2)


@pytest.mark.parametrize(
    ("rewards", "kept"),
    [
        ((0.5, 0.495), False),  # gap 0.005 < 0.01
        ((0.11, 0.10), True),  # gap 0.01 (0.00999... in floating point) is kept
        ((0.3, 0.3), False),  # no preference
        ((0.0, 1.0), True),
    ],
)
def test_gap_filter(rewards, kept):
    tree = tree_with([(ANS.format("1934"), rewards[0]), (ANS.format("1950"), rewards[1])])
    assert len(build_pairs(tree)) == int(kept)


def test_identical_text_and_content_filters():
    same_text = tree_with([(ANS.format("1934"), 0.9), (" " + ANS.format("1934") + "\n", 0.2)])
    assert build_pairs(same_text) == [] and build_pairs(same_text, PairConfig(distinct="text")) == []
    # Same query, different prose: no preference between the actions (authors' rule) unless distinct="text".
    prose = tree_with([("Search. " + Q.format("Orla Brennick"), 0.9), (Q.format("orla brennick"), 0.2)])
    assert build_pairs(prose) == []
    assert len(build_pairs(prose, PairConfig(distinct="text"))) == 1
    # Same content but different action types is a real choice (answer now vs. search).
    mixed = tree_with([(ANS.format("Orla Brennick"), 0.9), (Q.format("Orla Brennick"), 0.2)])
    assert len(build_pairs(mixed)) == 1


def test_malformed_steps_only_as_rejected():
    keep = PairConfig(prune_unanswered=False)
    good_over_bad = tree_with([(ANS.format("1934"), 0.8), ("I am not sure.", 0.0)], answered=False)
    (pair,) = build_pairs(good_over_bad, keep)
    assert (pair["chosen_action"], pair["rejected_action"]) == ("answer", "invalid")
    bad_over_good = tree_with([("I am not sure.", 0.8), (ANS.format("1950"), 0.0)], answered=False)
    assert build_pairs(bad_over_good, keep) == []


def test_branches_without_an_answer_are_pruned_by_default():
    # §2.2.3: "we prune all branches that do not yield a final answer". The malformed step ends its branch without
    # an answer, and so does a query whose rollouts never answered: neither is in a pair, on either side.
    stuck = tree_with([(ANS.format("1934"), 0.8), ("I am not sure.", 0.0)], answered=False)
    assert build_pairs(stuck) == []
    dead_query = tree_with([(ANS.format("1950"), 0.1), (Q.format("Marrow & Tilde founded"), 0.6)], answered=False)
    assert build_pairs(dead_query) == [] and len(build_pairs(dead_query, PairConfig(prune_unanswered=False))) == 1
    # A query whose SPRE rollout reached an answer is a live branch: the pair stays.
    live_query = tree_with([(ANS.format("1950"), 0.1), (Q.format("Marrow & Tilde founded"), 0.6)])
    assert [p["chosen_action"] for p in build_pairs(live_query)] == ["query"]


def test_all_sibling_pairs_and_unrated_children():
    tree = tree_with(
        [(ANS.format("1934"), 0.9), (ANS.format("1950"), 0.5), (ANS.format("2001"), 0.1), (ANS.format("x"), None)]
    )
    pairs = build_pairs(tree)
    assert [(p["node_ids"][1], p["node_ids"][2]) for p in pairs] == [(1, 2), (1, 3), (2, 3)]
    assert [p["gap"] for p in pairs] == pytest.approx([0.4, 0.8, 0.4])


def test_min_gap_validation():
    with pytest.raises(ValueError, match="min_gap must be >= 0"):
        PairConfig(min_gap=-0.1)


def test_statistics_like_table1():
    def pair(qid, source, chosen, rejected, depth, gap, text):
        return {
            "question_id": qid,
            "source": source,
            "chosen_action": chosen,
            "rejected_action": rejected,
            "depth": depth,
            "gap": gap,
            "chosen": [{"role": "assistant", "content": text}],
        }

    pairs = [
        pair("hotpotqa/1", "hotpotqa", "query", "answer", 1, 0.05, "So the next query is <query>a b</query>"),
        pair("hotpotqa/1", "hotpotqa", "evidence", "evidence", 2, 0.5, "<evidence>x y z</evidence> w"),
        pair("popqa/3", "popqa", "answer", "invalid", 3, 0.95, "So the answer is <answer>1934</answer>"),
    ]
    stats = dataset_statistics(pairs, questions_searched={"hotpotqa": 3, "popqa": 1})
    assert stats["questions"]["total"] == 2
    assert stats["questions"]["by_source"] == {
        "hotpotqa": {"count": 1, "share": 0.5},
        "popqa": {"count": 1, "share": 0.5},
    }
    assert stats["questions"]["searched"] == 4
    assert stats["pairs"] == 3
    assert {k: v["count"] for k, v in stats["actions"].items()} == {
        "Answer Generation": 1,
        "Evidence Extraction": 1,
        "Query Generation": 1,
    }
    assert stats["pair_types"] == {"A-I": 1, "E-E": 1, "Q-A": 1}
    assert stats["iteration"] == {"count": 3, "avg": 2.0, "min": 1, "median": 2, "max": 3}
    assert (stats["tokens"]["min"], stats["tokens"]["max"], stats["tokens"]["unit"]) == (
        4,
        7,
        "whitespace words",
    )  # 4, 7 and 5 words
    assert stats["reward_gap"]["histogram"]["0.0-0.1"] == 1 and stats["reward_gap"]["histogram"]["0.9-1.0"] == 1
    table = statistics_markdown(stats)
    assert "| - Query Generation | 1 (33.3%) |" in table and "| Avg./Min./Med./Max. Iteration | 2.0/1/2/3 |" in table
    # A tokenizer can count instead of whitespace words.
    assert dataset_statistics(pairs, count_tokens=len)["tokens"]["max"] == len(pairs[0]["chosen"][0]["content"])
