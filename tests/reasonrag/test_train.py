"""Step-level DPO (Eq. 3) and the SFT-on-chosen baseline with TRL on the tiny Qwen2, on CPU, from pairs generated
by our MCTS (scripted policy and retriever over HTTP), through the recipe YAMLs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrag_verl.methods.reasonrag.generate import PAIRS, generate, load_questions
from agentrag_verl.methods.reasonrag.mcts import MCTSConfig
from agentrag_verl.methods.reasonrag.train import ProGuideError, load_pairs, main
from agentrag_verl.testing import FakeOpenAIServer, load_qa, write_qa

from .conftest import QAPolicy
from .test_generate import env_for, golds_of

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "reasonrag" / "dpo"
# CPU-sized overrides of the recipe: the tiny model, 2 optimizer steps of 2 pairs, fp32, nothing saved mid-run.
CPU = [
    "--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
    "--bf16", "false", "--gradient_checkpointing", "false", "--dtype", "float32", "--logging_steps", "1",
    "--save_strategy", "no", "--eval_strategy", "no", "--max_length", "1024", "--dataloader_num_workers", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory, fake_retriever_module) -> Path:
    """RAG-ProGuide pairs of 4 fixture questions from a real MCTS run (2 pairs per question)."""
    import asyncio

    tmp = tmp_path_factory.mktemp("proguide")
    qa = write_qa(load_qa()[:4], tmp / "hotpotqa.jsonl")
    config = MCTSConfig(max_rollouts=5, max_children=2, max_iter=5, spre_rollouts=1)
    with FakeOpenAIServer(QAPolicy(golds_of(qa))) as server:
        summary = asyncio.run(
            generate(load_questions([qa]), tmp / "out", env_for(server, fake_retriever_module), config, progress=False)
        )
    assert summary.pairs == 8
    return tmp / "out" / PAIRS


@pytest.fixture(scope="module")
def fake_retriever_module():
    from agentrag_verl.testing.fake_retriever import FakeRetriever
    from tests.support import corpus_documents

    with FakeRetriever(corpus_documents()) as server:
        yield server


def _weights(path) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _run(mode: str, tiny_model_dir, pairs_file, out: Path, monkeypatch) -> object:
    import agentrag_verl.methods.reasonrag.train as train_mod

    trainers = []
    original = train_mod.train

    def keep(*args, **kwargs):
        trainers.append(original(*args, **kwargs))
        return trainers[-1]

    monkeypatch.setattr(train_mod, "train", keep)
    argv = [mode, "--config", str(RECIPES / f"{mode}.yaml"), "--pairs", str(pairs_file)]
    argv += ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), *CPU]
    assert main(argv) == 0
    return trainers[0]


def test_dpo_two_steps_on_generated_pairs(tiny_model_dir, pairs_file, tmp_path, monkeypatch):
    before = _weights(tiny_model_dir)
    trainer = _run("dpo", tiny_model_dir, pairs_file, tmp_path / "dpo", monkeypatch)
    args = trainer.args
    # The recipe's paper settings survive the CPU overrides.
    assert (args.beta, args.loss_type, args.learning_rate, args.lr_scheduler_type) == (0.3, ["sigmoid"], 1e-6, "cosine")
    assert trainer.state.global_step == 2
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    # Untrained policy = reference: the first DPO loss is -log sigmoid(0) = log 2.
    assert losses[0] == pytest.approx(math.log(2), abs=1e-3)
    after = _weights(tmp_path / "dpo")
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert len(changed) > len(before) // 2, f"only {len(changed)} of {len(before)} tensors changed"
    # Validation split by question: 4 questions, val 0.1 -> 1 question (2 pairs) held out, 6 pairs trained on.
    assert len(trainer.train_dataset) == 6
    # the logged margins stay beside the model (benchmarks/learning.py reads them)
    state = json.loads((tmp_path / "dpo" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "rewards/margins" in h] == [1, 2]


def test_pipeline_dpo_stage_runs_the_recipe_script(tiny_model_dir, pairs_file, tmp_path):
    """The learning benchmark's DPO stage is run_dpo.sh as a user runs it; a second call with the same inputs is
    reused, other overrides train again. As in the benchmark, the held-out pairs (the recipe's val_size: here 1 of
    the 4 questions) are scored before training and between steps."""
    from agentrag_verl.demo.pipeline import PipelineSettings, dpo_stage

    args = [*CPU[: CPU.index("--eval_strategy")], *CPU[CPU.index("--eval_strategy") + 2 :]]
    args += ["--eval_strategy", "steps", "--eval_steps", "1", "--eval_on_start", "true", "--learning_rate", "1e-3"]
    s = PipelineSettings(work_dir=tmp_path, data_dir=tmp_path, format="reasonrag", dpo_args=args,
                         recipe="recipes/reasonrag/dpo/run_dpo.sh")  # fmt: skip
    out = dpo_stage(s, Path(tiny_model_dir), pairs_file)
    command = json.loads((tmp_path / "dpo" / "command.json").read_text())
    assert command["cmd"][1].endswith("recipes/reasonrag/dpo/run_dpo.sh") and command["cmd"][2:] == args
    assert command["env"] == {"MODE": "dpo", "MODEL": str(tiny_model_dir), "PAIRS": str(pairs_file),
                              "OUTPUT_DIR": out["model"], "N_GPUS": "1"}  # fmt: skip
    assert [h["step"] for h in out["log_history"] if "loss" in h] == [1, 2]
    evals = [h for h in out["log_history"] if "eval_rewards/margins" in h]
    assert [h["step"] for h in evals] == [0, 1, 2] and evals[0]["eval_rewards/margins"] == 0.0  # policy = reference
    assert (Path(out["model"]) / "config.json").is_file()
    # Each held-out pair scored again after DPO: their mean margin and ranking are TRL's own evaluation after step 2
    # (lr 1e-3 moves the tiny policy far enough for the margins to be far from 0).
    heldout, last = out["heldout"], evals[-1]
    assert heldout["n"] == 2 and len(heldout["pairs"]) == 2 and heldout["beta"] == 0.3
    assert abs(last["eval_rewards/margins"]) > 1e-3
    assert heldout["mean"] == pytest.approx(last["eval_rewards/margins"], rel=1e-3)
    assert heldout["accuracy"] == pytest.approx(last["eval_rewards/accuracies"])
    chosen = sum(p["chosen"] for p in heldout["pairs"]) / 2
    assert chosen == pytest.approx(last["eval_rewards/chosen"], rel=1e-3)
    mtime = (Path(out["model"]) / "trainer_state.json").stat().st_mtime_ns
    assert dpo_stage(s, Path(tiny_model_dir), pairs_file) == out
    assert (Path(out["model"]) / "trainer_state.json").stat().st_mtime_ns == mtime


def test_sft_baseline_two_steps(tiny_model_dir, pairs_file, tmp_path, monkeypatch):
    before = _weights(tiny_model_dir)
    trainer = _run("sft", tiny_model_dir, pairs_file, tmp_path / "sft", monkeypatch)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 2 and len(losses) == 2 and all(math.isfinite(x) for x in losses)
    after = _weights(tmp_path / "sft")
    assert any(not (before[k] == after[k]).all() for k in before)
    # SFT rows are the distinct (prompt, chosen) pairs: the 6 training pairs have 6 distinct chosen steps.
    assert len(trainer.train_dataset) == 6


def test_pair_file_errors(tmp_path):
    with pytest.raises(ProGuideError, match="No pair files"):
        load_pairs([])
    bad = tmp_path / "pairs.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "q"}], "chosen": []}) + "\n")
    with pytest.raises(ProGuideError, match=r"pairs.jsonl:1 lacks \['chosen', 'rejected'\]"):
        load_pairs([bad])
    with pytest.raises(ProGuideError, match="does not exist"):
        load_pairs([tmp_path / "missing.jsonl"])


@pytest.mark.parametrize("script", ["run_dpo.sh", "run_sft.sh", "run_generate_proguide.sh"])
def test_run_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(RECIPES / script)], capture_output=True).returncode == 0


def test_dry_run_prints_the_exact_command():
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "PAIRS": "p.jsonl", "N_GPUS": "4"}
    lines = subprocess.run(
        ["bash", str(RECIPES / "run_dpo.sh"), "--beta", "0.1"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.splitlines()  # fmt: skip
    out = lines[0].split()
    assert out[:3] == ["accelerate", "launch", "--config_file"]
    assert out[3].endswith("trl/accelerate_configs/fsdp2.yaml") and Path(out[3]).is_file()
    options = [
        "--config", str(RECIPES / "dpo.yaml"),
        "--model_name_or_path", "Qwen/Qwen2.5-7B-Instruct", "--pairs", "p.jsonl", "--output_dir",
        "outputs/reasonrag/dpo", "--beta", "0.1",
    ]  # fmt: skip
    assert out[4:] == ["--num_processes", "4", "-m", "agentrag_verl.methods.reasonrag.train", "dpo", *options]
    # then, in one process, the held-out pairs scored with the same options (SCORE_HELDOUT=0: not at all)
    assert len(lines) == 2 and lines[1].split() == [sys.executable, "-m", "agentrag_verl.methods.reasonrag.heldout",
                                                   *options]  # fmt: skip
    for extra, n_lines in (({"SCORE_HELDOUT": "0"}, 1), ({"MODE": "sft"}, 1)):
        run = subprocess.run(["bash", str(RECIPES / "run_dpo.sh")], capture_output=True, text=True,
                             env={**env, **extra}, check=True)  # fmt: skip
        assert len(run.stdout.splitlines()) == n_lines
    bad = subprocess.run(["bash", str(RECIPES / "run_dpo.sh")], capture_output=True, text=True,
                         env={**env, "SCORE_HELDOUT": "yes"})  # fmt: skip
    assert bad.returncode != 0 and "SCORE_HELDOUT" in bad.stderr
    env["N_GPUS"] = "1"
    sft = subprocess.run(
        ["bash", str(RECIPES / "run_sft.sh")], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert sft[:4] == [sys.executable, "-m", "agentrag_verl.methods.reasonrag.train", "sft"]
    assert sft[5] == str(RECIPES / "sft.yaml")


def test_recipe_yamls_parse_into_trl_configs():
    """Every key of the recipe YAMLs is a field of TRL's configs or ours (TrlParser rejects unknown ones)."""
    from agentrag_verl.methods.reasonrag.train import _parser

    for mode in ("dpo", "sft"):
        # bf16 (the recipes' GPU setting) is refused by transformers on a CPU-only box.
        argv = ["--config", str(RECIPES / f"{mode}.yaml"), "--bf16", "false"]
        data, args, model = _parser(mode).parse_args_and_config(args=argv)
        assert (args.learning_rate, args.num_train_epochs, args.lr_scheduler_type) == (1e-6, 1, "cosine")
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.max_length) == (1, 2, 10000)
        assert (model.model_name_or_path, data.val_size) == ("Qwen/Qwen2.5-7B-Instruct", 0.1)
        if mode == "dpo":
            assert (args.beta, args.loss_type) == (0.3, ["sigmoid"])


@pytest.mark.parametrize(
    ("extra", "beta"),
    [
        ([], 0.3),  # no config file: ReasonRAG's β = 0.3 (Eq. 3, authors' pref_beta), not TRL's 0.1
        (["--beta", "0.5"], 0.5),  # the command line wins
        (["--config", "CONFIG"], 0.2),  # so does a config file
    ],
)
def test_dpo_beta_defaults_to_the_paper_however_launched(extra, beta, tmp_path, monkeypatch):
    from agentrag_verl import cli
    from agentrag_verl.methods.reasonrag import train as train_module

    config = tmp_path / "dpo.yaml"
    config.write_text("beta: 0.2\n")
    extra = [str(config) if a == "CONFIG" else a for a in extra]
    seen = []
    monkeypatch.setattr(train_module, "train", lambda mode, data, args, model: seen.append((mode, args.beta)))
    argv = ["--model_name_or_path", "m", "--output_dir", str(tmp_path / "o"), "--report_to", "none", "--bf16", "false"]
    argv += extra
    # the console command and the module entry point build the same parser
    assert cli.main(["reasonrag", "train", "dpo", *argv]) == 0
    assert train_module.main(["dpo", *argv]) == 0
    assert seen == [("dpo", beta), ("dpo", beta)]


def test_pipeline_mcts_stage_runs_the_generation_script(tmp_path, fake_retriever_module, monkeypatch):
    """The learning benchmark's MCTS stage is run_generate_proguide.sh pointed at the served policy (here the
    scripted QA policy over HTTP, chat API), over the first questions of each training set (``train_limit``, the
    demonstrations' and RL's cap, does not cap them); a rerun resumes."""
    from contextlib import contextmanager

    import agentrag_verl.demo.pipeline as P

    data = tmp_path / "data"
    rows = load_qa()[:3]
    write_qa(rows, data / "hotpotqa" / "train.jsonl")
    golds = {r["question"]: r["golden_answers"][0] for r in rows}
    with FakeOpenAIServer(QAPolicy(golds)) as server:
        url = server.base_url

        @contextmanager
        def served(settings, model_dir, name):
            yield url

        monkeypatch.setattr(P, "policy_server", served)
        s = P.PipelineSettings(work_dir=tmp_path / "work", data_dir=data, format="reasonrag", train_limit=1,
                               mcts_questions_per_set=2, mcts_recipe="recipes/reasonrag/dpo/run_generate_proguide.sh",
                               mcts_args=["--policy-api", "chat", "--max-rollouts", "5", "--max-iter", "5",
                                          "--spre-rollouts", "1"])  # fmt: skip
        out = P.mcts_stage(s, tmp_path, fake_retriever_module.url)
        calls = len(server.requests)
        again = P.mcts_stage(s, tmp_path, fake_retriever_module.url)
        assert len(server.requests) == calls  # both questions done: nothing searched again
        s.mcts_questions_per_set = 3  # one question more: the two trees stay, the third is searched
        more = P.mcts_stage(s, tmp_path, fake_retriever_module.url)
    assert out["n_pairs"] == again["n_pairs"] == 4 and out["questions"]["total"] == 2  # 2 pairs per question
    assert (more["n_pairs"], more["questions"]["total"]) == (6, 3)
    command = json.loads((tmp_path / "work" / "mcts" / "command.json").read_text())
    assert command["cmd"][1].endswith("recipes/reasonrag/dpo/run_generate_proguide.sh")
    assert command["env"]["POLICY_URL"] == url and command["env"]["SOURCES"] == "hotpotqa"
    assert len(load_pairs([more["pairs"]])) == 6


def test_heldout_scoring_says_what_is_missing(tiny_model_dir, pairs_file, tmp_path):
    from agentrag_verl.methods.reasonrag import heldout

    argv = ["--config", str(RECIPES / "dpo.yaml"), "--pairs", str(pairs_file), "--model_name_or_path",
            str(tiny_model_dir), "--output_dir", str(tmp_path / "never_trained"), "--bf16", "false"]  # fmt: skip
    with pytest.raises(ProGuideError, match="holds no trained model; run DPO with the same arguments first"):
        heldout.main(argv)
    with pytest.raises(ProGuideError, match="No held-out pairs"):
        heldout.main([*argv, "--val_size", "0"])
