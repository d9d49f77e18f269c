"""In-process stand-ins for verl's ``LLMServerClient`` (tests, demos): same ``generate`` signature and
``TokenOutput`` result, no Ray and no rollout server.

- :class:`ScriptedLLMClient`: a function of the decoded prompt returns the text; it is tokenized and cut at the
  request's stop strings and ``max_tokens`` as vLLM would (``include_stop_str_in_output=True``).
- :class:`HFLocalClient`: ``transformers`` ``generate`` on a local model (e.g. the tiny random Qwen2), one request
  at a time in a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ScriptedLLMClient", "HFLocalClient", "GenerateCall"]


@dataclass
class GenerateCall:
    """One recorded ``generate`` call."""

    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    prompt_text: str
    token_ids: list[int]


def _token_output(token_ids: list[int], logprobs: bool) -> Any:
    from verl.workers.rollout.replica import TokenOutput

    return TokenOutput(
        token_ids=token_ids,
        log_probs=[-0.5] * len(token_ids) if logprobs else None,
        stop_reason="completed",
        # LLMServerClient.generate adds the weight-version bounds the V1 trainer's metrics read.
        extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0},
    )


class ScriptedLLMClient:
    """``LLMServerClient`` whose replies come from ``responder(prompt_text, sampling_params) -> str``.

    The reply is cut after the first stop string of ``sampling_params["stop"]`` (kept, as vLLM's
    ``include_stop_str_in_output``), tokenized without special tokens, optionally followed by EOS when
    ``responder`` returns text ending in the tokenizer's EOS string, and cut to ``max_tokens``. Replies
    that raise propagate to the caller.

    A reply cut at a stop string continues like a model would: when the next call of the same ``request_id``
    extends exactly what was returned (nothing appended in between), it gets the rest of that reply without asking
    ``responder``. So a script can write a whole turn even when the loop stops inside it (HiPRAG's
    ``</conclusion>``).

    Args:
        tokenizer: The policy tokenizer.
        responder: Maps the decoded prompt (special tokens kept) and the sampling parameters to a reply.
    """

    def __init__(self, tokenizer: Any, responder: Callable[[str, dict[str, Any]], str]) -> None:
        self.tokenizer = tokenizer
        self.responder = responder
        self.calls: list[GenerateCall] = []
        self._pending: dict[str, tuple[list[int], str]] = {}

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        """verl's ``LLMServerClient.generate`` contract: token ids in, ``TokenOutput`` out."""
        await asyncio.sleep(0)  # let other trajectories interleave, as with a real server
        prompt_text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending[0] and list(prompt_ids[-len(pending[0]) :]) == pending[0]:
            text = pending[1]
        else:
            text = self.responder(prompt_text, dict(sampling_params))
        eos = self.tokenizer.eos_token or ""
        add_eos = bool(eos) and text.endswith(eos)
        if add_eos:
            text = text[: -len(eos)]
        rest = ""
        stops = [s for s in sampling_params.get("stop") or [] if s in text]
        if stops:
            end = min(text.find(s) + len(s) for s in stops)
            rest = text[end:] + (eos if add_eos else "")
            text, add_eos = text[:end], False
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if add_eos:
            ids.append(self.tokenizer.eos_token_id)
        max_tokens = sampling_params.get("max_tokens")
        if max_tokens is not None:
            ids = ids[: int(max_tokens)]
        if rest:
            self._pending[request_id] = (ids, rest)
        self.calls.append(GenerateCall(request_id, list(prompt_ids), dict(sampling_params), prompt_text, ids))
        return _token_output(ids, bool(sampling_params.get("logprobs")))


class HFLocalClient:
    """``LLMServerClient`` running ``transformers`` generation on a local causal LM (CPU is fine for tiny models).

    Honours ``max_tokens``, ``temperature`` (0 = greedy), ``top_p``, ``top_k`` and ``stop`` (generation stops
    at the first stop string; tokens after it within the same step are dropped).

    Args:
        model_dir: A directory loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer``.
        seed: Torch seed for sampling.
    """

    def __init__(self, model_dir: str, seed: int = 0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self._generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()
        self.calls: list[GenerateCall] = []

    def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> list[int]:
        import torch

        max_tokens = int(params.get("max_tokens") or 64)
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_k = int(params.get("top_k", -1) or -1)
        stops = list(params.get("stop") or [])
        eos = self.tokenizer.eos_token_id
        with self._lock, torch.no_grad():
            ids = torch.tensor([prompt_ids])
            out: list[int] = []
            past = None
            text = ""
            for _ in range(max_tokens):
                result = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = result.past_key_values
                logits = result.logits[0, -1].float()
                if temperature <= 0:
                    token = int(logits.argmax())
                else:
                    logits = logits / temperature
                    if top_k > 0:
                        kth = torch.topk(logits, top_k).values[-1]
                        logits[logits < kth] = -float("inf")
                    token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=self._generator))
                out.append(token)
                if token == eos:
                    break
                if stops:
                    text = self.tokenizer.decode(out, skip_special_tokens=True)
                    if any(s in text for s in stops):
                        break
                ids = torch.tensor([[token]])
            return out

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        """verl's ``LLMServerClient.generate`` contract: token ids in, ``TokenOutput`` out."""
        ids = await asyncio.get_running_loop().run_in_executor(
            None, self._generate, list(prompt_ids), dict(sampling_params)
        )
        self.calls.append(GenerateCall(request_id, list(prompt_ids), dict(sampling_params), "", ids))
        return _token_output(ids, bool(sampling_params.get("logprobs")))
