"""DAPO dynamic sampling with its generation bound, for verl 0.9.1's V1 trainer.

DAPO (Yu et al. 2025, Algorithm 1) drops the groups whose responses all get the same reward and samples more prompts
until a training batch is full, up to ``max_num_gen_batches`` generation batches per step; its reference trainer
stops the run when a step needs more ("data too difficult"), rather than generating without end. verl 0.9.1's V1
trainer implements the filtering and refilling in its replay buffer (``verl.trainer.ppo.v1.replay_buffer
.ReplayBuffer``) but ignores ``algorithm.filter_groups.max_num_gen_batches`` with only a warning, so a step whose
groups keep coming back uniform (a policy that solves, or fails, everything) regenerates without bound.

:class:`BoundedDynamicSampling` is verl's own replay buffer with that bound added, plugged in where verl takes a
custom sampler (``trainer.v1.sampler.custom_sampler``), with the settings verl would give its own buffer. It
counts the prompts the buffer sends back to generation while it fills one training batch; the step's first batch is
one generation batch, so at most
``(max_num_gen_batches - 1) × train_batch_size`` prompts may be refilled. A refill beyond that stops the run with
an error naming the setting, as DAPO's reference does. ``max_num_gen_batches: 0`` keeps verl's unbounded
behaviour; with ``filter_groups.enable: false`` it is verl's plain buffer. The recipe
(``recipes/multistage/config/multistage_common.yaml``) passes ``algorithm.filter_groups`` and the batch size through
``trainer.v1.sampler.sampler_kwargs``, the only configuration verl hands a custom sampler.

It also logs what verl's console metrics leave out: the rewards of the groups it evicts. verl logs their count
(``training/filter_groups/evicted_samples``, one per group) and sends the shared values only to a wandb table, and
it dumps only the training batch (``trainer.rollout_data_dir``), which holds no uniform group by construction. Under
dynamic sampling that batch's mean reward is not the policy's: a policy that learns turns mixed groups into
all-right ones, which leave the batch. ``training/filter_groups/evicted_metric_sum`` is the sum of the evicted
groups' shared values of the filter metric (with ``metric: reward``, the recipe's, their reward), so the mean reward
over every group a step generated is (sum of the batch's group means + this sum) / (batch groups + evicted groups).
With ``evicted_data_dir`` (the recipe sets it to ``trainer.rollout_data_dir``) it also writes the evicted groups'
trajectories, before verl clears them, to ``<evicted_data_dir>/evicted/<step>.jsonl`` in the records of verl's own
dump (``input``, ``output``, ``score``, ``step``, ``uid``), decoded with the ``tokenizer`` it is given. The dump of the
training batch and this one together hold every trajectory a step generated.

Only the synchronous trainer (``trainer.v1.trainer_mode: sync``) uses this buffer; the async trainers refill
exactly the groups they evict and bound staleness instead (``trainer.v1.sampler.max_off_policy_threshold``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from verl.trainer.ppo.v1 import replay_buffer as verl_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

__all__ = ["EVICTED_SUBDIR", "BoundedDynamicSampling", "GenerationBoundExceeded", "uses_bounded_sampler"]

EVICTED_SUBDIR = "evicted"
"""The folder under ``evicted_data_dir`` that holds the dump of the evicted groups, a file per step."""


class GenerationBoundExceeded(RuntimeError):
    """A training batch needed more generation batches than ``algorithm.filter_groups.max_num_gen_batches``."""


def uses_bounded_sampler(cfg: Any) -> bool:
    """Whether the trainer config plugs :class:`BoundedDynamicSampling` (or a subclass) in as verl's custom sampler,
    loaded as verl loads it."""
    from omegaconf import OmegaConf
    from verl.utils.import_utils import load_extern_object

    path = OmegaConf.select(cfg, "trainer.v1.sampler.custom_sampler.path")
    name = OmegaConf.select(cfg, "trainer.v1.sampler.custom_sampler.name")
    if not (path and name):
        return False
    sampler = load_extern_object(path, name)
    return isinstance(sampler, type) and issubclass(sampler, BoundedDynamicSampling)


class BoundedDynamicSampling(ReplayBuffer):
    """verl's synchronous replay buffer with DAPO's dynamic sampling bounded by ``max_num_gen_batches``.

    Args:
        trainer_mode: ``trainer.v1.trainer_mode``; only ``sync``.
        trainer_config: ``trainer.v1.<mode>``.
        max_off_policy_threshold: ``trainer.v1.sampler.max_off_policy_threshold`` (a no-op when synchronous).
        max_off_policy_strategy: ``trainer.v1.sampler.max_off_policy_strategy``.
        sampler_kwargs: ``trainer.v1.sampler.sampler_kwargs``, the settings verl gives its own buffer:
            ``filter_groups`` (``algorithm.filter_groups``: ``enable``, ``metric``, ``max_num_gen_batches`` with
            0 = no bound, ``max_inflight_gen_batches``), ``train_batch_size``, and optionally ``gen_batch_size``
            (``data.gen_batch_size``) and ``sync_refill_failed_groups``; ours, optional: ``evicted_data_dir``
            (null: no dump of the evicted groups) and ``tokenizer`` (the path it decodes them with).
        refill_fn: The trainer's function that sends that many new prompts to generation.

    Raises:
        ValueError: another trainer mode, a missing or unknown ``sampler_kwargs`` key, or ``evicted_data_dir``
            without ``tokenizer``.
    """

    KWARGS = ("filter_groups", "train_batch_size")
    OPTIONAL_KWARGS = ("gen_batch_size", "sync_refill_failed_groups", "evicted_data_dir", "tokenizer")

    def __init__(
        self,
        trainer_mode: str,
        trainer_config: Any,
        max_off_policy_threshold: int | None,
        max_off_policy_strategy: str,
        sampler_kwargs: Mapping[str, Any] | None,
        refill_fn: Callable[[int], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if trainer_mode != "sync":
            raise ValueError(
                f"{type(self).__name__} bounds the synchronous trainer's dynamic sampling; with "
                f"trainer.v1.trainer_mode={trainer_mode} verl refills exactly the evicted groups: set "
                "trainer.v1.sampler.custom_sampler.path=null and .name=null, and "
                "algorithm.filter_groups.max_num_gen_batches=0 for that mode (the multi-stage run script's "
                "TRAINER_MODE knob does)"
            )
        options = dict(sampler_kwargs or {})
        missing = [k for k in self.KWARGS if options.get(k) is None]
        unknown = sorted(set(options) - set(self.KWARGS) - set(self.OPTIONAL_KWARGS))
        if missing or unknown:
            raise ValueError(
                f"trainer.v1.sampler.sampler_kwargs for {type(self).__name__}: "
                + (f"missing {missing} " if missing else "")
                + (f"unknown {unknown} " if unknown else "")
                + f"(keys: {list(self.KWARGS)} and optionally {list(self.OPTIONAL_KWARGS)})"
            )
        groups = options["filter_groups"]
        metric = groups.get("metric") if groups.get("enable", False) else None
        if groups.get("enable", False) and not metric:
            raise ValueError("algorithm.filter_groups.metric must be set when group filtering is enabled")
        sync_refill = bool(options.get("sync_refill_failed_groups") or False)
        train_batch_size = int(options["train_batch_size"])
        gen_batch_size = 1 if metric or sync_refill else int(options.get("gen_batch_size") or train_batch_size)
        self.max_num_gen_batches = int(groups.get("max_num_gen_batches", 0) or 0) if metric else 0
        if self.max_num_gen_batches < 0:
            raise ValueError(f"max_num_gen_batches must be >= 0 (0 = no bound), got {self.max_num_gen_batches}")
        dump_dir = options.get("evicted_data_dir")
        self._evicted_dir = Path(dump_dir) / EVICTED_SUBDIR if dump_dir else None
        if self._evicted_dir is not None and not options.get("tokenizer"):
            raise ValueError(
                f"trainer.v1.sampler.sampler_kwargs.evicted_data_dir for {type(self).__name__} needs "
                "sampler_kwargs.tokenizer (the model path) to decode the evicted trajectories"
            )
        self._tokenizer_path, self._tokenizer = options.get("tokenizer"), None
        self._sampled_steps: set[int] = set()  # steps this process has sampled: a resumed run rewrites a step's dump
        self._trainer_refill = refill_fn
        self._refilled = 0
        self._partition: str | None = None
        super().__init__(
            trainer_mode=trainer_mode,
            trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold,
            max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs={},
            refill_fn=self._bounded_refill if refill_fn is not None else None,
            filter_groups_metric=metric,
            train_batch_size=train_batch_size,
            gen_batch_size=gen_batch_size,
            max_inflight_gen_batches=int(groups.get("max_inflight_gen_batches", 1) or 1) if metric else 1,
            sync_refill_failed_groups=sync_refill,
            **kwargs,
        )

    @property
    def refill_allowance(self) -> int | None:
        """Prompts one training batch may send back to generation (``None``: no bound)."""
        if self.max_num_gen_batches <= 0:
            return None
        return (self.max_num_gen_batches - 1) * int(self.train_batch_size)

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        self._refilled, self._partition = 0, partition_id
        if self._evicted_dir is not None and partition_id != "val" and global_steps not in self._sampled_steps:
            self._sampled_steps.add(global_steps)  # a run resumed from a checkpoint generates this step anew
            (self._evicted_dir / f"{global_steps}.jsonl").unlink(missing_ok=True)
        return super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)

    def _evict_terminal_groups(self, global_steps: int, partition_id: str, eviction_reasons: Any) -> Any:
        """verl's eviction, plus ``<prefix>/filter_groups/evicted_metric_sum`` (module docstring); verl sums it over
        a step's polls as it sums the evicted count."""
        if self._evicted_dir is not None and eviction_reasons[1]:
            self._dump_evicted(global_steps, partition_id, eviction_reasons[1])
        evicted, stale, dapo, metrics = super()._evict_terminal_groups(global_steps, partition_id, eviction_reasons)
        counts = eviction_reasons[3]  # {shared value of the metric: evicted groups}
        if dapo and counts:
            key = f"{self._metrics_prefix(partition_id)}/filter_groups/evicted_metric_sum"
            metrics[key] = float(sum(value * count for value, count in counts.items()))
        return evicted, stale, dapo, metrics

    def _dump_evicted(self, global_steps: int, partition_id: str, uids: set[str]) -> None:
        """Append the trajectories of the groups dynamic sampling evicts to ``<evicted_dir>/<step>.jsonl``, as
        verl's ``_log_rollout_data`` dumps the training batch's (scores summed over the tokens, text without special
        tokens)."""
        keys = sorted(k for k in self.partitions[partition_id] if k.split("_")[0] in uids)
        if not keys:
            return
        if self._tokenizer is None:
            from verl.utils import hf_tokenizer

            self._tokenizer = hf_tokenizer(self._tokenizer_path)
        data = verl_buffer.tq.kv_batch_get(
            keys=keys, partition_id=partition_id, select_fields=["prompts", "responses", "rm_scores"]
        )

        def rows(field: str) -> list[Any]:
            value = data[field]
            return list(value.unbind()) if getattr(value, "is_nested", False) else list(value)

        decode = self._tokenizer.decode
        self._evicted_dir.mkdir(parents=True, exist_ok=True)
        with open(self._evicted_dir / f"{global_steps}.jsonl", "a", encoding="utf-8") as f:  # a step evicts in polls
            for key, prompt, response, score in zip(
                keys, rows("prompts"), rows("responses"), rows("rm_scores"), strict=True
            ):
                record = {"input": decode(prompt.tolist(), skip_special_tokens=True),
                          "output": decode(response.tolist(), skip_special_tokens=True),
                          "score": float(score.sum()), "step": global_steps, "uid": key}  # fmt: skip
                f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def _bounded_refill(self, num_prompts: int) -> Any:
        allowance = self.refill_allowance
        if allowance is not None and self._partition != "val" and self._refilled + num_prompts > allowance:
            raise GenerationBoundExceeded(
                f"dynamic sampling needed more than algorithm.filter_groups.max_num_gen_batches="
                f"{self.max_num_gen_batches} generation batches of {self.train_batch_size} prompts to fill one "
                f"training batch ({self._refilled} prompts refilled so far, {num_prompts} more asked): too many "
                "groups got the same reward for every response, i.e. the data is too easy or too hard for the policy. "
                "Check the reward (a judge that answers a constant does this), or raise max_num_gen_batches "
                "(0 = no bound)."
            )
        self._refilled += num_prompts
        return self._trainer_refill(num_prompts)
