"""The demonstrations as a verl SFT dataset (``data.custom_cls``), and one optimizer step of verl's own SFT trainer
on the tiny model through ``agentrag-verl sft-local``."""

from __future__ import annotations

import json

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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_optimizer_step_through_verls_sft_trainer(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from agentrag_verl.warmstart.sft_local import SFTSettings, run_sft_local

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    records = []
    for i in range(4):
        prompt = tok.encode(f"Question {i}: where does the river Velda end?", add_special_tokens=False)
        model = tok.encode("<search>Velda</search>", add_special_tokens=False)
        obs = tok.encode("<information>It empties into Skerrow Sound.</information>", add_special_tokens=False)
        answer = tok.encode("<answer>Skerrow Sound</answer>", add_special_tokens=False)
        response = model + obs + answer
        mask = [1] * len(model) + [0] * len(obs) + [1] * len(answer)
        records.append({"dataset": "d", "id": str(i), "kept": True, "prompt_ids": prompt, "response_ids": response,
                        "response_mask": mask})  # fmt: skip
    demos = write_demos(tmp_path / "demos.jsonl", records)
    # batch 4 = all demonstrations: one epoch is one optimizer step.
    settings = SFTSettings(model=str(tiny_model_dir), train_files=[str(demos)], work_dir=str(tmp_path / "sft"),
                           epochs=1, batch_size=4, micro_batch_size=2, lr=1e-3, warmup_ratio=0.0)  # fmt: skip
    summary = run_sft_local(settings, echo=False)
    assert summary["returncode"] == 0 and summary["demonstrations"] == 4
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
