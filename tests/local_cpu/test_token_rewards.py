"""The token-reward dump of ``train-local --dump-token-rewards`` (used in tests/rewards/test_main_ppo_autosearch.py)."""

from __future__ import annotations

import json

import torch

from agentrag_verl.local_cpu import token_rewards


def test_rows_list_nonzero_rewards_with_their_mask():
    from verl import DataProto

    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.tensor([[0.0, 0.5, 0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]),
            "response_mask": torch.tensor([[1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]]),
        }
    )
    assert token_rewards.rows(data, ["a", "b"]) == [
        {"key": "a", "rewards": [[1, 0.5, 1], [4, 1.0, 1]], "mask_ones": 3, "last_mask_one": 4},
        {"key": "b", "rewards": [], "mask_ones": 3, "last_mask_one": 2},
    ]


def test_patch_appends_rows_and_calls_through(tmp_path, monkeypatch):
    import types

    from verl import DataProto

    path = tmp_path / "dump.jsonl"
    monkeypatch.setenv(token_rewards.ENV, str(path))
    calls = []
    module = types.ModuleType("fake_trainer_base")
    setattr(module, token_rewards.TARGET, lambda data, **kw: calls.append(kw) or data)
    token_rewards._patch(module)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor([[0.0, 2.0]]), "response_mask": torch.tensor([[1, 1]])}
    )
    assert getattr(module, token_rewards.TARGET)(data, batch_keys=["k"], gamma=1.0) is data
    assert calls == [{"batch_keys": ["k"], "gamma": 1.0}]
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"key": "k", "rewards": [[1, 2.0, 1]], "mask_ones": 2, "last_mask_one": 1}
    ]
