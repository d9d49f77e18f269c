"""The MCTS policy: one ReasonRAG stage output per call from any OpenAI-compatible endpoint (ReasonRAG §2.2).

The paper expands the tree with GPT-4o; any model works. :class:`PolicyClient` sends the stage's chat messages
(Figure 12 / 13 prompts from :mod:`agentrag_verl.methods.reasonrag.grammar`) either

- to ``POST {base_url}/chat/completions`` (``api="chat"``: hosted APIs, ``vllm serve`` with a chat template), or
- to ``POST {base_url}/completions`` with the messages rendered by a Hugging Face tokenizer's chat template
  (``api="completions"``: base models or servers without chat support; needs ``tokenizer``).

Each call stops at the stage's closing tag (``</query>``/``</answer>`` for Reasoning, ``</evidence>`` for
Grounding). OpenAI semantics drop the stop string from the text; it is restored (vLLM's ``stop_reason``, else the
closing tag whose opening tag is still open), so the text parses like the agent loop's stage outputs.

Every call carries a ``seed`` chosen by the caller (the MCTS derives it from the question id and the node), so a
server that honours seeds (vLLM) reproduces a tree, and sibling expansions of one node are different samples.

Failures follow the package's retry policy (:mod:`agentrag_verl.http`): timeouts, connection errors, HTTP 408, 429
and 5xx are retried with exponential backoff; other 4xx fail at once (:class:`PolicyError` names the endpoint and
what to fix). The API key is read from the environment variable named
by ``api_key_env`` and never logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from agentrag_verl.agent_loops.openai_client import _dropped_stop, cut_at_stop
from agentrag_verl.http import RequestError, Response, RetryPolicy, httpx_client, httpx_request

__all__ = ["Policy", "PolicyConfig", "PolicyClient", "PolicyError"]

logger = logging.getLogger(__name__)

Message = Mapping[str, str]


class Policy(Protocol):
    """What the MCTS needs from a policy: one stage output for chat ``messages``."""

    async def generate(self, messages: Sequence[Message], *, stop: Sequence[str], seed: int) -> str:
        """Return the generated text, cut after the first stop string (kept)."""
        ...


class PolicyError(RuntimeError):
    """The policy endpoint failed after its retries, or rejected the request."""


@dataclass(frozen=True)
class PolicyConfig:
    """Where the MCTS policy lives and how it samples.

    >>> config = PolicyConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct", api_key_env="none")
    >>> config.api, config.api_key_env
    ('chat', None)
    """

    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible API root including the version path (``https://api.openai.com/v1`` for GPT-4o)."""

    model: str = "gpt-4o-2024-05-13"
    """Model name sent with every request (the authors' MCTS policy is ``gpt-4o-2024-05-13``)."""

    api: Literal["chat", "completions"] = "chat"
    """``chat``: ``/chat/completions`` with the messages; ``completions``: ``/completions`` with the messages
    rendered by ``tokenizer``'s chat template."""

    tokenizer: str | None = None
    """Hugging Face tokenizer (path or hub name) whose chat template renders prompts for ``api=completions``."""

    api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the API key; ``None`` for an endpoint without authentication."""

    temperature: float = 1.0
    """Sampling temperature. The paper does not state it; sibling expansions need diverse samples, so 1.0."""

    top_p: float = 1.0
    """Nucleus sampling."""

    max_tokens: int = 512
    """Token limit of one stage output (Table 1: chosen steps have 65.5 tokens on average, 625 at most)."""

    extra_params: Mapping[str, Any] = field(default_factory=dict)
    """Further request-body fields, e.g. ``{"top_k": 20}`` or vLLM's ``{"chat_template_kwargs": {...}}``."""

    send_seed: bool = True
    """Send the per-call ``seed`` (reproducible trees on vLLM); turn off for servers that reject it."""

    max_concurrency: int = 64
    """Most requests in flight at once across all questions."""

    timeout_s: float = 120.0
    """Deadline of one HTTP attempt."""

    max_retries: int = 4
    """Retries after the first attempt on timeouts, connection errors, HTTP 408, 429 and 5xx."""

    backoff_s: float = 1.0
    """First backoff delay; retry ``i`` (0-based) waits ``backoff_s * 2**i`` plus up to 25% jitter, at most 30 s."""

    def __post_init__(self) -> None:
        if isinstance(self.api_key_env, str) and self.api_key_env.strip().lower() in ("none", "null", ""):
            object.__setattr__(self, "api_key_env", None)  # "none": no API key, as every command spells it
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"policy.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}"
            )
        if self.api not in ("chat", "completions"):
            raise ValueError(f"policy.api must be 'chat' or 'completions', got {self.api!r}")
        if self.api == "completions" and not self.tokenizer:
            raise ValueError(
                "policy.api=completions renders the chat messages with a tokenizer's chat template: set "
                "policy.tokenizer (e.g. --policy-tokenizer Qwen/Qwen2.5-7B-Instruct), or use policy.api=chat"
            )
        if self.max_concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0 or self.max_tokens < 1:
            raise ValueError(
                "policy.max_concurrency and policy.max_tokens must be >= 1, policy.max_retries >= 0 and "
                f"policy.timeout_s > 0; got {self.max_concurrency}, {self.max_tokens}, {self.max_retries}, "
                f"{self.timeout_s}"
            )
        reserved = {"model", "messages", "prompt", "stop", "seed", "stream", "n"} & set(self.extra_params)
        if reserved:
            raise ValueError(f"policy.extra_params must not set {sorted(reserved)}")


class PolicyClient:
    """:class:`Policy` over HTTP (see the module docstring).

    Args:
        config: Endpoint and sampling options.
        http: An HTTP client to use (tests); by default one is created per event loop.

    Raises:
        ValueError: The API key variable is named but unset.
    """

    def __init__(self, config: PolicyConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        headers = {}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "").strip()
            if not key:
                raise ValueError(
                    f"Policy API key missing: environment variable {config.api_key_env} is not set or empty "
                    f"(endpoint {config.base_url}). Export it, or pass --policy-api-key-env none for an endpoint "
                    "without a key (e.g. a local vLLM server)."
                )
            headers["Authorization"] = f"Bearer {key}"
        self._headers = headers
        self._http = http
        self._own_http = http is None
        self._semaphore: asyncio.Semaphore | None = None
        self._retry = RetryPolicy(config.max_retries, config.backoff_s, backoff_max_s=30.0)
        self._tokenizer: Any = None
        path = "/chat/completions" if config.api == "chat" else "/completions"
        self.url = config.base_url.rstrip("/") + path
        self.calls = 0
        self.retries = 0

    def __repr__(self) -> str:  # never shows the key
        c = self.config
        return f"PolicyClient(url={self.url!r}, model={c.model!r}, api_key_env={c.api_key_env!r})"

    async def aclose(self) -> None:
        """Close the connection pool (if this client created it)."""
        if self._http is not None and self._own_http:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx_client(self.config.timeout_s, self.config.max_concurrency, self._headers)
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        return self._http

    def render(self, messages: Sequence[Message]) -> str:
        """The ``/completions`` prompt: ``messages`` through the tokenizer's chat template."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.config.tokenizer)
            if not getattr(self._tokenizer, "chat_template", None):
                raise ValueError(
                    f"Tokenizer {self.config.tokenizer!r} has no chat template, so the ReasonRAG stage messages cannot "
                    "be rendered for policy.api=completions; use an instruct model's tokenizer or policy.api=chat"
                )
        return self._tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
        )

    def request_body(self, messages: Sequence[Message], stop: Sequence[str], seed: int | None) -> dict[str, Any]:
        """The JSON body of one call."""
        c = self.config
        body: dict[str, Any] = {
            "model": c.model,
            "temperature": c.temperature,
            "top_p": c.top_p,
            "max_tokens": c.max_tokens,
            "stop": list(stop),
            **c.extra_params,
        }
        if c.api == "chat":
            body["messages"] = [dict(m) for m in messages]
        else:
            body["prompt"] = self.render(messages)
        if c.send_seed and seed is not None:
            body["seed"] = int(seed)
        return body

    async def generate(self, messages: Sequence[Message], *, stop: Sequence[str], seed: int | None = None) -> str:
        """One stage output (see :class:`Policy`).

        Raises:
            PolicyError: After the retries, on a non-retryable 4xx, or on a body that is not a completion.
        """
        http = self._client()
        semaphore = self._semaphore
        assert semaphore is not None
        body = self.request_body(messages, stop, seed)
        c = self.config

        async def attempt() -> Response:
            async with semaphore:
                self.calls += 1
                return await httpx_request(http, "POST", self.url, json=body)

        try:
            response = await self._retry.call(attempt, on_retry=self._log_retry)
        except RequestError as e:
            if e.kind == "client_error":
                raise PolicyError(
                    f"Policy endpoint {self.url} rejected the request with {e.message}. Check policy.model="
                    f"{c.model!r}, policy.api={c.api!r} and the key in {c.api_key_env or 'no key'}."
                ) from None
            error = f"timeout after {c.timeout_s:g}s" if e.kind == "timeout" and e.status is None else e.message
            raise PolicyError(
                f"Policy endpoint {self.url} failed after {e.attempts} attempts ({error}). Check that the server "
                f"is up and serves model {c.model!r}, or raise policy.timeout_s / policy.max_retries."
            ) from None
        return self._read(response, stop)

    def _log_retry(self, error: RequestError, retry: int, delay: float) -> None:
        self.retries += 1
        logger.warning(
            "policy call failed (%s); retry %d/%d in %.1fs", error.message, retry, self.config.max_retries, delay
        )

    def _read(self, response: Response, stop: Sequence[str]) -> str:
        try:
            choice = response.json()["choices"][0]
            text = choice["message"]["content"] if self.config.api == "chat" else choice["text"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PolicyError(
                f"Policy endpoint {self.url} answered a body that is not a {self.config.api} completion "
                f"({type(exc).__name__}: {exc}): {response.detail()}"
            ) from None
        text = text or ""
        if choice.get("finish_reason") == "stop":
            text += _dropped_stop(text, list(stop), choice.get("stop_reason"))
        return cut_at_stop(text, stop)
