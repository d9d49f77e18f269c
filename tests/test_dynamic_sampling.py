"""DAPO dynamic sampling with its bound, through verl's own replay-buffer loop: the multi-stage recipe's sampler is
built by verl's ``PPOTrainer._build_replay_buffer`` from the recipe's config, and ``sample`` runs verl's real polling,
filtering and refilling over an in-memory stand-in for TransferQueue (the Ray-hosted store it reads) in which every
prompt sent to generation finishes at once with the rewards a test chooses."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("transfer_queue")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1 import replay_buffer as rb  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402

from agentrag_verl.dynamic_sampling import BoundedDynamicSampling, GenerationBoundExceeded  # noqa: E402

from .recipes.conftest import CASES, compose, dry_run, split_main_ppo  # noqa: E402

GROUP = 4  # responses per prompt


class Store:
    """The TransferQueue calls verl's replay buffer makes (``kv_list``, ``kv_batch_get``, ``kv_clear``), in memory."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, dict]] = {"train": {}}
        self.rewards: dict[str, float] = {}
        self.tokenizer: Any = None  # where set, trajectory "<uid>_<session>_0" reads "question <uid>" and
        # "answer <session> of <uid>"

    def kv_list(self, partition_id: str | None = None) -> dict:
        return {p: dict(items) for p, items in self.tags.items()}

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> dict:
        """Per-token rewards with the trajectory's reward on its last token; token ids as jagged (nested) tensors,
        as TransferQueue returns them."""
        import torch

        def ids(texts: list[str]) -> Any:
            rows = [torch.tensor(self.tokenizer.encode(t)) for t in texts]
            return torch.nested.nested_tensor(rows, layout=torch.jagged)

        out = {"rm_scores": lambda: [torch.tensor([0.0, self.rewards[k]]) for k in keys],
               "prompts": lambda: ids([f"question {k.split('_')[0]}" for k in keys]),
               "responses": lambda: ids([f"answer {k.split('_')[1]} of {k.split('_')[0]}" for k in keys])}  # fmt: skip
        return {f: out[f]() for f in select_fields}

    def kv_clear(self, partition_id: str, keys: list[str]) -> None:
        for key in keys:
            self.tags[partition_id].pop(key, None)


class Generation:
    """What the trainer's ``refill_fn`` starts: each prompt's group, finished; prompt ``i``'s responses all score
    ``value(i)`` where ``uniform(i)``, else 0 and 1 in turn."""

    def __init__(self, store: Store, uniform, value=lambda i: 1.0) -> None:
        self.store, self.uniform, self.value, self.prompts = store, uniform, value, itertools.count()
        self.sent = 0

    def __call__(self, num_prompts: int) -> int:
        for _ in range(num_prompts):
            i = next(self.prompts)
            uid = f"p{i}"
            self.store.tags["train"][uid] = {"is_prompt": True, "status": "finished", "global_steps": 1}
            for session in range(GROUP):
                key = f"{uid}_{session}_0"
                self.store.tags["train"][key] = {"global_steps": 1}
                self.store.rewards[key] = self.value(i) if self.uniform(i) else float(session % 2)
        self.sent += num_prompts
        return num_prompts


def multistage_config(**changes: Any) -> Any:
    recipe = next(c for c in CASES if c.script == "multistage/run_dapo.sh" and c.env.get("STAGE") == "1")
    path, name, overrides = split_main_ppo(dry_run(recipe))
    cfg = compose(path, name, [*overrides, *(f"{k}={v}" for k, v in changes.items())])
    OmegaConf.resolve(cfg)  # as verl's TaskRunner does before building the trainer
    return cfg


def build(cfg: Any, generation: Generation) -> Any:
    """The replay buffer verl's trainer builds from ``cfg`` (its own method, on a stand-in for the trainer)."""
    trainer = SimpleNamespace(config=cfg, trainer_mode=cfg.trainer.v1.trainer_mode, _add_prompts_to_generate=generation)
    trainer._resolve_filter_groups_metric = lambda: PPOTrainer._resolve_filter_groups_metric(trainer)
    buffer = PPOTrainer._build_replay_buffer(trainer)
    buffer.poll_interval = 0.0
    return buffer


def run_step(monkeypatch, cfg: Any, uniform, value=lambda i: 1.0) -> tuple[Any, Generation]:
    store = Store()
    monkeypatch.setattr(rb, "tq", store)
    generation = Generation(store, uniform, value)
    buffer = build(cfg, generation)
    batch_size = int(cfg.data.train_batch_size)
    generation(batch_size)  # the step's first generation batch (trainer.prepare_step)
    generation.sent = 0
    return buffer, generation


def test_the_recipe_plugs_the_bounded_sampler_into_verl():
    cfg = multistage_config()
    buffer = build(cfg, Generation(Store(), lambda i: False))
    assert type(buffer) is BoundedDynamicSampling
    # the settings verl would give its own buffer: DAPO on the reward, one prompt per dataloader fetch
    assert (buffer.filter_groups_metric, buffer.gen_batch_size, buffer.train_batch_size) == ("reward", 1, 32)
    assert buffer.max_num_gen_batches == 10 and buffer.refill_allowance == 9 * 32


def test_a_batch_fills_within_the_bound(monkeypatch):
    cfg = multistage_config()
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: i % 2 == 0)  # half the groups carry no signal
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=32)
    assert len({key.split("_")[0] for key in batch.keys}) == 32 and len(batch.keys) == 32 * GROUP
    assert 0 < generation.sent <= buffer.refill_allowance
    assert metrics["training/filter_groups/evicted_samples"] >= 16


def test_the_evicted_groups_rewards_are_logged(monkeypatch):
    """verl logs how many groups it evicted; the sampler adds the sum of their shared rewards, so the mean reward over
    every group a step generated can be rebuilt from the console metrics."""
    cfg = multistage_config()
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: i % 2 == 0, value=lambda i: float(i % 4 == 0))
    _, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=32)
    uniform = [i for i in range(32 + generation.sent) if i % 2 == 0]  # all right (i % 4 == 0) or all wrong
    assert metrics["training/filter_groups/evicted_samples"] == len(uniform)
    assert metrics["training/filter_groups/evicted_metric_sum"] == sum(i % 4 == 0 for i in uniform)


def test_the_evicted_groups_trajectories_are_dumped_beside_verls(monkeypatch, tmp_path, tiny_model_dir):
    """With ``trainer.rollout_data_dir`` set, the evicted groups' trajectories are written, decoded, before verl
    clears them, to ``<dir>/evicted/<step>.jsonl``; with verl's dump of the batch they make up every group."""
    import json

    from transformers import AutoTokenizer

    cfg = multistage_config(
        **{"+trainer.rollout_data_dir": str(tmp_path), "actor_rollout_ref.model.path": str(tiny_model_dir)}
    )
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: i % 2 == 0, value=lambda i: float(i % 4 == 0))
    rb.tq.tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch, metrics = buffer.sample(global_steps=3, partition_id="train", batch_size=32)
    records = [json.loads(line) for line in (tmp_path / "evicted" / "3.jsonl").read_text().splitlines()]
    uniform = [i for i in range(32 + generation.sent) if i % 2 == 0]
    assert len(records) == len(uniform) * GROUP == metrics["training/filter_groups/evicted_samples"] * GROUP
    assert {r["input"] for r in records} == {f"question p{i}" for i in uniform}
    assert all(r["output"] == f"answer {r['uid'].split('_')[1]} of {r['uid'].split('_')[0]}" for r in records)
    assert all(r["score"] == float(int(r["uid"].split("_")[0][1:]) % 4 == 0) and r["step"] == 3 for r in records)
    assert sum(r["score"] for r in records) == GROUP * metrics["training/filter_groups/evicted_metric_sum"]
    assert not {r["uid"].split("_")[0] for r in records} & {key.split("_")[0] for key in batch.keys}

    # a run resumed from a checkpoint generates the step anew: the earlier attempt's evicted groups are not kept
    buffer, _ = run_step(monkeypatch, cfg, uniform=lambda i: i % 2 == 0)
    rb.tq.tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    buffer.sample(global_steps=3, partition_id="train", batch_size=32)
    assert len((tmp_path / "evicted" / "3.jsonl").read_text().splitlines()) == len(records)
    buffer, _ = run_step(monkeypatch, cfg, uniform=lambda i: False)  # this time no group is uniform
    buffer.sample(global_steps=3, partition_id="train", batch_size=32)
    assert not (tmp_path / "evicted" / "3.jsonl").exists()


def test_uniform_groups_stop_the_run_at_max_num_gen_batches(monkeypatch):
    cfg = multistage_config(**{"algorithm.filter_groups.max_num_gen_batches": 3})
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: True)  # every group: the same reward
    with pytest.raises(GenerationBoundExceeded, match="max_num_gen_batches=3 generation batches of 32 prompts"):
        buffer.sample(global_steps=1, partition_id="train", batch_size=32)
    assert generation.sent == 2 * 32  # the first batch and two refills: 3 generation batches, no more


def test_verls_own_buffer_ignores_the_bound(monkeypatch):
    """What the recipe had before: verl's replay buffer, the same setting, keeps generating past it."""
    cfg = multistage_config(
        **{
            "algorithm.filter_groups.max_num_gen_batches": 3,
            "trainer.v1.sampler.custom_sampler.path": "null",
            "trainer.v1.sampler.custom_sampler.name": "null",
        }
    )
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: i < 32 * 6)  # signal only after 6 batches
    assert type(buffer) is rb.ReplayBuffer
    buffer.sample(global_steps=1, partition_id="train", batch_size=32)
    assert generation.sent >= 5 * 32  # past the 3 batches the setting names


def test_zero_keeps_regeneration_unbounded(monkeypatch):
    cfg = multistage_config(**{"algorithm.filter_groups.max_num_gen_batches": 0})
    buffer, generation = run_step(monkeypatch, cfg, uniform=lambda i: i < 32 * 12)
    assert buffer.refill_allowance is None
    batch, _ = buffer.sample(global_steps=1, partition_id="train", batch_size=32)
    assert len(batch.keys) == 32 * GROUP and generation.sent >= 11 * 32


def test_without_filtering_it_is_verls_plain_buffer():
    """The local profile turns dynamic sampling off (a random policy gives every group the same reward)."""
    cfg = multistage_config(**{"algorithm.filter_groups.enable": "false"})
    buffer = build(cfg, Generation(Store(), lambda i: True))
    assert buffer.filter_groups_metric is None and buffer.refill_allowance is None and buffer.gen_batch_size == 32


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer.v1.trainer_mode": "colocate_async"}, "synchronous trainer"),
        ({"+trainer.v1.sampler.sampler_kwargs.max_num_gen_batchs": 5}, "unknown ['max_num_gen_batchs']"),
        ({"algorithm.filter_groups.metric": "null"}, "metric must be set"),
        (
            {"+trainer.rollout_data_dir": "/tmp/x", "actor_rollout_ref.model.path": "''"},
            "needs sampler_kwargs.tokenizer",
        ),
    ],
)
def test_settings_it_refuses(changes, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build(multistage_config(**changes), Generation(Store(), lambda i: True))
