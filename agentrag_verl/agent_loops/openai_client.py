"""An ``LLMServerClient``-compatible adapter to an OpenAI-compatible *completions* endpoint, so the agent loops run
outside training (evaluation, demos) against ``vllm serve`` or any server speaking ``POST /v1/completions``.

Token ids in: the prompt is sent as a list of token ids (the OpenAI API's token-array prompt). Token ids out:
vLLM's ``"return_token_ids": true`` makes each choice carry ``token_ids``; with ``logprobs`` requested,
``choices[0].logprobs.token_logprobs`` are returned too. A server that returns only text (no ``token_ids``) is
handled by tokenizing the text with ``tokenizer`` — lossy (the ids may differ from what the model sampled), so a
warning is logged once; never train on such rollouts. Such servers also drop the stop string (OpenAI semantics);
the fallback restores it (vLLM's ``stop_reason``, else the closing tag left open), as the loops need it to read
the action.

>>> import asyncio
>>> client = OpenAICompletionsClient("http://127.0.0.1:8000/v1", model="policy")  # doctest: +SKIP
>>> asyncio.run(client.generate("r1", prompt_ids=[1, 2, 3], sampling_params={"max_tokens": 8}))  # doctest: +SKIP
TokenOutput(token_ids=[...], ...)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx

from agentrag_verl.http import RequestError, RetryPolicy, httpx_client, httpx_request

__all__ = ["OpenAICompletionsClient", "cut_at_stop"]

logger = logging.getLogger(__name__)

_PASS_THROUGH = (
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "include_stop_str_in_output",
    "repetition_penalty",
    "seed",
    "min_tokens",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
)


class OpenAICompletionsClient:
    """Implements ``generate(request_id, *, prompt_ids, sampling_params, **kw) -> TokenOutput`` over HTTP.

    Args:
        base_url: The server's OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: Model name sent in each request.
        tokenizer: Only for servers without ``token_ids`` in their answer (lossy fallback, see module docstring).
        api_key: Bearer token, if the server wants one.
        timeout_s: Timeout of one request.
        max_retries: Retries on connection errors, timeouts and HTTP 408 / 429 / 5xx answers, after 0.5 s, 1 s, ...
            (the package's retry policy, :mod:`agentrag_verl.http`).
        default_max_tokens: ``max_tokens`` when the sampling parameters carry none.
        http: The HTTP client to use; by default one with a ``timeout_s`` deadline and a pool of 256 connections.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        tokenizer: Any = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 2,
        default_max_tokens: int = 512,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.tokenizer = tokenizer
        self.max_retries = max_retries
        self.default_max_tokens = default_max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx_client(timeout_s, 256, headers)
        self._retry = RetryPolicy(max_retries, backoff_base_s=0.5)
        self._warned = False

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    def request_body(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> dict[str, Any]:
        """The ``/v1/completions`` body for verl-style sampling parameters."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in prompt_ids],
            "max_tokens": int(sampling_params.get("max_tokens") or self.default_max_tokens),
            "return_token_ids": True,
        }
        for key in _PASS_THROUGH:
            if sampling_params.get(key) is not None:
                body[key] = sampling_params[key]
        if body.get("top_k") is not None and int(body["top_k"]) <= 0:
            body.pop("top_k")  # verl's "-1 = off"; plain OpenAI servers reject it
        if sampling_params.get("logprobs"):
            body["logprobs"] = 1
        return body

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        """verl's ``LLMServerClient.generate`` contract: token ids in, ``TokenOutput`` out.

        Raises:
            RuntimeError: When the server fails after the retries or answers 4xx; the message holds its answer.
        """
        from verl.workers.rollout.replica import TokenOutput

        body = self.request_body(list(prompt_ids), dict(sampling_params))
        headers = {"X-Request-Id": str(request_id)}
        try:
            response = await self._retry.call(
                lambda: httpx_request(self._http, "POST", self.url, json=body, headers=headers)
            )
        except RequestError as e:
            raise RuntimeError(
                f"completions request to {self.url} failed after {e.attempts} attempt(s): {e.message}. Check that "
                f"the server is up and serves model {self.model!r}."
            ) from None
        return self._token_output(response.json(), body, TokenOutput)

    def _token_output(self, data: dict[str, Any], body: dict[str, Any], token_output_cls: type) -> Any:
        want_logprobs = bool(body.get("logprobs"))
        choice = (data.get("choices") or [{}])[0]
        token_ids = choice.get("token_ids")
        if token_ids is None:
            if self.tokenizer is None:
                raise RuntimeError(
                    "The completions server returned no token_ids (vLLM: pass return_token_ids) and no tokenizer "
                    "was given to OpenAICompletionsClient to tokenize the text."
                )
            if not self._warned:
                logger.warning("completions server returned no token_ids; tokenizing the text instead (lossy)")
                self._warned = True
            text = choice.get("text") or ""
            if body.get("include_stop_str_in_output") and choice.get("finish_reason") == "stop":
                text += _dropped_stop(text, body.get("stop") or [], choice.get("stop_reason"))
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
        log_probs = None
        if want_logprobs:
            token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if token_logprobs is not None and len(token_logprobs) == len(token_ids):
                log_probs = [float(x) if x is not None else 0.0 for x in token_logprobs]
        finish = choice.get("finish_reason")
        return token_output_cls(
            token_ids=[int(t) for t in token_ids],
            log_probs=log_probs,
            stop_reason="completed" if finish in ("stop", "length") else finish,
            extra_fields={"finish_reason": finish},
        )


def _dropped_stop(text: str, stops: list[str], stop_reason: Any) -> str:
    """The stop string a server without ``include_stop_str_in_output`` cut off (text-only fallback).

    vLLM names it in ``stop_reason``; otherwise a closing tag ``</x>`` whose ``<x>`` is still open is taken.

    >>> _dropped_stop("<think>a</think><search> q ", ["</search>", "</answer>"], None)
    '</search>'
    """
    if isinstance(stop_reason, str) and stop_reason in stops and not text.endswith(stop_reason):
        return stop_reason
    best, best_pos = "", -1
    for stop in stops:
        if stop.startswith("</") and not text.endswith(stop):
            opening = "<" + stop[2:]
            pos = text.rfind(opening)
            if pos > text.rfind(stop) and pos > best_pos:
                best, best_pos = stop, pos
    return best


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the end of the earliest stop string, kept (as vLLM's ``include_stop_str_in_output``); a stop
    token may decode to more characters than the stop string, and a text-only server may run past it. Empty stop
    strings are ignored.

    >>> cut_at_stop("<search>q</search>\\nx", ("</search>", "</answer>"))
    '<search>q</search>'
    >>> cut_at_stop("So the next query is <query>q</query> and more", ["</query>", "</answer>", ""])
    'So the next query is <query>q</query>'
    """
    ends = [i + len(s) for s in stops if s and (i := text.find(s)) >= 0]
    return text[: min(ends)] if ends else text
