"""benchmarks/learning.py and learning_matrix.py without a run: the paired reward statistic, every design's recipe
and the matrix row of a summary."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_paired_rise_cancels_what_the_questions_contribute():
    """The same questions in both blocks: how easy each question is leaves the paired difference and its SE
    untouched; over steps it is noise."""
    learning = load("learning")
    first = [{"easy": [0.9, 0.9], "hard": [0.1, 0.1]}, {"mid": [0.5, 0.5]}]
    last = [{"easy": [1.0, 1.0], "hard": [0.2, 0.2]}, {"mid": [0.6, 0.6]}]
    paired = learning.paired_rise(first, last)
    assert paired["questions"] == 3 and math.isclose(paired["diff"], 0.1) and paired["se"] < 1e-9
    assert paired["pass"]
    # a step of easy questions beside a step of hard ones: the SE over steps is large for the same rise
    _, se_first = learning.mean_se([0.9, 0.1])
    assert se_first == pytest.approx(0.4)
    assert learning.paired_rise([{"a": [1.0]}], [{"b": [1.0]}]) is None  # no shared questions


def test_every_design_runs_an_existing_recipe_script():
    learning = load("learning")
    assert sorted(learning.DESIGNS) == ["autosearch", "hiprag", "multistage", "reasonrag", "searchp1", "searchr1"]
    for design, algos in learning.DESIGNS.items():
        for algo, spec in algos.items():
            for key in ("script", "mcts_script"):
                script = BENCHMARKS.parent / spec.get(key, spec["script"])
                assert script.is_file() and design in script.parts, (design, algo)
    # the papers' algorithms come first (the default): AutoSearch PPO-GAE, multi-stage DAPO
    assert next(iter(learning.DESIGNS["autosearch"])) == "ppo" and next(iter(learning.DESIGNS["multistage"])) == "dapo"


def test_matrix_row():
    matrix = load("learning_matrix")
    summary = {
        "design": "hiprag", "algo": "grpo", "command": "python benchmarks/learning.py --design hiprag",
        "warm": {"n": 190, "cem": [0.67, 0.093], "depth_corpus": [1.01, 0.03], "depth_common": [1.03, 0.07]},
        "after": {"cem": [0.711, 0.09], "depth_corpus": [1.0, 0.0], "depth_common": [0.5, 0.1]},
        "checks": {"reward_rises": {"first5": [0.36, 0.05], "last5": [0.58, 0.05], "diff": 0.22, "se": 0.1,
                                    "pass": True},
                   "cem_holds": {"pass": True}, "logprobs_agree": {"pass": False}},
        "walls": {"total": 3300.0},
    }  # fmt: skip
    cells = matrix.row(summary)
    assert cells[:5] == ["hiprag (grpo)", "190", "67.0 ±9.3", "71.1 ±9.0", "0.360 -> 0.580 (+2.20 SE)"]
    assert cells[6] == "1.03 ±0.07 -> 0.50 ±0.10" and cells[7] == "FAIL: logprobs_agree" and cells[8] == "55 min"


def settings_of(monkeypatch, *argv: str):
    """The pipeline settings ``learning.py ARGV`` runs with (stopped before anything starts)."""
    learning = load("learning")
    monkeypatch.setattr(sys, "argv", ["learning.py", *argv])
    captured = {}

    def stop(settings):
        captured["s"] = settings
        raise SystemExit(0)

    monkeypatch.setattr("agentrag_verl.demo.pipeline.start_services", lambda s, stack: stop(s))
    with pytest.raises(SystemExit):
        learning.main()
    return captured["s"]


@pytest.mark.parametrize(
    ("design", "algo", "sizes"),
    [("multistage", "dapo", (6, 4, 4)), ("searchp1", "grpo", (6, 4, 4)), ("searchr1", "ppo", (15, 1, 10))],
)
def test_learning_stage_settings_follow_the_design(design, algo, sizes, tmp_path, monkeypatch):
    """A design other than the demo's gets its own format, prompt and folder, and its recipe's knobs; PPO keeps its
    recipes' one response per prompt, a pass over the fixed question set every 2 steps, and micro-batches of 1
    (the critic's memory: learning.PPO_MICRO_BATCH); multi-stage's long trajectories take micro-batches of 2."""
    from agentrag_verl.demo.pipeline import PipelineSettings, grpo_overrides, recipe_script

    s: PipelineSettings = settings_of(monkeypatch, "--design", design, "--algo", algo, "--steps", "20")
    assert s.format == design and s.prompt_name is None and s.work_dir.parts[-2:] == ("learning", design)
    assert recipe_script(s).parent.name == design and recipe_script(s).name == f"run_{algo}.sh"
    assert (s.grpo_batch_size, s.grpo_rollout_n, s.grpo_passes) == sizes
    if design == "multistage":
        assert s.recipe_env == {"STAGE": "switch", "STAGE_SWITCH_STEP": "10"}
        assert "algorithm.filter_groups.enable=true" in grpo_overrides(s)
    assert "data.shuffle=false" in grpo_overrides(s) and s.grpo_kl_coef == 0.0
    # the largest divisor of the step's trajectories within the bound
    micro = {"ppo": 1, "dapo": 2}.get(algo, 4)
    assert f"critic.ppo_micro_batch_size_per_gpu={micro}" in grpo_overrides(s)
    assert f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}" in grpo_overrides(s)


def test_overrides_reach_the_rl_run_last_and_a_malformed_one_is_refused(tmp_path, monkeypatch):
    """``--override`` (repeatable) appends Hydra overrides after the benchmark's own, so they win; one that is not
    ``KEY=VALUE``, or one given to ReasonRAG (no verl run), stops the benchmark with a usage error before anything
    starts."""
    from agentrag_verl.demo.pipeline import grpo_overrides

    argv = ("--design", "searchr1", "--algo", "ppo", "--warmup-ratio", "-1")
    s = settings_of(monkeypatch, *argv, "--override", "critic.ppo_mini_batch_size=3", "--override", "+x.y=1")
    assert grpo_overrides(s)[-2:] == ["critic.ppo_mini_batch_size=3", "+x.y=1"]
    assert not any("lr_warmup_steps_ratio" in o for o in grpo_overrides(s))  # --warmup-ratio -1: the recipe's
    learning = load("learning")
    monkeypatch.setattr("agentrag_verl.demo.pipeline.start_services", lambda s, stack: pytest.fail("started"))
    malformed = [[*argv, "--override", bad] for bad in ("critic.ppo_mini_batch_size", "=3", "+=3")]
    dpo = ["--design", "reasonrag", "--override", "critic.ppo_epochs=2"]  # TRL's DPO: no verl run to override
    for bad in (*malformed, dpo):
        monkeypatch.setattr(sys, "argv", ["learning.py", *bad])
        with pytest.raises(SystemExit) as stopped:
            learning.main()
        assert stopped.value.code == 2


def test_reasonrag_runs_mcts_then_dpo_with_its_recipe_settings(tmp_path, monkeypatch):
    """ReasonRAG: its own warm start and folder, MCTS sized by the flags, the DPO recipe with the CPU's overrides
    and the benchmark's learning rate."""
    s = settings_of(monkeypatch, "--design", "reasonrag", "--mcts-questions", "7", "--mcts-rollouts", "5")
    assert s.format == "reasonrag" and s.work_dir.parts[-2:] == ("learning", "reasonrag")
    assert s.mcts_questions_per_set == 7
    assert s.mcts_args == ["--max-rollouts", "5", "--spre-rollouts", "2", "--max-tokens", "128", "--no-seed"]
    assert s.dpo_args[-2:] == ["--learning_rate", "3e-06"] and "float32" in s.dpo_args
    assert s.dpo_args[s.dpo_args.index("--eval_steps") + 1] == "8" and "--val_size" not in s.dpo_args  # dpo.yaml's


def test_reasonrag_held_out_share_and_eval_steps_reach_the_dpo_recipe(tmp_path, monkeypatch):
    """``--val-size`` and ``--eval-steps`` become TRL's ``--val_size`` and ``--eval_steps`` (one of each); a share
    outside (0, 1) is refused before anything runs."""
    s = settings_of(monkeypatch, "--design", "reasonrag", "--val-size", "0.3", "--eval-steps", "24", "--lr", "1e-5")
    assert s.dpo_args.count("--eval_steps") == 1 and s.dpo_args[s.dpo_args.index("--eval_steps") + 1] == "24"
    assert s.dpo_args[-4:] == ["--learning_rate", "1e-05", "--val_size", "0.3"]
    learning = load("learning")
    monkeypatch.setattr("agentrag_verl.demo.pipeline.start_services", lambda s, stack: pytest.fail("started"))
    for bad in (["--val-size", "1"], ["--val-size", "0"], ["--eval-steps", "0"]):
        monkeypatch.setattr(sys, "argv", ["learning.py", "--design", "reasonrag", *bad])
        with pytest.raises(SystemExit) as stopped:
            learning.main()
        assert stopped.value.code == 2


def test_margin_rise_needs_more_than_noise():
    learning = load("learning")
    flat = [{"rewards/margins": m} for m in [0.1, -0.1, 0.2, 0.0, 0.1, 0.15, -0.05, 0.1, 0.05, 0.2]]
    rise = learning.margin_rise(flat)
    assert rise["points"] == 10 and not rise["pass"] and abs(rise["diff"] - 0.03) < 1e-9
    assert learning.margin_rise(flat[:9]) is None
    matrix = load("learning_matrix")
    summary = {
        "design": "reasonrag", "algo": "dpo", "command": "python benchmarks/learning.py --design reasonrag",
        "warm": {"cem": [0.5, 0.1]}, "after": {"cem": [0.52, 0.1]}, "walls": {"total": 3000.0},
        "checks": {"pairs_enough": {"pass": True}, "margin_rises": {**rise, "pass": True}, "cem_holds": {"pass": True}},
    }  # fmt: skip
    assert matrix.row(summary)[4].startswith("margin 0.060 -> 0.090")
    assert matrix.row(summary)[1] == "-"  # a summary without the question count


def test_dpo_margin_is_decided_per_held_out_pair(tmp_path, monkeypatch, capsys):
    """ReasonRAG's margin check is paired by held-out pair (SE over pairs), not read off the training batches'
    margins (here +-0.2 around no rise) nor off TRL's evaluation curve: a smooth curve of means from 0 to 0.1 passes
    a first-5-against-last-5 test between points, while the pairs' own margins (run 3's figures) vary too much."""
    learning, matrix = load("learning"), load("learning_matrix")
    monkeypatch.setattr(learning, "print_held_out", lambda warm, after: None)
    noisy = [0.2, -0.2, 0.1, -0.1, 0.2, -0.2, 0.1, -0.1, 0.2, -0.2]
    history = [{"step": 2 * i + 2, "loss": 0.69, "rewards/margins": m} for i, m in enumerate(noisy)]
    history += [{"step": 8 * i, "eval_loss": 0.69, "eval_rewards/margins": 0.01 * i} for i in range(11)]
    common = {"design": "reasonrag", "algo": "dpo", "command": "c", "warm": {"cem": [0.5, 0.1]},
              "after": {"cem": [0.5, 0.1]}, "walls": {"total": 60.0}}  # fmt: skip
    s = type("S", (), {"work_dir": tmp_path, "dpo_args": [], "mcts_args": []})()
    mcts = {"n_pairs": 213, "questions": 210}

    def report(heldout):
        code = learning.report_dpo(s, "reasonrag_dpo", common, mcts, {"log_history": history, "heldout": heldout})
        return code, json.loads((tmp_path / "learning_reasonrag_dpo.json").read_text())

    code, out = report({"n": 23, "mean": 0.0463, "se": 0.0551, "accuracy": 13 / 23})
    rise = out["checks"]["margin_rises"]
    assert code == 1 and not rise["pass"] and rise["pairs"] == 23 and rise["before"] == 0.0
    assert out["eval_margin_curve"]["pass"] and out["eval_margin_curve"]["diff"] == pytest.approx(0.06)
    assert out["train_margin"]["points"] == 10 and not out["train_margin"]["pass"]
    assert "ranked right 57%" in capsys.readouterr().out
    assert matrix.row(out)[4] == "held-out margin 0 -> 0.046 (+0.84 SE, 23 pairs)"
    code, out = report({"n": 23, "mean": 0.3, "se": 0.05, "accuracy": 0.9})
    assert code == 0 and out["checks"]["margin_rises"]["pass"]
    code, out = report(None)  # the script scored no pair: the check fails and says why, the row still prints
    assert code == 1 and "SCORE_HELDOUT" in out["checks"]["margin_rises"]["why"] and matrix.row(out)[4] == "-"


def test_reward_rise_pairs_over_questions_on_the_fixed_set():
    """Check 1 over 10 steps: the same two questions in the first and the last 5 steps, each up by 0.5 or 0.3."""
    learning = load("learning")
    rewards = [0.2, 0.3, 0.25, 0.2, 0.3, 0.6, 0.55, 0.7, 0.6, 0.65]
    searches = {step: {"rewards_by_question": {"a": [0.0 if step <= 5 else 0.5], "b": [0.4 if step <= 5 else 0.7]}}
                for step in range(1, 11)}  # fmt: skip
    paired = learning.reward_rise(rewards, searches, paired=True)
    assert paired["paired"]["questions"] == 2 and abs(paired["diff_over_steps"] - 0.37) < 1e-9
    assert abs(paired["diff"] - 0.4) < 1e-9 and abs(paired["se"] - 0.1) < 1e-9 and paired["pass"]  # 0.4 > 2 x 0.1
    over_steps = learning.reward_rise(rewards, searches, paired=False)
    assert over_steps["se"] == over_steps["se_over_steps"] and over_steps["pass"] == over_steps["pass_over_steps"]
    assert learning.reward_rise(rewards[:9], searches, paired=True) is None
    # the matrix prints the step means and the verdict's paired figures, even where they part (dynamic sampling)
    summary = {"design": "multistage", "algo": "dapo", "command": "c", "warm": {}, "after": {}, "walls": {"total": 60},
               "checks": {"reward_rises": {**paired, "paired": {**paired["paired"], "diff": -0.1}}}}  # fmt: skip
    assert load("learning_matrix").row(summary)[4] == "0.250 -> 0.620 (paired -0.100, -1.00 SE)"


def test_a_stage_switch_run_compares_its_steps_on_the_last_stages_scale():
    """Multi-stage with ``STAGE=switch``: stage 2 pays β·RC less for every searching trajectory (Eq. r_a), so a
    policy that did not change would fall 0.3 per search across the switch as scored. On stage 2's scale it holds,
    and a policy that answers as well with one search fewer rises by β."""
    import yaml

    from agentrag_verl.methods.multistage.reward import restage

    learning = load("learning")
    # two questions, one trajectory each: "a" right after 1 search (stage 1: 1 + 0 + 1), "b" wrong after 2 (stage 1:
    # -1 + 0.6 - 0.1 + 1); from step 6 (the switch) the same trajectories score 1.7 and -0.1 - 1 + 1 = -0.1
    same = {
        step: {
            "rewards_by_question": {"a": [2.0 if step < 6 else 1.7], "b": [0.5 if step < 6 else -0.1]},
            "searches_by_question": {"a": [1], "b": [2]},
        }
        for step in range(1, 11)
    }
    rescored = learning.on_last_stage(same, switch_step=6)
    assert all(rescored[k]["rewards_by_question"] == {"a": [1.7], "b": [-0.1]} for k in rescored)
    means = [0.8] * 10
    assert learning.reward_rise(means, rescored, paired=True)["diff"] == pytest.approx(0.0)
    as_scored = learning.reward_rise([1.25] * 5 + [0.8] * 5, same, paired=True)
    assert as_scored["paired"]["diff"] == pytest.approx(-0.45)  # the switch alone: -0.3 and -0.6
    # after the switch "a" is answered right without its search: 1 + 0 + 1 = 2.0 in stage 2, a rise of β·RC = 0.3
    fewer = {k: {**r, "rewards_by_question": {**r["rewards_by_question"], "a": [2.0]}, "searches_by_question": {
        "a": [0], "b": [2]}} if k >= 6 else r for k, r in same.items()}  # fmt: skip
    paired = learning.reward_rise(means, learning.on_last_stage(fewer, 6), paired=True)["paired"]
    assert paired["diff"] == pytest.approx(0.15)  # (0.3 + 0) / 2 questions
    # the β it rescores with is the recipe's
    recipe = yaml.safe_load((BENCHMARKS.parent / "recipes/multistage/config/multistage_common.yaml").read_text())
    assert restage(0.0, 1, 1, 2) == -recipe["reward"]["reward_kwargs"]["beta"]


def test_a_dynamic_sampling_run_is_checked_on_every_group_it_generated():
    """DAPO evicts the groups whose responses all got the same reward, so the questions a policy learned to answer
    right every time leave its training batch. Over the batch, the last steps lack them and the rise is not seen;
    over every group generated (the batch and the evicted groups, as ``rollout_searches(evicted=True)`` reads
    them) it is: questions a-c go from one right answer in two to two in two, d stays at one in two."""
    learning = load("learning")
    mixed, right = [0.0, 1.0], [1.0, 1.0]
    batch = {k: {"rewards_by_question": {q: mixed for q in ("abcd" if k <= 5 else "d")}} for k in range(1, 11)}
    generated = {k: {"rewards_by_question": {q: mixed if k <= 5 or q == "d" else right for q in "abcd"}}
                 for k in range(1, 11)}  # fmt: skip
    assert learning.step_means(batch) == learning.step_means(generated)[:5] + [0.5] * 5
    assert not learning.rise_over(batch, learning.step_means(batch), None, paired=True)["pass"]
    rise = learning.rise_over(generated, learning.step_means(generated), None, paired=True)
    assert rise["paired"]["questions"] == 4 and rise["diff"] == pytest.approx(0.375) and rise["pass"]
    assert (rise["first5"][0], rise["last5"][0]) == (0.5, pytest.approx(0.875))


def test_reanswer_mode_reaches_the_rl_stage_and_the_evals(monkeypatch):
    """``--reanswer-mode closed_book`` sets the agent-loop option in the RL overrides and the evals' loop options,
    with room for the no-search path; the paper's mode adds nothing, so runs cached under it keep their keys."""
    from agentrag_verl.demo.pipeline import grpo_overrides

    key = "++actor_rollout_ref.rollout.custom.agentrag.reanswer_mode"
    paper = settings_of(monkeypatch, "--design", "hiprag")
    assert paper.reanswer_options == {} and not any(o.startswith(key) for o in grpo_overrides(paper))
    s = settings_of(monkeypatch, "--design", "hiprag", "--reanswer-mode", "closed_book")
    assert f"{key}=closed_book" in grpo_overrides(s)
    assert s.reanswer_options == {"reanswer_mode": "closed_book"} and s.reanswer_max_tokens == 96
