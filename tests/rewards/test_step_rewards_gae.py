"""AutoSearch per-step rewards reach verl's GAE: placement on step-end tokens, never on a mask-0 token."""

from __future__ import annotations

import json

import pytest
import torch

from .conftest import extra_fields, gae_returns, scored_output, tokenize_segments

# A 3-step trajectory: two retrieval steps (each followed by an observation) and the answer step.
SEGMENTS = [
    ("<think>a</think><search>first query</search>", 1),
    ("<information>Doc 1(Title: X) text</information>", 0),
    ("<think>b</think><search>another topic</search>", 1),
    ("<information>Doc 1(Title: Y) more</information>", 0),
    ("<think>c</think><answer>Paris</answer>", 1),
]


async def test_returns_change_exactly_at_step_end_tokens(make_scorer):
    from agentrag_verl.rewards.managers.step_rewards import StepRewardOutput, with_token_rewards

    scorer = make_scorer(["reward.reward_manager.name=autosearch"])
    ids, mask, ends = tokenize_segments(scorer.tokenizer, SEGMENTS)
    response = scorer.tokenizer.decode(ids, skip_special_tokens=True)
    assert response == "".join(t for t, _ in SEGMENTS)
    steps = [
        {"kind": k, "query": None, "doc_ids": [], "end_token_index": e, "retriever_error": None}
        for k, e in zip(["search", "search", "answer"], ends, strict=True)
    ]
    inter = [{"step": 0, "text": "", "answer": "Lyon"}, {"step": 1, "text": "", "answer": "Paris"}]
    fields = extra_fields(steps=steps, intermediate_answers=inter)
    _, results = await scorer.score([{"response": response, "golds": ["Paris"], "fields": fields, "mask": mask}])
    score, info = results[0]

    # The TQ worker's view: the unpadded output after _compute_score, then our replacement.
    replaced = with_token_rewards(scored_output(info, mask, score, response_ids=ids))
    assert isinstance(replaced, StepRewardOutput)
    assert "_agentrag_token_rewards" not in replaced.extra_fields["reward_extra_info"]  # popped before logging
    rm_scores = replaced.as_dict()["rm_scores"]
    expected = [0.15, 1.15, 1.1]  # t_c = 2: efficiency 0.4/2-0.05 each; quality 0, 1; answer 0.1 + EM 1
    nonzero = torch.nonzero(rm_scores).flatten().tolist()
    assert nonzero == ends
    assert rm_scores[ends].tolist() == pytest.approx(expected, abs=1e-5)
    assert all(mask[i] == 1 for i in nonzero)  # no reward on an observation token
    assert float(rm_scores.sum()) == pytest.approx(score)  # GRPO (sums token rewards) gets the sum

    # verl's own GAE with gamma = lam = 1 and zero values: returns = rewards-to-go over model tokens.
    returns = gae_returns(rm_scores, mask)
    model_positions = [i for i, v in enumerate(mask) if v]
    changes = [
        i
        for i, j in zip(model_positions, model_positions[1:] + [None], strict=True)
        if abs(float(returns[i]) - (float(returns[j]) if j is not None else 0.0)) > 1e-9
    ]
    assert changes == ends
    assert float(returns[0]) == pytest.approx(sum(expected), abs=1e-5)


def test_reward_on_observation_token_moves_back():
    from agentrag_verl.rewards.managers.step_rewards import place_token_rewards

    # index 2 is an observation token: the reward moves to token 1, the step's last model token
    assert place_token_rewards([1, 1, 0, 1], [(2, 0.5), (-1, 1.0)]) == [0.0, 0.5, 0.0, 1.0]
    assert place_token_rewards([0, 0, 1], [(0, 0.5)]) == [0.0, 0.0, 0.5]  # none earlier: forward


def test_manager_class_loads_through_verl_fqn_loader():
    from verl.utils.import_utils import load_class_from_fqn

    from agentrag_verl.rewards.managers import step_rewards

    cls = load_class_from_fqn(
        "agentrag_verl.rewards.managers.step_rewards.StepRewardAgentLoopManager", "AgentLoopManager"
    )
    assert cls is step_rewards.StepRewardAgentLoopManager
    assert step_rewards.StepRewardAgentLoopWorker.__ray_actor_class__ is step_rewards.StepRewardAgentLoopWorkerImpl


def test_fallback_without_agent_fields_puts_everything_last():
    from agentrag_verl.agent_loops.steps import step_positions

    assert step_positions({}, 2) == ([-1, -1, -1], True)
    assert json.loads(json.dumps([[-1, 0.5]])) == [[-1, 0.5]]


@pytest.mark.parametrize(
    "raw",
    ["not json", json.dumps({"0": 1.0}), json.dumps([[0, "x"]]), json.dumps([[0.5, 1.0]]), json.dumps([[0, None]])],
)
def test_undecodable_placement_is_counted_and_logged_not_silent(raw, caplog):
    from agentrag_verl.rewards.managers.step_rewards import PLACEMENT_ERRORS_KEY, StepRewardOutput, with_token_rewards

    output = scored_output({"score": 1.5, "_agentrag_token_rewards": raw}, [1, 1, 0, 1])
    with caplog.at_level("WARNING", logger="agentrag_verl.rewards.managers.step_rewards"):
        out = with_token_rewards(output)
    # verl's scalar stays on the last token (the output is not replaced), but the failure is counted and logged
    assert not isinstance(out, StepRewardOutput)
    assert out.extra_fields["reward_extra_info"][PLACEMENT_ERRORS_KEY] == 1.0
    assert "_agentrag_token_rewards" not in out.extra_fields["reward_extra_info"]
    assert any(PLACEMENT_ERRORS_KEY in r.getMessage() for r in caplog.records)


def test_placement_outside_the_response_is_counted_and_placed_last(caplog):
    from agentrag_verl.rewards.managers.step_rewards import PLACEMENT_ERRORS_KEY, with_token_rewards

    # index 9 does not exist in a 4-token response: the reward goes to the last model token and the sample counts
    out = with_token_rewards(scored_output({"_agentrag_token_rewards": json.dumps([[1, 0.5], [9, 1.0]])}, [1, 1, 0, 1]))
    assert out.token_rewards == [0.0, 0.5, 0.0, 1.0]
    assert out.extra_fields["reward_extra_info"][PLACEMENT_ERRORS_KEY] == 1.0
    # a good placement sets the key to 0, so every sample of a per-step run has it (verl stacks identical keys)
    ok = with_token_rewards(scored_output({"_agentrag_token_rewards": json.dumps([[1, 0.5], [-1, 1.0]])}, [1, 1, 0, 1]))
    assert ok.extra_fields["reward_extra_info"][PLACEMENT_ERRORS_KEY] == 0.0 and ok.token_rewards[-1] == 1.0


@pytest.mark.parametrize("module", ["sample", "step_rewards"])
def test_manager_module_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"agentrag_verl.rewards.managers.{module}"))
    assert result.attempted > 0 and result.failed == 0
