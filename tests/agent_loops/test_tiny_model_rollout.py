"""The tiny random Qwen2 generating through verl's AgentLoopWorker: no crash, consistent masks, lengths in budget."""

from __future__ import annotations

import pytest

from agentrag_verl.agent_loops import agent_name
from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.local_clients import HFLocalClient

from .conftest import make_batch, set_options

RESPONSE_LENGTH = 48  # small: a random model rarely stops by itself, so every sample runs to the budget


@pytest.fixture(scope="module")
def hf_client(tiny_model_dir):
    return HFLocalClient(str(tiny_model_dir), seed=0)


@pytest.mark.parametrize("fmt", ["searchr1", "hiprag", "searchp1", "reasonrag"])
async def test_tiny_model_rollout(make_worker, retriever, hf_client, fmt):
    worker = make_worker(RESPONSE_LENGTH)
    set_options(worker, retriever_url=retriever.url)
    worker.llm_client = hf_client
    batch = make_batch(["Who founded Marrow & Tilde Instruments?", "Where is Asvik?"], agent_name(fmt), fmt)
    out = await worker.generate_sequences(batch)
    responses, mask = out.batch["responses"], out.batch["response_mask"]
    attention = out.batch["attention_mask"][:, -RESPONSE_LENGTH:]
    assert responses.shape == (2, RESPONSE_LENGTH)
    # Mask 1 only on real (non-padding) tokens; padding is mask 0.
    assert bool(((mask == 1) <= (attention == 1)).all())
    for i in range(2):
        n = int(attention[i].sum())
        assert 0 < n <= RESPONSE_LENGTH
        for step in out.non_tensor_batch[F.STEPS][i]:
            assert 0 <= step[F.STEP_END_TOKEN_INDEX] < n and int(mask[i, step[F.STEP_END_TOKEN_INDEX]]) == 1
        for key in F.ALL_KEYS:
            assert key in out.non_tensor_batch
