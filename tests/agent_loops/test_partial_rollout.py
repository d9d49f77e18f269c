"""Our agent loops under partial rollout, as verl's async trainers run them (``trainer.v1.trainer_mode:
colocate_async`` / ``separate_async``): at a weight update the rollout server aborts every unfinished request, and
verl's ``FullyAsyncLLMServerClient`` resumes each one under the new weights from the tokens it has, hiding the
interruption from the loop.

verl's real ``AgentLoopWorker`` and its real ``FullyAsyncLLMServerClient`` (its resume loop, budget bookkeeping and
weight-version bounds) run in-process; only the server's ``generate`` below it is scripted, and it behaves as vLLM
and SGLang do where it matters here: stop strings are looked for in what a request generates, so a resumed request
does not see the part of a stop string generated before the abort.

A trajectory interrupted anywhere, inside a policy turn (a stop string split included), inside an auxiliary
generation, or while its search runs, must give the response, mask, steps, auxiliary texts and per-step rewards of
an uninterrupted one, and say which weight versions produced it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from verl.workers.rollout import llm_server
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from agentrag_verl.agent_loops import agent_name
from agentrag_verl.agent_loops import fields as F
from agentrag_verl.agent_loops.search_agent_loop import SearchAgentLoop

from .conftest import make_batch, set_options
from .test_budgets_and_steps import AutoSearchScript, manager, sample_of, score
from .test_search_agent_loop import QUESTION, TurnScript, answer_turn, search_turn, unpad


@dataclass
class Call:
    request_id: str
    aux: bool
    resumed: bool
    version: int
    token_ids: list[int]
    aborted: bool


@dataclass
class _Reply:
    prompt: list[int]  # the prompt the model started this reply from
    tokens: list[int]  # the whole reply it writes

    def continued(self, prompt_ids: list[int]) -> int | None:
        """How much of the reply ``prompt_ids`` already holds, when it is the reply's prompt followed by a prefix of
        the reply (a resumed request, or the loop's next call after it stopped inside the reply)."""
        head, tail = list(prompt_ids[: len(self.prompt)]), list(prompt_ids[len(self.prompt) :])
        return len(tail) if head == self.prompt and tail == self.tokens[: len(tail)] else None


class ScriptedServer(LLMServerClient):
    """The rollout server, scripted: ``responder(prompt_text, params)`` says what the model writes; ``abort(call)``
    says after how many tokens the call is aborted by a weight update (``None``: not), after which the server serves
    the next weight version; ``bump_per_turn`` moves the version at each new trajectory turn instead (weights updated
    while the search before it ran)."""

    def __init__(self, tokenizer: Any, responder: Callable[[str, dict], str], config: Any) -> None:
        self.config = config  # FullyAsyncLLMServerClient reads the rollout's response_length from it
        self.tokenizer, self.responder = tokenizer, responder
        self.abort: Callable[[Call], int | None] = lambda call: None
        self.bump_per_turn = False
        self.version = 0
        self.calls: list[Call] = []
        self.replies: dict[str, _Reply] = {}
        self.ran_past_a_stop = 0  # resumed generations that went past a stop string split by their abort

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        tok = self.tokenizer
        stop = list(sampling_params.get("stop") or [])
        aux = not stop  # our auxiliary generations carry no stop strings
        reply = self.replies.get(request_id)
        at = reply.continued(prompt_ids) if reply else None
        resumed = bool(at)
        if at is None:
            if self.bump_per_turn and not aux and self.calls:
                self.version += 1
            text = self.responder(tok.decode(list(prompt_ids), skip_special_tokens=False), dict(sampling_params))
            eos = tok.eos_token or ""
            tokens = tok.encode(text.removesuffix(eos), add_special_tokens=False)
            reply = _Reply(list(prompt_ids), tokens + ([tok.eos_token_id] if eos and text.endswith(eos) else []))
            self.replies[request_id], at = reply, 0
        new = reply.tokens[at:][: int(sampling_params.get("max_tokens", len(reply.tokens)))]
        # stop strings are found in this request's own output, as the engines look for them
        for n in range(1, len(new) + 1):
            if any(s in tok.decode(new[:n]) for s in stop):
                new = new[:n]
                break
        call = Call(request_id, aux, resumed, self.version, new, aborted=False)
        cut = self.abort(call)
        if cut is not None and cut < len(new):
            call.token_ids, call.aborted = new[:cut], True
            new = new[:cut]
        before, after = tok.decode(reply.tokens[:at]), tok.decode(new)
        if resumed and any(s in before + after and s not in before and s not in after for s in stop):
            self.ran_past_a_stop += 1
        self.calls.append(call)
        version = self.version
        if call.aborted:
            self.version += 1  # the weight update the abort made way for
        return TokenOutput(
            token_ids=new,
            log_probs=[-0.5] * len(new) if sampling_params.get("logprobs") else None,
            stop_reason="aborted" if call.aborted else "completed",
            extra_fields={"global_steps": version},
        )


class PartialRolloutClient(FullyAsyncLLMServerClient, ScriptedServer):
    """verl's resuming client over the scripted server (its ``super().generate`` is the server's)."""

    __init__ = ScriptedServer.__init__


@pytest.fixture(autouse=True)
def _no_resume_wait(monkeypatch):
    async def no_wait(seconds: float) -> None:
        return None

    # verl's client waits 1 s before resuming an aborted request; nothing here needs the wait
    monkeypatch.setattr(llm_server, "asyncio", SimpleNamespace(sleep=no_wait))


@dataclass
class Run:
    out: Any
    client: PartialRolloutClient
    fields: dict[str, Any] = field(default_factory=dict)


async def rollout(worker: Any, fmt: str, script: TurnScript, configure=None, **options: Any) -> Run:
    set_options(worker, **options)
    client = PartialRolloutClient(worker.tokenizer, script, worker.config)
    if configure:
        configure(client)
    worker.llm_client = client
    out = await worker.generate_sequences(make_batch([QUESTION], agent_name(fmt), fmt))
    fields = {k: out.non_tensor_batch[k][0] for k in (*F.ALL_KEYS, "min_global_steps", "max_global_steps")}
    return Run(out, client, fields)


def abort_inside_stop_strings(tokenizer: Any, stops: tuple[str, ...]) -> Callable[[Call], int | None]:
    """Abort the first attempt of every policy turn inside the stop string it ends with (after a token that ends
    strictly inside it; just before it where it is one token), and every auxiliary generation halfway."""

    def abort(call: Call) -> int | None:
        ids = call.token_ids
        if call.resumed or len(ids) < 2:
            return None
        text = tokenizer.decode(ids)
        found = sorted((text.find(s), s) for s in stops if s in text)
        if call.aux or not found:
            return len(ids) // 2
        start, stop = found[0]
        lengths = [len(tokenizer.decode(ids[:n])) for n in range(len(ids) + 1)]
        inside = [n for n in range(1, len(ids)) if start < lengths[n] < start + len(stop)]
        return inside[0] if inside else max(1, next(n for n in range(len(ids)) if lengths[n + 1] > start))

    return abort


TAIL = "\n<information>made up by the model</information>"
"""What a model writes past a stop string when nothing stops it (it imitates an observation)."""


def turns_of(fmt: str) -> list[str]:
    """Two searches and the answer, each turn going on past its stop string as a model would if not stopped."""
    turns = [search_turn(fmt, "Orla Brennick"), search_turn(fmt, "Marrow & Tilde"), answer_turn(fmt, "1934")]
    return [t[: -len("<|im_end|>")] + TAIL + "<|im_end|>" if t.endswith("<|im_end|>") else t + TAIL for t in turns]


def same_trajectory(a: Run, b: Run) -> None:
    assert unpad(a.out) == unpad(b.out)  # response ids and mask: no token lost, repeated or added
    for key in (F.STEPS, F.REANSWERS, F.INTERMEDIATE_ANSWERS, F.NUM_SEARCHES, F.BUDGET_EXHAUSTED):
        assert a.fields[key] == b.fields[key], key


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("hiprag", {"reanswers": True}), ("autosearch", {}), ("searchr1", {}), ("multistage", {})],
)
async def test_aborted_and_resumed_turns_leave_the_uninterrupted_layout(make_worker, retriever, fmt, options):
    worker = make_worker()
    turns = turns_of(fmt)
    script = AutoSearchScript(fmt, turns) if fmt == "autosearch" else TurnScript(fmt, turns)
    options = {"retriever_url": retriever.url, **options}
    straight = await rollout(worker, fmt, script, **options)
    stops = ("</search>", "</answer>", "</conclusion>")

    def interrupt(client: PartialRolloutClient) -> None:
        client.abort = abort_inside_stop_strings(worker.tokenizer, stops)

    interrupted = await rollout(worker, fmt, script, configure=interrupt, **options)
    aborts = [c for c in interrupted.client.calls if c.aborted]
    assert len([c for c in aborts if not c.aux]) >= 3  # every policy turn was interrupted
    assert interrupted.client.ran_past_a_stop >= 1  # a stop string split by an abort: the engine ran past it
    same_trajectory(straight, interrupted)
    # which weights produced it: each abort moved the version on; verl's own bounds are the trajectory's
    versions = interrupted.fields[F.WEIGHT_VERSIONS]
    turns_versions = [c.version for c in interrupted.client.calls if not c.aux]
    assert versions[F.VERSIONS_TRAJECTORY] == [min(turns_versions), max(turns_versions)]
    assert versions[F.VERSIONS_TRAJECTORY][1] > 0 and straight.fields[F.WEIGHT_VERSIONS][F.VERSIONS_TRAJECTORY] == [
        0,
        0,
    ]
    assert (interrupted.fields["min_global_steps"], interrupted.fields["max_global_steps"]) == tuple(
        versions[F.VERSIONS_TRAJECTORY]
    )
    aux_calls = [c for c in interrupted.client.calls if c.aux]
    if aux_calls:  # an auxiliary generation interrupted halfway gives the same text (compared above)
        assert any(c.aborted for c in aux_calls)
        assert versions[F.VERSIONS_AUX] == [min(c.version for c in aux_calls), max(c.version for c in aux_calls)]
    else:
        assert versions[F.VERSIONS_AUX] is None


async def test_a_stop_string_split_by_an_abort_was_kept_whole(make_worker, retriever, monkeypatch):
    """The part of the loop that makes the layout equal: without the cut after the first stop string, the tokens
    the engine generated past the split ``</search>`` stay in the response as policy tokens."""
    worker = make_worker()
    fmt = "searchr1"
    turns = turns_of(fmt)
    straight = await rollout(worker, fmt, TurnScript(fmt, turns), retriever_url=retriever.url)

    def interrupt(client: PartialRolloutClient) -> None:
        client.abort = abort_inside_stop_strings(worker.tokenizer, ("</search>", "</answer>"))

    monkeypatch.setattr(SearchAgentLoop, "tokens_through_stop", lambda self, ids, stop: len(ids))
    broken = await rollout(worker, fmt, TurnScript(fmt, turns), configure=interrupt, retriever_url=retriever.url)
    assert broken.client.ran_past_a_stop >= 1
    assert unpad(broken.out) != unpad(straight.out)  # the split broke the layout with the cut disabled


async def test_weights_updated_while_a_search_runs(make_worker, retriever):
    """No abort: the weights change between a search and the turn after its observation (the V1 trainer syncs them
    at a step boundary while the retriever answers). The layout is unchanged; the versions say the trajectory spans
    the update."""
    worker = make_worker()
    fmt = "searchr1"
    turns = [search_turn(fmt, "Orla Brennick"), search_turn(fmt, "Marrow & Tilde"), answer_turn(fmt, "1934")]
    straight = await rollout(worker, fmt, TurnScript(fmt, turns), retriever_url=retriever.url)

    def per_turn(client: PartialRolloutClient) -> None:
        client.bump_per_turn = True

    updated = await rollout(worker, fmt, TurnScript(fmt, turns), configure=per_turn, retriever_url=retriever.url)
    same_trajectory(straight, updated)
    assert updated.fields[F.WEIGHT_VERSIONS][F.VERSIONS_TRAJECTORY] == [0, 2]  # three turns, two updates
    assert (updated.fields["min_global_steps"], updated.fields["max_global_steps"]) == (0, 2)


async def test_per_step_rewards_land_on_the_same_step_end_tokens(make_worker, retriever):
    """AutoSearch's per-step rewards (Eq. 10, placed at each step's last model token for GAE) of an interrupted
    trajectory: the same tokens, inside the response mask, and the same values as uninterrupted."""
    worker = make_worker()
    tok = worker.tokenizer
    fmt = "autosearch"
    turns = turns_of(fmt)

    def interrupt(client: PartialRolloutClient) -> None:
        client.abort = abort_inside_stop_strings(tok, ("</search>", "</answer>"))

    placements = []
    for configure in (None, interrupt):
        run = await rollout(worker, fmt, AutoSearchScript(fmt, turns), configure=configure, retriever_url=retriever.url)
        sample, ids, mask = sample_of(run.out, tok)
        scored = await score(manager("autosearch", tok), sample)
        assert scored.info["as_fallback_placement"] == 0.0 and all(mask[p] == 1 for p, _ in scored.placements)
        placements.append(scored.placements)
    assert placements[0] == placements[1] and len(placements[0]) == 3
