"""Which training questions the pipeline's warm start trains on: ``train_limit`` per set, then ``demo_limits``; the
SFT file holds exactly their demonstrations, whatever else the writer's cache holds."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

from agentrag_verl.demo.pipeline import PipelineSettings, demo_questions, demos_file, sft_data
from agentrag_verl.eval.data import MINI_WIKI_DIR


def test_demo_limits_cap_sets_after_train_limit(tmp_path):
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=5, demo_limits={"common": 2})
    chosen = demo_questions(s)
    assert {ds: len(qs) for ds, qs in chosen.items()} == {"common": 2, "multi_hop": 5, "single_hop": 5}
    s.train_limit = None
    assert len(demo_questions(s)["common"]) == 2 and len(demo_questions(s)["single_hop"]) > 5


def test_demo_knowledge_keeps_the_common_questions_the_policy_knows(tmp_path):
    """With a knowledge probe's labels (``demo_knowledge``), a common-knowledge question gets a demonstration only
    when the probed policy knows it; the caps apply after; the corpus sets are untouched."""
    import pytest

    from agentrag_verl.demo.pipeline import load_split

    common = load_split(PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR), "train", 12)["common"]

    def label(probe: Path, known: Callable[[int], bool]) -> None:  # a probe's labelled rows of the common set
        (probe / "common").mkdir(parents=True)
        rows = []
        for i, q in enumerate(common):
            row = q.as_row()
            row["metadata"] = {**row["metadata"], "knowledge": {"known": known(i), "rate": 1.0 if known(i) else 0.2}}
            rows.append(row)
        (probe / "common" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    probe = tmp_path / "probe"
    label(probe, lambda i: i % 3 == 0)
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=12, demo_knowledge=str(probe),
                         demo_limits={"common": 3})  # fmt: skip
    chosen = demo_questions(s)
    assert [q.id for q in chosen["common"]] == [common[i].id for i in (0, 3, 6)]  # known: 0, 3, 6, 9; capped at 3
    assert len(chosen["single_hop"]) == 12
    assert not any(q.metadata["metadata"].get("hops") for q in chosen["common"])  # answered directly

    # demo_unknown_searches: after them, the first unknown ones as searched questions (the cap is the known ones')
    searched = demo_questions(dataclasses.replace(s, demo_unknown_searches=2))["common"]
    assert [q.id for q in searched] == [common[i].id for i in (0, 3, 6, 1, 2)]
    assert [q.metadata["metadata"].get("hops") for q in searched[3:]] == [
        [{"query": common[i].question, "answer": common[i].golden_answers[0],
          "fact": common[i].metadata["metadata"]["fact"]}] for i in (1, 2)]  # fmt: skip

    # the RL fixed set of the common questions alternates known and unknown ones among the undemonstrated
    from agentrag_verl.demo.pipeline import rl_questions, rollout_searches

    s.grpo_passes, s.grpo_questions_per_set = 1, 4
    undemonstrated = [q for q in common if q.id not in {c.id for c in chosen["common"]}]
    assert [q.id for q in rl_questions(s, "common", undemonstrated)] == [common[i].id for i in (9, 1, 2, 4)]
    # ... or holds as many known ones as asked (--rl-known), refusing more than are left undemonstrated
    s.grpo_known_per_set = 0
    assert [q.id for q in rl_questions(s, "common", undemonstrated)] == [common[i].id for i in (1, 2, 4, 5)]
    s.grpo_known_per_set = 2
    with pytest.raises(ValueError, match=r"grpo_known_per_set=2: .* 1 known ones .* at most 1"):
        rl_questions(s, "common", undemonstrated)
    s.grpo_known_per_set = None
    assert rl_questions(s, "single_hop", chosen["single_hop"]) == chosen["single_hop"][:4]  # corpus sets: in order
    # ... each set's share of the fixed set may differ (grpo_set_questions): a pass holds their sum
    mix = dataclasses.replace(s, grpo_set_questions={"common": 6, "single_hop": 1})
    assert [q.id for q in rl_questions(mix, "common", undemonstrated)] == [common[i].id for i in (9, 1, 2, 4, 5, 7)]
    assert rl_questions(mix, "single_hop", chosen["single_hop"]) == chosen["single_hop"][:1]
    assert (s.fixed_set_pass, mix.fixed_set_pass) == (12, 11)  # multi_hop keeps grpo_questions_per_set's 4
    # the RL stage reads the labels of the policy it starts from (grpo_knowledge) where given; the demonstrations
    # keep theirs
    label(tmp_path / "probe2", lambda i: i % 2 == 0)  # known: 0, 2, 4, 6, 8, 10
    s2 = dataclasses.replace(s, grpo_knowledge=str(tmp_path / "probe2"))
    assert [q.id for q in demo_questions(s2)["common"]] == [common[i].id for i in (0, 3, 6)]
    assert [q.id for q in rl_questions(s2, "common", undemonstrated)] == [common[i].id for i in (2, 1, 4, 5)]
    # ... and the rollouts' search rates per bucket
    folder = tmp_path / "grpo" / "rollouts"
    folder.mkdir(parents=True)
    single = chosen["single_hop"][0].question
    dump = [(common[9].question, "<search>q</search>"), (common[1].question, "<answer>a</answer>"),
            (single, "<search>q</search>"), (single, "<answer>a</answer>")]  # fmt: skip
    (folder / "1.jsonl").write_text("".join(json.dumps({"input": f"Question: {q}", "output": o, "score": 0.2}) + "\n"
                                            for q, o in dump))  # fmt: skip
    assert rollout_searches(s, "grpo")[0]["searched_by_bucket"] == {
        "known": [1, 1], "common_unknown": [0, 1], "corpus": [1, 2]}  # fmt: skip
    assert rollout_searches(s2, "grpo")[0]["searched_by_bucket"] == {"common_unknown": [1, 2], "corpus": [1, 2]}

    s.demo_knowledge = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="run the knowledge probe first"):
        demo_questions(s)


def test_a_searched_common_question_is_searched_and_concluded_from_its_fact(tmp_path):
    """The scripted teacher plays :func:`searched_common`'s plan as a search demonstration: it searches the question
    itself and, once a passage states the answer, concludes the row's fact and answers; without such a passage it
    gives up (and the writer drops the demonstration)."""
    from agentrag_verl.demo.pipeline import load_split, searched_common
    from agentrag_verl.warmstart.teacher import (
        GIVE_UP_ANSWER,
        REASON_DIRECT,
        REASON_FIRST,
        ScriptedTeacher,
        plan_from_row,
    )

    q = load_split(PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR), "train", 1)["common"][0]
    fact, gold = q.metadata["metadata"]["fact"], q.golden_answers[0]
    direct = plan_from_row(q.question, q.golden_answers, q.metadata)
    plan = plan_from_row(q.question, q.golden_answers, searched_common(q).metadata)
    assert not direct.needs_search and plan.needs_search
    t = ScriptedTeacher("hiprag", [plan])
    opening = t(f"Question: {q.question}\n")
    assert REASON_FIRST in opening and REASON_DIRECT not in opening
    assert opening.endswith(f"<search>{q.question}</search>")
    found = t(f"Question: {q.question}\n{opening}<context>{q.question} The answer is {gold}.</context>")
    assert fact in found and found.endswith(f"<answer>{gold}</answer>")
    missed = t(f"Question: {q.question}\n{opening}<context>Something else entirely.</context>")
    assert missed.endswith(f"<answer>{GIVE_UP_ANSWER}</answer>")


def test_sft_data_is_the_selection_in_writer_order(tmp_path):
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=3, demo_limits={"common": 1})
    everything = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=6)
    cached = [{"dataset": ds, "id": q.id, "kept": True} for ds, qs in demo_questions(everything).items() for q in qs]
    demos_file(s).parent.mkdir(parents=True)
    demos_file(s).write_text("".join(json.dumps(r) + "\n" for r in reversed(cached)))  # an earlier, larger run

    path = sft_data(s)
    got = [(r["dataset"], r["id"]) for r in map(json.loads, path.read_text().splitlines())]
    want = {(ds, q.id) for ds, qs in demo_questions(s).items() for q in qs}
    assert len(got) == len(want) == 7 and set(got) == want
    assert got == [(r["dataset"], r["id"]) for r in reversed(cached) if (r["dataset"], r["id"]) in want]
    stamp = path.stat().st_mtime_ns
    assert sft_data(s) == path and path.stat().st_mtime_ns == stamp  # unchanged selection: the file is not rewritten


def test_rollout_searches_counts_searching_trajectories_per_kind_of_question(tmp_path):
    """verl's rollout dump (one JSON line per trajectory: decoded prompt, response, score) read back per step."""
    from agentrag_verl.demo.pipeline import rollout_searches

    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=2)
    qs = demo_questions(s)
    common, single, multi = qs["common"][0].question, qs["single_hop"][0].question, qs["multi_hop"][1].question

    def line(question: str, response: str, score: float = 0.2) -> str:
        prompt = f"system\nAnswer with steps.\nuser\nQuestion: {question}\nassistant\n"
        return json.dumps({"input": prompt, "output": response, "score": score, "step": 1}) + "\n"

    search = "<think>\n<step>\n<reasoning>r</reasoning>\n<search>q</search><context>d</context>"
    direct = "<think>\n<step>\n<reasoning>r</reasoning>\n<conclusion>c</conclusion>\n</step>\n</think>"
    folder = tmp_path / "grpo_bench" / "rollouts"
    folder.mkdir(parents=True)
    (folder / "1.jsonl").write_text(line(common, search) + line(common, direct) + line(single, search))
    (folder / "2.jsonl").write_text(line(multi, direct) + line(single, direct) + line("not a training one", search))
    (folder / "10.jsonl").write_text(line(common, direct))

    got = rollout_searches(s, "grpo_bench")
    assert [r["step"] for r in got] == [1, 2, 10]  # numeric order, not file-name order
    assert got[0] == {
        "step": 1,
        "trajectories": 3,
        "searched_common": [1, 2],
        "searched_corpus": [1, 1],
        "searches_per_question": {"common": 0.5, "corpus": 1.0},
        "right_common": [0, 0],  # every score 0.2: wrong
        "over_search_common": 0,
        "rewards_by_question": {common: [0.2, 0.2], single: [0.2]},
        "searches_by_question": {common: [1, 0], single: [1]},  # RC as the reward's parse counts it
    }
    assert got[1]["searched_corpus"] == [0, 2] and got[1]["searched_common"] == [0, 0]  # unknown question skipped
    assert got[1]["trajectories"] == 3 and got[2]["searched_common"] == [0, 1]
    assert rollout_searches(s, "no_such_run") == []

    # dynamic sampling's evicted groups (their own dump) join their step's trajectories only when asked for
    (folder / "evicted").mkdir()
    (folder / "evicted" / "2.jsonl").write_text(line(multi, search, 1.0) + line(multi, search, 1.0))
    by_step = {r["step"]: r for r in rollout_searches(s, "grpo_bench", evicted=True)}
    assert by_step[2]["rewards_by_question"] == {multi: [0.2, 1.0, 1.0], single: [0.2]}
    assert by_step[2]["searched_corpus"] == [2, 4] and by_step[1] == got[0]
    assert rollout_searches(s, "grpo_bench")[1] == got[1]

    # HiPRAG scores (λf 0.2, λp 0.4) of common-question trajectories: 1.0 = right, formatted, its one search step
    # judged over-search; 1.4 = right with the full bonus; 0.8 = right without format; 0.2 = wrong
    (folder / "11.jsonl").write_text(
        line(common, search, 1.0) + line(common, search, 1.4) + line(common, search, 0.8)
        + line(common, search, 0.2) + line(common, direct, 1.4) + line(single, search, 1.0)
    )  # fmt: skip
    step11 = rollout_searches(s, "grpo_bench")[-1]
    assert step11["step"] == 11 and step11["searched_common"] == [4, 5]
    assert step11["right_common"] == [3, 1] and step11["over_search_common"] == 1


def test_grpo_stage_skips_main_ppo_validation_when_the_limit_is_zero(tmp_path):
    """The demo measures the trained policy with its own eval; main_ppo's validation is then skipped, and its
    validation file still holds one question (verl cannot build an empty dataset)."""
    import pandas as pd

    from agentrag_verl.demo.pipeline import grpo_overrides, training_parquets

    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, train_limit=2, grpo_val_limit=0)
    assert "trainer.test_freq=-1" in grpo_overrides(s)
    assert len(pd.read_parquet(training_parquets(s)[1])) == 1
    s.grpo_val_limit = 4
    assert not any(o.startswith("trainer.test_freq") for o in grpo_overrides(s))
    assert len(pd.read_parquet(training_parquets(s)[1])) == 3  # one per test set


def test_grpo_reanswers_are_greedy_by_default(tmp_path):
    """HiPRAG's over-search detector asks what the policy knows: its re-answers are greedy during GRPO (as in the
    greedy eval) unless the settings say otherwise; None hands the rollout's temperature back to the agent loop."""
    from agentrag_verl.demo.pipeline import grpo_overrides

    key = "++actor_rollout_ref.rollout.custom.agentrag.aux_temperature="
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR)
    assert key + "0.0" in grpo_overrides(s)
    s.grpo_reanswer_temperature = None
    assert key + "null" in grpo_overrides(s)


def test_reward_kwargs_override_the_methods_local_options(tmp_path):
    """HiPRAG's local default is the "over-search only" ablation; ``reward_kwargs`` turn the under-search detector on
    and set λp, in the RL stage's overrides and the evals' reward options alike."""
    from agentrag_verl.demo.pipeline import grpo_overrides

    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR)
    assert "++reward.reward_kwargs.under_search_detector=false" in grpo_overrides(s)
    s.reward_kwargs = {"under_search_detector": True, "lambda_p": 0.0}
    rewards = [o for o in grpo_overrides(s) if o.startswith("++reward.reward_kwargs.")]
    assert rewards == [
        "++reward.reward_kwargs.under_search_detector=true",
        "++reward.reward_kwargs.judge_error_policy=exclude",
        "++reward.reward_kwargs.lambda_p=0.0",
    ]
    assert s.reward_options == {"under_search_detector": True, "judge_error_policy": "exclude", "lambda_p": 0.0}


def test_grpo_actor_micro_batches_hold_at_most_four_trajectories(tmp_path):
    """Memory bound of the actor and critic updates on a 24 GB box: micro-batches of at most
    ``grpo_micro_batch_size`` trajectories, never more than the step has, dividing the step's trajectories and each
    role's mini-batch (verl asserts it: 6 groups of 3 in micro-batches of 4 stopped the first Search-R1 learning run
    at its first update, a critic mini-batch of 3 in micro-batches of 2 AutoSearch run 5)."""
    from agentrag_verl.demo.pipeline import grpo_overrides

    def micro(**kw):
        overrides = grpo_overrides(PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, **kw))
        return [o.split("=")[1] for o in overrides if "micro_batch_size_per_gpu" in o]

    assert micro(grpo_batch_size=6, grpo_rollout_n=4) == ["4"] * 4
    assert micro(grpo_batch_size=1, grpo_rollout_n=2) == ["2"] * 4
    assert micro(grpo_batch_size=6, grpo_rollout_n=3) == ["3"] * 4  # 18 trajectories
    assert micro(grpo_batch_size=30, grpo_rollout_n=1) == ["3"] * 4  # PPO: 30 prompts, one response each
    assert micro(grpo_batch_size=7, grpo_rollout_n=1) == ["1"] * 4
    # an override of a role's mini-batch: its micro-batches divide that too (actor, rollout, ref, critic)
    critic_of_3 = {"grpo_micro_batch_size": 2, "extra_train_overrides": ["++critic.ppo_mini_batch_size=3"]}
    assert micro(grpo_batch_size=30, grpo_rollout_n=1, **critic_of_3) == ["2", "2", "2", "1"]
    actor_of_4 = {"extra_train_overrides": ["actor_rollout_ref.actor.ppo_mini_batch_size=4"]}
    assert micro(grpo_batch_size=6, grpo_rollout_n=3, **actor_of_4) == ["3", "3", "3", "3"]  # 12 and 18 trajectories


def test_a_stopped_rl_stage_leaves_no_training_running(tmp_path):
    """SIGTERM to the pipeline (which the demo and the benchmarks turn into an exit) stops the recipe's whole process
    group: nothing it started keeps running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "child.pid"
    script = (
        "import os, signal, sys\n"
        "from agentrag_verl.demo.pipeline import _run_group\n"
        "signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))\n"
        f"_run_group(['bash', '-c', 'sleep 300 & echo $! > {pidfile}; wait'], sys.stdout, dict(os.environ))\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 128 + signal.SIGTERM
    time.sleep(0.5)
    try:
        os.kill(child, 0)
        alive = open(f"/proc/{child}/stat").read().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        alive = False
    assert not alive


def test_a_stopped_rl_stage_continues_only_with_its_own_settings(tmp_path):
    """A rerun of an RL stage that stopped after a checkpoint continues from it (train-local --resume) and keeps the
    trajectories of the steps up to it; other settings, or no checkpoint, start a new run without an earlier run's
    trajectories."""
    from agentrag_verl.demo.pipeline import rl_attempt, rollouts_dir

    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR)
    checkpoints = tmp_path / "bench" / "train" / "checkpoints"
    rollouts = rollouts_dir(s, "bench")

    def stopped_at(step: int, dumped: int) -> None:
        rollouts.mkdir(parents=True, exist_ok=True)
        for k in range(1, dumped + 1):
            (rollouts / f"{k}.jsonl").write_text("{}\n")
        (checkpoints / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))

    settings = {"grpo_steps": 30, "extra_train_overrides": ("a=1",)}
    assert rl_attempt(s, "bench", settings) is None  # nothing saved: step 1
    stopped_at(5, dumped=7)
    assert rl_attempt(s, "bench", settings) == 5  # the same settings (a tuple reads back as the list it was written)
    assert sorted(int(p.stem) for p in rollouts.glob("*.jsonl")) == [1, 2, 3, 4, 5]
    assert rl_attempt(s, "bench", {**settings, "grpo_steps": 20}) is None  # other settings: a new run
    assert not rollouts.exists()
    # the 20-step run is the recorded one now: its checkpoint does not continue a 30-step run, which starts anew
    stopped_at(10, dumped=10)
    assert rl_attempt(s, "bench", settings) is None and not rollouts.exists()
    stopped_at(10, dumped=10)
    assert rl_attempt(s, "bench", settings) == 10


def test_a_finished_rl_stage_is_reused_only_with_its_own_settings(tmp_path, monkeypatch):
    """The RL stage runs its recipe once per settings: a rerun with the settings the finished run recorded returns its
    summary, and other settings run the recipe again (the recipe itself, beyond what this test reaches, is faked)."""
    from agentrag_verl.demo import pipeline

    runs = []

    def finished_run(cmd, env, knobs, work, done, resumed=False):
        runs.append(env["LOCAL_STEPS"])
        hf = work / "train" / "checkpoints" / "global_step_2" / "actor" / "huggingface"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text("{}")
        done.write_text(json.dumps({"returncode": 0, "checkpoint": str(hf.parent)}))

    monkeypatch.setattr(pipeline, "run_script", finished_run)
    monkeypatch.setattr(pipeline, "MAIN_PPO_LOCK", str(tmp_path / "lock"))
    sft = tmp_path / "sft"
    sft.mkdir()
    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, grpo_steps=2)
    first = pipeline.grpo_stage(s, sft, "http://127.0.0.1:1", "http://127.0.0.1:2", name="bench")
    assert runs == ["2"] and first["model"].endswith("global_step_2/actor/huggingface")
    assert pipeline.grpo_stage(s, sft, "http://127.0.0.1:1", "http://127.0.0.1:2", name="bench") == first
    assert runs == ["2"]
    s3 = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR, grpo_steps=3)
    pipeline.grpo_stage(s3, sft, "http://127.0.0.1:1", "http://127.0.0.1:2", name="bench")
    assert runs == ["2", "3"]


def test_a_resumed_recipe_run_keeps_each_attempts_log(tmp_path):
    """The recipe's output of a resumed run goes to a new ``recipe.log``, the earlier attempts' kept beside it (the
    learning benchmark counts reward-placement warnings over all of them); a run from the start removes them."""
    from agentrag_verl.demo.pipeline import run_script
    from agentrag_verl.local_cpu.train_local import attempt_logs

    done = tmp_path / "done"

    def attempt(text: str, resumed: bool) -> list[str]:
        run_script(["bash", "-c", f"echo {text}; touch {done}"], os.environ, [], tmp_path, done, resumed=resumed)
        return [p.read_text() for p in attempt_logs(tmp_path, "recipe.log")]

    assert attempt("first", resumed=False) == ["first\n"]
    assert attempt("second", resumed=True) == ["first\n", "second\n"]
    assert [p.name for p in attempt_logs(tmp_path, "recipe.log")] == ["recipe.attempt1.log", "recipe.log"]
    assert attempt("anew", resumed=False) == ["anew\n"]


def test_rl_fingerprint_holds_the_later_settings_only_when_set(tmp_path):
    """Runs cached before ``grpo_knowledge`` and ``grpo_set_questions`` existed keep their fingerprints: the two
    enter it only when set, and then a run with other labels or another mix is not reused."""
    from agentrag_verl.demo.pipeline import RL_KEYS_SINCE, rl_fingerprint

    s = PipelineSettings(work_dir=tmp_path, data_dir=MINI_WIKI_DIR)
    before = rl_fingerprint(s, tmp_path)
    assert not set(RL_KEYS_SINCE) & set(before) and before["grpo_questions_per_set"] == 10
    s.grpo_knowledge, s.grpo_set_questions = "probe", {"common": 20}
    after = rl_fingerprint(s, tmp_path)
    assert {k: after.pop(k) for k in RL_KEYS_SINCE} == {"grpo_knowledge": "probe", "grpo_set_questions": {"common": 20}}
    assert after == before
