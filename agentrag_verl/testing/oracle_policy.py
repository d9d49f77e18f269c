"""A scripted "oracle" policy inside our real search agent loop, for ``main_ppo`` integration tests of rewards.

A random tiny policy almost never writes a well-formed, correct trajectory, so inside ``main_ppo`` a reward
manager's best-case paths (HiPRAG's judges run only when A = F = 1; AutoSearch's retrieval-step rewards need a
search step) would never run. :class:`OracleAgentLoop` is
:class:`~agentrag_verl.agent_loops.search_agent_loop.SearchAgentLoop` with its ``server_manager`` replaced by a
:class:`~agentrag_verl.agent_loops.local_clients.ScriptedLLMClient` that knows the row's gold answer: every
trajectory is one search step (the question as query; the loop retrieves and injects the passages), then (HiPRAG)
one non-search step, then the gold answer. Everything else is real: the retriever call, observation masking, the
``extra_fields``, whatever reward manager the run uses, and the auxiliary generations (HiPRAG re-answers,
AutoSearch intermediate answers), which go to the real policy unless ``oracle_aux: true`` makes the oracle answer
them too (with the gold, so that rewards built on them have known values). The trainer then trains the actor on
these scripted tokens; rollout log-probs are a constant, so ``rollout_probs_diff`` metrics are meaningless here.

Formats: ``hiprag``, ``searchr1``, ``autosearch``. Use it from an agent-loop YAML
(``_target_: agentrag_verl.testing.oracle_policy.OracleAgentLoop`` plus the usual loop keys); dataset rows need
``reward_model.ground_truth``. Never use it to train a model.
"""

from __future__ import annotations

from typing import Any

from agentrag_verl.agent_loops.local_clients import ScriptedLLMClient
from agentrag_verl.agent_loops.search_agent_loop import SearchAgentLoop, question_of
from agentrag_verl.formats import get_format

__all__ = ["OracleAgentLoop", "oracle_reply"]

_REANSWER_MARK = get_format("hiprag").prompts["reanswer"].user.split("{query}")[0].strip()
_INTERMEDIATE_MARK = get_format("autosearch").prompts["intermediate_answer"].user.split("\n")[0]


def oracle_reply(fmt: str, prompt: str, question: str, gold: str, eos: str) -> str:
    """The oracle's next generation in format ``fmt`` given the decoded prompt (the conversation so far).

    >>> oracle_reply("hiprag", "...Question: Who? <|im_start|>assistant\\n", "Who?", "Ada", "<eos>")
    '<think><step><reasoning>I need to look up: Who?</reasoning><search>Who?</search>'
    >>> oracle_reply("hiprag", "...</context>\\n<conclusion>", "Who?", "Ada", "<eos>")[:41]
    'The passages say Ada.</conclusion></step>'
    >>> oracle_reply("searchr1", "...</information>\\n\\n", "Who?", "Ada", "")
    '<think>The passages say Ada.</think>\\n<answer>Ada</answer>'
    """
    if _REANSWER_MARK in prompt or _INTERMEDIATE_MARK in prompt:  # auxiliary generations
        return f"<think>I know this.</think>\n<answer>{gold}</answer>{eos}"
    if fmt == "hiprag":
        if prompt.rstrip().endswith("<conclusion>"):  # the loop injected the passages after our search
            return (
                f"The passages say {gold}.</conclusion></step>"
                f"<step><reasoning>So the answer is {gold}.</reasoning><conclusion>{gold}</conclusion></step>"
                f"</think>\n<answer>{gold}</answer>{eos}"
            )
        return f"<think><step><reasoning>I need to look up: {question}</reasoning><search>{question}</search>"
    if fmt in ("searchr1", "autosearch"):
        if prompt.rstrip().endswith("</information>"):
            return f"<think>The passages say {gold}.</think>\n<answer>{gold}</answer>{eos}"
        return f"<think>I need to look up: {question}</think>\n<search> {question} </search>"
    raise ValueError(f"the oracle policy writes hiprag, searchr1 or autosearch trajectories, not {fmt!r}")


class OracleAgentLoop(SearchAgentLoop):
    """Search agent loop whose policy is the scripted oracle of :func:`oracle_reply` (tests only).

    An instance is of the format's own agent loop class too (its method's ``agent_loop``, e.g. the loop that writes
    re-answers), so the method's auxiliary generations run as in training.

    Args:
        oracle_aux: The oracle also writes the auxiliary generations (default: the real policy does).
        **kwargs: As :class:`~agentrag_verl.agent_loops.search_agent_loop.SearchAgentLoop`.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> OracleAgentLoop:
        if cls is OracleAgentLoop and kwargs.get("format"):
            cls = _oracle_class(str(kwargs["format"]))
        return super().__new__(cls)

    def __init__(self, *args: Any, oracle_aux: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.oracle_aux = bool(oracle_aux)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        from agentrag_verl.rewards.managers.sample import gold_answers

        golds = gold_answers((kwargs.get("reward_model") or {}).get("ground_truth"))
        if not golds:
            raise ValueError("OracleAgentLoop needs reward_model.ground_truth in every dataset row")
        fmt, question, gold, eos = self.format_name, question_of(kwargs), golds[0], self.tokenizer.eos_token or ""
        self.server_manager = ScriptedLLMClient(
            self.tokenizer, lambda prompt, params: oracle_reply(fmt, prompt, question, gold, eos)
        )
        if self.oracle_aux:
            self.aux_server_manager = self.server_manager
        return await super().run(sampling_params, **kwargs)


_ORACLE_CLASSES: dict[str, type] = {}


def _oracle_class(format_name: str) -> type:
    """:class:`OracleAgentLoop` mixed into the agent loop class of the format's method."""
    from agentrag_verl.registry import get_method, load_object

    target = get_method(format_name).agent_loop
    if target not in _ORACLE_CLASSES:
        module, _, name = target.rpartition(".")
        base = load_object(f"{module}:{name}")
        _ORACLE_CLASSES[target] = (
            OracleAgentLoop if base is SearchAgentLoop else type(f"Oracle{base.__name__}", (OracleAgentLoop, base), {})
        )
    return _ORACLE_CLASSES[target]
