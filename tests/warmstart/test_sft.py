"""The demonstrations as a verl SFT dataset (``data.custom_cls``), and one optimizer step of verl's own SFT trainer
on the tiny model through ``agentrag-verl sft-local``."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from agentrag_verl.warmstart.sft_dataset import DemonstrationDataset, load_demonstrations


def write_demos(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


DEMO = {"dataset": "d", "id": "1", "kept": True, "prompt_ids": [5, 6, 7], "response_ids": [8, 9, 10, 11],
        "response_mask": [1, 0, 0, 1]}  # fmt: skip


class _Tok:
    pad_token_id = 0


def test_item_is_prompt_plus_response_with_the_rollout_mask(tmp_path):
    path = write_demos(tmp_path / "demos.jsonl", [DEMO, {**DEMO, "id": "2", "kept": False}])
    ds = DemonstrationDataset(str(path), _Tok(), {"max_length": 16})
    assert len(ds) == 1  # the rejected record is not trained on
    item = ds[0]
    assert item["input_ids"].tolist() == [5, 6, 7, 8, 9, 10, 11]
    # No loss on the prompt; the response's own mask (observation tokens 9, 10 are context, not targets).
    assert item["loss_mask"].tolist() == [0, 0, 0, 1, 0, 0, 1]
    assert item["position_ids"].tolist() == list(range(7))


def test_right_padding_and_truncation(tmp_path):
    path = write_demos(tmp_path / "demos.jsonl", [DEMO])
    item = DemonstrationDataset([str(path)], _Tok(), {"max_length": 10, "pad_mode": "right"})[0]
    assert item["input_ids"].tolist() == [5, 6, 7, 8, 9, 10, 11, 0, 0, 0]
    assert item["attention_mask"].tolist() == [1] * 7 + [0] * 3
    assert item["loss_mask"].tolist() == [0, 0, 0, 1, 0, 0, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="data.max_length"):
        DemonstrationDataset(str(path), _Tok(), {"max_length": 5})[0]
    cut = DemonstrationDataset(str(path), _Tok(), {"max_length": 5, "truncation": "right"})[0]
    assert cut["input_ids"].tolist() == [5, 6, 7, 8, 9]


def test_bad_files_are_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="demos generate"):
        load_demonstrations(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kept": true, "prompt_ids": [1]}\n')
    with pytest.raises(ValueError, match="line 1"):
        load_demonstrations(bad)
    none_kept = write_demos(tmp_path / "rejected.jsonl", [{**DEMO, "kept": False}])
    with pytest.raises(ValueError, match="No kept demonstration"):
        DemonstrationDataset(str(none_kept), _Tok(), {})


def test_choice_weight_counts_the_opening_that_chooses_to_search_n_times_in_verls_loss(tiny_model_dir, tmp_path):
    """``choice_weight`` N: the tokens of HiPRAG's direct or searching opening (after the shared "<think><step>
    <reasoning>") carry N in the loss mask, every other model-written token 1; verl's own ``sft_loss`` then is the
    N-weighted mean of the tokens' negative log-probabilities."""
    from tensordict import TensorDict
    from transformers import AutoTokenizer
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import sft_loss

    from agentrag_verl.warmstart.teacher import teacher_templates

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    t = teacher_templates("hiprag")
    shared, direct, search = t.openings
    texts = {
        "direct": t.direct.format(fact="Paris is the capital of France.", answer="Paris"),
        "search": t.first_search.format(query="capital of Velda"),
        "other": "<think>\nPlain text that opens neither way.</think>\n<answer>x</answer>",
    }
    records = []
    for name, text in texts.items():
        response = tok.encode(text, add_special_tokens=False)
        records.append({"dataset": "d", "id": name, "kept": True, "format": "hiprag", "prompt_ids": [5, 6],
                        "response_ids": response, "response_mask": [1] * len(response)})  # fmt: skip
    path = write_demos(tmp_path / "demos.jsonl", records)
    plain = DemonstrationDataset(str(path), tok, {"max_length": 512})
    ds = DemonstrationDataset(str(path), tok, {"max_length": 512, "choice_weight": 7})
    assert ds.weighted == 2
    for i, opening in enumerate((direct, search)):
        item, mask = ds[i], ds[i]["loss_mask"]
        assert set(mask.tolist()) == {0, 1, 7}
        chosen = tok.decode(item["input_ids"][mask == 7])
        assert opening in chosen and len(chosen) < len(opening) + 12  # the opening, and a token's width around it
        assert torch.equal(mask.clamp(max=1), plain[i]["loss_mask"])  # the same tokens are trained, weighted
    assert torch.equal(ds[2]["loss_mask"], plain[2]["loss_mask"])  # neither opening: the plain 0/1 mask

    masks = [ds[i]["loss_mask"] for i in range(3)]
    log_probs = [-torch.rand(len(m)) * 5 for m in masks]  # any per-token log-probabilities (log p of token i+1)
    data = TensorDict({"loss_mask": torch.nested.as_nested_tensor(masks, layout=torch.jagged)}, batch_size=[3])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(sum(m.sum() for m in masks)))
    loss, _ = sft_loss(None, {"log_probs": torch.nested.as_nested_tensor(log_probs, layout=torch.jagged)}, data)
    weights = [torch.cat([m[1:], m[:1]]).float() for m in masks]  # token i+1's weight on position i
    expected = -sum((w * lp).sum() for w, lp in zip(weights, log_probs, strict=True)) / sum(m.sum() for m in masks)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)

    # `sft-local --choice-weight 7`: its overrides on verl's own config reach the dataset verl builds.
    from hydra import compose, initialize_config_module
    from verl.trainer.sft_trainer import create_sft_dataset

    from agentrag_verl.warmstart.sft_local import SFTSettings, choice_weight_overrides, sft_overrides

    settings = SFTSettings(model=str(tiny_model_dir), train_files=[str(path)], work_dir=str(tmp_path / "sft"),
                           max_length=512, extra_overrides=choice_weight_overrides(7))  # fmt: skip
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="sft_trainer_engine", overrides=sft_overrides(settings, tmp_path / "ckpt"))
    built = create_sft_dataset(cfg.data.train_files, cfg.data, tok, None)
    assert built.choice_weight == 7 and torch.equal(built[1]["loss_mask"], ds[1]["loss_mask"])

    with pytest.raises(ValueError, match="whole number"):
        DemonstrationDataset(str(path), tok, {"choice_weight": 0.5})
    neither = write_demos(tmp_path / "neither.jsonl", [records[2]])
    with pytest.raises(ValueError, match="no demonstration .* opens"):
        DemonstrationDataset(str(neither), tok, {"choice_weight": 7})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_finished_run_is_reused_only_for_the_same_demonstrations(tmp_path):
    from agentrag_verl.warmstart.sft_local import SFTSettings, sft_fingerprint

    demos = write_demos(tmp_path / "demos.jsonl", [DEMO])
    settings = SFTSettings(model="m", train_files=[str(demos)], work_dir=str(tmp_path / "a"))
    first = sft_fingerprint(settings)
    assert sft_fingerprint(SFTSettings(model="m", train_files=[str(demos)], work_dir=str(tmp_path / "b"))) == first
    write_demos(demos, [DEMO, {**DEMO, "id": "2"}])  # more demonstrations, same file name
    assert sft_fingerprint(settings)["train_data_sha256"] != first["train_data_sha256"]
    assert {k: v for k, v in sft_fingerprint(settings).items() if k != "train_data_sha256"} == {
        k: v for k, v in first.items() if k != "train_data_sha256"
    }


def tiny_demos(tok, path, n=4):
    """``n`` kept demonstrations of one searching turn and an answer, tokenized for ``tok``."""
    records = []
    for i in range(n):
        prompt = tok.encode(f"Question {i}: where does the river Velda end?", add_special_tokens=False)
        model = tok.encode("<search>Velda</search>", add_special_tokens=False)
        obs = tok.encode("<information>It empties into Skerrow Sound.</information>", add_special_tokens=False)
        answer = tok.encode("<answer>Skerrow Sound</answer>", add_special_tokens=False)
        response = model + obs + answer
        mask = [1] * len(model) + [0] * len(obs) + [1] * len(answer)
        records.append({"dataset": "d", "id": str(i), "kept": True, "prompt_ids": prompt, "response_ids": response,
                        "response_mask": mask})  # fmt: skip
    return write_demos(path, records)


def test_one_optimizer_step_through_verls_sft_trainer(tiny_model_dir, tmp_path, monkeypatch):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from agentrag_verl.warmstart.sft_local import SFTSettings, run_sft_local

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    demos = tiny_demos(tok, tmp_path / "demos.jsonl")
    # batch 4 = all demonstrations: one epoch is one optimizer step.
    settings = SFTSettings(model=str(tiny_model_dir), train_files=[str(demos)], work_dir=str(tmp_path / "sft"),
                           epochs=1, batch_size=4, micro_batch_size=2, lr=1e-3, warmup_ratio=0.0)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    summary = run_sft_local(settings, echo=False)
    assert summary["returncode"] == 0 and summary["demonstrations"] == 4
    # Hydra's run folder is in the work folder, not outputs/<date>/<time> under the current one.
    assert (tmp_path / "sft" / "hydra" / ".hydra" / "config.yaml").exists() and not (tmp_path / "outputs").exists()
    assert list(summary["steps"]) == [1]
    loss = summary["steps"][1]["train/loss"]
    assert 0 < loss < 20  # a finite cross-entropy over the masked tokens of a random model (log|V| ~ 7)
    model_dir = tmp_path / "sft" / "model"
    assert (model_dir / "config.json").exists() and (model_dir / "tokenizer.json").exists()
    before = {k: v for f in tiny_model_dir.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    after = {k: v for f in model_dir.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    changed = [k for k in before if k in after and not torch.equal(before[k].float(), after[k].float())]
    assert len(changed) > len(before) // 2  # the optimizer step moved the weights (saved as a HF folder)
    # A second call with the same settings reuses the finished run.
    assert run_sft_local(settings, echo=False)["wall_s"] == summary["wall_s"]


def test_a_run_stopped_at_an_epochs_end_trains_the_next_epoch_when_resumed(tiny_model_dir, tmp_path, monkeypatch):
    """verl 0.9.1 restores an exhausted train loader from a checkpoint saved at an epoch's end, and then trains no
    batch of the next epoch. The resume drops that state; without it the short run is an error, not a model."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    from agentrag_verl.local_cpu.report import tracked_step
    from agentrag_verl.local_cpu.train_local import attempt_logs
    from agentrag_verl.warmstart import sft_local
    from agentrag_verl.warmstart.sft_local import SFTSettings, planned_steps, run_sft_local, sft_fingerprint

    demos = tiny_demos(AutoTokenizer.from_pretrained(str(tiny_model_dir)), tmp_path / "demos.jsonl")
    one = SFTSettings(model=str(tiny_model_dir), train_files=[str(demos)], work_dir=str(tmp_path / "sft"),
                      epochs=1, batch_size=2, micro_batch_size=2, lr=1e-3, warmup_ratio=0.0)  # fmt: skip
    two = replace(one, epochs=2)
    assert planned_steps(sft_local.sft_overrides(two, tmp_path), 4) == (2, 4)
    assert list(run_sft_local(one, echo=False)["steps"]) == [1, 2]
    checkpoints = tmp_path / "sft" / "checkpoints"

    def stopped_after_epoch_one():
        # The work folder of a two-epoch run stopped after its first epoch: its checkpoint of step 2 (model,
        # optimizer, the loader at the epoch's end) under the two-epoch run's settings.
        (tmp_path / "sft" / "run.json").write_text(json.dumps(sft_fingerprint(two)))
        (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
        for later in checkpoints.glob("global_step_*"):
            if later.name != "global_step_2":
                shutil.rmtree(later)

    saved = tmp_path / "step2"
    shutil.copytree(checkpoints / "global_step_2", saved)
    stopped_after_epoch_one()
    monkeypatch.setattr(sft_local, "_resume_with_whole_epochs", lambda d, per_epoch: tracked_step(d))
    with pytest.raises(RuntimeError, match=r"last checkpoint is at step 2 of the 4 planned \(2 an epoch\)"):
        run_sft_local(two, echo=False)  # verl's own resume: exit 0, no step of epoch 2
    monkeypatch.undo()

    shutil.rmtree(checkpoints / "global_step_2")
    shutil.copytree(saved, checkpoints / "global_step_2")
    stopped_after_epoch_one()
    summary = run_sft_local(two, echo=False)
    assert list(summary["steps"]) == [1, 2, 3, 4]  # epoch 1 from the first attempt's log, epoch 2 trained now
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    logs = attempt_logs(tmp_path / "sft", "sft.log")  # each attempt's log kept: epoch 1, the failed resume, epoch 2
    assert [p.name for p in logs] == ["sft.attempt1.log", "sft.attempt2.log", "sft.log"]
    trained = [re.findall(r"step:(\d+) .*train/loss", p.read_text()) for p in logs]
    assert trained == [["1", "2"], [], ["3", "4"]]
    assert run_sft_local(two, echo=False)["wall_s"] == summary["wall_s"]  # finished: reused


def test_gpu_recipe_composes_and_verl_builds_our_dataset(tmp_path):
    """recipes/warmstart/config/sft.yaml on verl's sft_trainer_engine: verl's own create_sft_dataset finds our class
    through data.custom_cls."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from verl.trainer.sft_trainer import create_sft_dataset

    demos = write_demos(tmp_path / "demos.jsonl", [DEMO])
    config_dir = Path(__file__).resolve().parents[2] / "recipes" / "warmstart" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name="sft", overrides=[f"data.train_files=[{demos}]"])
    assert cfg.model.path == "Qwen/Qwen2.5-3B-Instruct" and "hf_model" in cfg.checkpoint.save_contents
    assert cfg.trainer.save_freq == "after_each_epoch" and cfg.trainer.logger == ["console"]
    dataset = create_sft_dataset(cfg.data.train_files, cfg.data, _Tok(), None)
    assert isinstance(dataset, DemonstrationDataset) and dataset.max_length == 4096 and dataset.choice_weight == 1
    assert dataset[0]["loss_mask"].tolist() == [0, 0, 0, 1, 0, 0, 1]


def test_run_script_dry_run(tmp_path):
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "recipes" / "warmstart" / "run_sft.sh"
    env = {"PATH": "/usr/bin:/bin", "DEMOS": "d.jsonl", "MODEL": "m", "N_GPUS": "2", "DRY_RUN": "yes"}
    out = subprocess.run(["bash", str(script), "trainer.seed=3"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--nproc_per_node=2 -m verl.trainer.sft_trainer" in out.stdout and "model.path=m" in out.stdout
    assert out.stdout.strip().endswith("trainer.seed=3") and not list(tmp_path.iterdir())  # a dry run creates nothing
    bad = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**env, "DRY_RUN": "maybe"})
    assert bad.returncode == 2 and "DRY_RUN='maybe' is not understood" in bad.stderr
    # several nodes: the same command on each, torchrun's c10d rendezvous on MASTER_ADDR (no rank per node)
    two = {**env, "NNODES": "2", "MASTER_ADDR": "10.0.0.5"}
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=two, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--nnodes=2 --nproc_per_node=2 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.5:29500" in out.stdout
    for knobs, message in (
        ({"MASTER_ADDR": ""}, "NNODES=2: set MASTER_ADDR"),
        ({"MASTER_ADDR": "127.0.0.1"}, "MASTER_ADDR=127.0.0.1 points at this machine"),
        ({"NNODES": "two"}, "NNODES='two' must be a whole number"),
    ):
        bad = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={**two, **knobs})
        assert bad.returncode == 2 and message in bad.stderr and not bad.stdout, (knobs, bad.stderr)


@pytest.mark.parametrize("module", ["agentrag_verl.warmstart.sft_local", "agentrag_verl.local_cpu.train_local"])
def test_module_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
