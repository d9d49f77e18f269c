"""A reward manager as a user writes one: a plain .py file selected by path (not installed, not registered), for the
slow main_ppo test (``agentrag-verl train-local --reward-module <this file> --reward-name UserEvidenceReward``).

Score = the toy reward's length score of the model-generated text: a random tiny model's responses differ in length,
so GRPO groups get non-zero advantages and the actor must move. ``user_length_score`` in ``reward_extra_info`` shows
the manager's extras reach verl's metrics. Per sample it also writes what the batch holds (whether retrieved passages
are in the response, the agent loop's extra_fields keys, and the mask split when the reward loop receives
``response_mask``) to the JSONL named by ``+reward.reward_kwargs.evidence_path``.
"""

from __future__ import annotations

import json
import os

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from agentrag_verl.local_cpu.toy_reward import length_score

PASSAGE_MARK = "Doc 1(Title: "


class UserEvidenceReward(RewardManagerBase):
    def __init__(
        self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None, **kwargs
    ):
        super().__init__(config, tokenizer, compute_score)
        reward_kwargs = config.get("reward", {}).get("reward_kwargs", None) or {}
        self.evidence_path = str(reward_kwargs.get("evidence_path", "masking_evidence.jsonl"))

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]
        responses = item.batch["responses"]
        n = int(item.batch["attention_mask"][-responses.shape[-1] :].sum())
        ids = responses[:n].tolist()
        # verl 0.9.1's reward loop gets no response_mask (the trainer stores the agent loop's mask as loss_mask in
        # TransferQueue); when present, split the response by it.
        has_mask = "response_mask" in item.batch.keys()
        mask = item.batch["response_mask"][:n].tolist() if has_mask else None
        extra = item.non_tensor_batch.get("tool_extra_fields") or {}
        record = {
            "pid": os.getpid(),
            "response_tokens": n,
            "passages_in_response": PASSAGE_MARK in self.tokenizer.decode(ids),
            "mask_available": has_mask,
            "agentrag_format": extra.get("agentrag_format"),
            "agentrag_keys": sorted(k for k in extra if str(k).startswith("agentrag_")),
            "num_searches": extra.get("agentrag_num_searches"),
        }
        generated = self.tokenizer.decode(ids)
        if mask is not None:
            observed = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
            generated = self.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
            record.update(
                mask0_tokens=mask.count(0),
                mask1_tokens=mask.count(1),
                passages_in_masked=PASSAGE_MARK in observed,
                passages_in_trained=PASSAGE_MARK in generated,
            )
        with open(self.evidence_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        score = length_score(len(generated))  # the toy reward's shape: varies per sample, so GRPO has advantages
        return {"reward_score": score, "reward_extra_info": {"user_length_score": score}}
