"""Dump the trainer's token-level rewards right before advantage estimation (``train-local --dump-token-rewards``).

Per-step rewards (AutoSearch) are only right if they reach verl's GAE at the right tokens. This hook wraps
``compute_advantage_for_multi_trajectories`` of verl's V1 trainer (``verl.trainer.ppo.v1.trainer_base``), which
receives the batch whose ``token_level_rewards`` (= ``token_level_scores`` = ``rm_scores`` without a KL penalty in
the reward) feed the estimator, and appends one JSON line per sample to the file named by
``AGENTRAG_DUMP_TOKEN_REWARDS``::

    {"key": "<uid>", "rewards": [[position, reward, response_mask at position], ...], "mask_ones": 57,
     "last_mask_one": 96}

``rewards`` lists the non-zero positions only. Active only in the local CPU mode, only when the variable is set.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from types import ModuleType

from agentrag_verl.local_cpu._hooks import PatchTargetError, when_imported

ENV = "AGENTRAG_DUMP_TOKEN_REWARDS"
TARGET_MODULE = "verl.trainer.ppo.v1.trainer_base"
TARGET = "compute_advantage_for_multi_trajectories"

_write_lock = threading.Lock()


def rows(data, keys) -> list[dict]:
    """The dump records of a ``DataProto`` batch (``token_level_rewards``, ``response_mask``)."""
    rewards = data.batch["token_level_rewards"].float().cpu()
    mask = data.batch["response_mask"].cpu()
    out = []
    for i, key in enumerate(keys):
        nz = rewards[i].nonzero().flatten().tolist()
        ones = mask[i].nonzero().flatten().tolist()
        out.append(
            {
                "key": str(key),
                "rewards": [[p, float(rewards[i, p]), int(mask[i, p])] for p in nz],
                "mask_ones": len(ones),
                "last_mask_one": ones[-1] if ones else -1,
            }
        )
    return out


def _patch(module: ModuleType) -> None:
    original = getattr(module, TARGET, None)
    if original is None:
        raise PatchTargetError(
            f"{TARGET_MODULE}.{TARGET} not found; the token-reward dump needs verl 0.9.1's V1 trainer"
        )
    path = os.environ[ENV]

    @functools.wraps(original)
    def dumping(data, *args, **kwargs):
        records = rows(data, kwargs.get("batch_keys") or range(len(data)))
        with _write_lock, open(path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        return original(data, *args, **kwargs)

    setattr(module, TARGET, dumping)


def install() -> None:
    """Register the dump when ``AGENTRAG_DUMP_TOKEN_REWARDS`` names a file."""
    if os.environ.get(ENV):
        when_imported(TARGET_MODULE, _patch)
