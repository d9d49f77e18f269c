"""The worked example (examples/custom_reward): its recipe composed by Hydra, its manager loaded by verl's loader
from the file path, samples scored through verl's AgentLoopWorker postprocess and reward loop (the integration path
of the built-in managers, tests/rewards/conftest.py), scalar and per-step (rm_scores -> verl's GAE)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.rewards.conftest import Scorer, extra_fields, gae_returns, np_column, scored_output, tokenize_segments
from tests.rewards.test_managers_integration import judge_reply

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_reward"

# HiPRAG trajectory: search (optimal), search (REDUNDANT: over-search judge says yes), non-search (optimal), answer.
# Environment text (context + the injected <conclusion>) has mask 0, as the HiPRAG agent loop appends it.
SEGMENTS = [
    ("<think><step><reasoning>Need the capital.</reasoning><search>capital of France</search>", 1),
    ("<context>Doc 1(Title: Paris) Paris is the capital of France.</context>\n<conclusion>", 0),
    ("Paris is the capital of France</conclusion></step><step><reasoning>Check.</reasoning>"
     "<search>France capital city</search>", 1),
    ("<context>Doc 1(Title: Paris) Paris again.</context>\n<conclusion>", 0),
    ("REDUNDANT Paris again</conclusion></step><step><reasoning>Combine</reasoning>"
     "<conclusion>The answer is Paris</conclusion></step></think><answer>Paris</answer>", 1),
]  # fmt: skip
RECIPE = {"config_dir": EXAMPLE / "config", "config_name": "hiprag_oversearch_gae"}
"""Where :class:`tests.rewards.conftest.Scorer` composes the trainer config: the example's recipe, not plain
``ppo_trainer``."""


@pytest.fixture(scope="module")
def judge_server():
    from agentrag_verl.testing import FakeOpenAIServer

    with FakeOpenAIServer(replies=judge_reply) as server:
        yield server


@pytest.fixture(scope="module")
def scorers(tiny_model_dir, judge_server):
    os.environ["AGENTRAG_EXAMPLE_DIR"] = str(EXAMPLE)  # the recipe's paths, absolute (cwd-independent)
    judge = [
        f"reward.reward_kwargs.judge.base_url={judge_server.base_url}",
        "reward.reward_kwargs.judge.model=fake-model",
        "+reward.reward_kwargs.judge.max_retries=0",
    ]
    try:
        yield {
            "per_step": Scorer(tiny_model_dir, judge, **RECIPE),
            "scalar": Scorer(tiny_model_dir, [*judge, "reward.reward_kwargs.per_step=false"], **RECIPE),
        }
    finally:
        os.environ.pop("AGENTRAG_EXAMPLE_DIR", None)


def sample(tokenizer, golds=("Paris",), inter=("Paris", "Paris")):
    ids, mask, ends = tokenize_segments(tokenizer, SEGMENTS)
    response = tokenizer.decode(ids, skip_special_tokens=True)
    assert response == "".join(t for t, _ in SEGMENTS)
    steps = [
        {"kind": k, "query": q, "doc_ids": [], "end_token_index": e, "retriever_error": None}
        for k, q, e in zip(
            ["search", "search", "answer"], ["capital of France", "France capital city", None], ends, strict=True
        )
    ]
    reanswers = [
        {"step": 0, "query": "capital of France", "text": "Paris"},
        {"step": 1, "query": "France capital city", "text": "Paris"},
    ]
    intermediate = [{"step": i, "text": "", "answer": a} for i, a in enumerate(inter)]
    fields = extra_fields(format="hiprag", steps=steps, reanswers=reanswers, intermediate_answers=intermediate)
    return {"response": response, "golds": list(golds), "fields": fields, "mask": mask}, ends


def test_recipe_loads_the_example_manager_through_verl(scorers):
    manager = scorers["per_step"].manager
    assert type(manager).__name__ == "HipragOverSearchRewardManager"
    assert type(manager).__module__ != "agentrag_verl.rewards.managers"  # loaded from the example's file path
    cfg = scorers["per_step"].config
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("StepRewardAgentLoopManager")
    assert Path(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path) == EXAMPLE / "agent_loops.yaml"
    with pytest.raises(ValueError, match="Unknown reward option"):
        type(manager)(config={"reward": {"reward_kwargs": {"lambda_q": 1}}}, tokenizer=None)


async def test_scalar_variant_values_and_fixed_keys(scorers):
    scorer = scorers["scalar"]
    good, _ = sample(scorer.tokenizer)
    late, _ = sample(scorer.tokenizer, inter=("Lyon", "Paris"))  # t_c = 2: no search after it
    wrong, _ = sample(scorer.tokenizer, golds=("Berlin",), inter=("Lyon", "Lyon"))
    batch, results = await scorer.score([good, late, wrong, {"response": "garbage", "golds": ["x"]}])
    # good: A = F = 1 -> 1.0; steps: search optimal, search over-search (REDUNDANT), non-search optimal -> bonus
    # 0.4 * 2/3; t_c = 1 (first intermediate answer already EM) -> the second search (t = 2 > t_c) costs -0.1
    score, info = results[0]
    assert score == pytest.approx(1.0 + 0.4 * 2 / 3 - 0.1)
    assert (info["hiprag_optimal"], info["hiprag_judged"], info["as_t_c"], info["as_over_search"]) == (2, 3, 1, 1)
    assert "_agentrag_token_rewards" not in info  # scalar variant: the sum on the last token
    assert results[1][0] == pytest.approx(1.0 + 0.4 * 2 / 3)  # t_c = 2 = last search: no penalty
    # wrong answer: no bonus (gate closed, no judge call), format λf = 0.2, no exact intermediate answer -> no penalty
    assert results[2][0] == pytest.approx(0.2) and results[2][1]["judge_requests"] == 0
    assert results[3][0] == 0.0
    keys = {tuple(i) for _, i in results}
    assert len(keys) == 1 and next(iter(keys)) == scorer.manager.keys  # identical keys: verl stacked the batch
    assert np_column(batch, "acc").tolist() == [1.0, 1.0, 0.0, 0.0]


async def test_per_step_variant_reaches_gae_on_step_end_tokens(scorers):
    from agentrag_verl.rewards.managers.step_rewards import StepRewardOutput, with_token_rewards

    scorer = scorers["per_step"]
    good, ends = sample(scorer.tokenizer)
    _, results = await scorer.score([good])
    score, info = results[0]
    placement = json.loads(info["_agentrag_token_rewards"])
    assert sum(r for _, r in placement) == pytest.approx(score)

    # The step-reward worker's view (StepRewardAgentLoopWorkerImpl._agent_loop_postprocess): the placement becomes
    # rm_scores, which the V1 trainer uses as token_level_scores.
    ids = scorer.tokenizer.encode(good["response"], add_special_tokens=False)
    replaced = with_token_rewards(scored_output(info, good["mask"], score, response_ids=ids))
    assert isinstance(replaced, StepRewardOutput)
    rm = replaced.as_dict()["rm_scores"]
    last = ends[-1]
    # the over-search penalty on the second search step's last model token; outcome + format + bonus on the last
    assert torch.nonzero(rm).flatten().tolist() == [ends[1], last]
    assert rm[[ends[1], last]].tolist() == pytest.approx([-0.1, 1.0 + 0.4 * 2 / 3], abs=1e-6)
    # verl's GAE (γ = λ = 1, zero values): the return drops by the penalty right after the penalised step
    returns = gae_returns(rm, good["mask"])
    assert float(returns[0]) == pytest.approx(score, abs=1e-6)
    after = next(i for i in range(ends[1] + 1, len(good["mask"])) if good["mask"][i])  # next model token
    assert float(returns[ends[1]]) - float(returns[after]) == pytest.approx(-0.1, abs=1e-6)


def test_the_documented_command_starts(tiny_model_dir, monkeypatch, tmp_path):
    """The README's command, with a real model folder and data paths, through verl's main_ppo start-up and worker
    checks (``agentrag-verl preflight``), from a working directory that is not the repository."""
    import re
    import shlex

    from agentrag_verl.preflight import check_command

    block = (EXAMPLE / "README.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    command = re.search(r"^python -m verl.trainer.main_ppo .*?(?=^#)", block, re.S | re.M).group(0)
    monkeypatch.setenv("AGENTRAG_EXAMPLE_DIR", str(EXAMPLE))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command.replace("\\\n", " ").replace("$AGENTRAG_EXAMPLE_DIR", str(EXAMPLE)))
    argv = [a.replace("Qwen/Qwen2.5-3B-Instruct", str(tiny_model_dir)).replace("=...", "=data.parquet") for a in argv]
    report = check_command(argv)
    assert report.ok, report.format()
