"""Fixtures of the eval tests: the fixture corpus split into three datasets, and a scripted policy + judge served
over real HTTP (:class:`~agentrag_verl.testing.FakeOpenAIServer`) whose behaviour fixes every expected metric.

The scripted policy (completions endpoint; it reads the decoded token-id prompt):

- common-knowledge questions: answers the gold at once (no search, one non-search HiPRAG step);
- single-hop questions: one search for the question, then the gold;
- multi-hop questions: two searches, then the wrong answer ``"wrong answer"`` (HiPRAG: a third, non-search step
  concludes it);
- auxiliary generations: AutoSearch intermediate answers are the gold; HiPRAG re-answers are the gold for
  single-hop questions and ``"I do not know"`` otherwise.

The scripted judge (chat endpoint): over-search (Figure 5) = the two statements are equal; under-search
(Figure 6) = True unless the conclusion is the wrong answer; correctness (B.4) = YES unless the prediction is the
wrong answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

WRONG = "wrong answer"


@pytest.fixture(scope="session")
def qa_by_question() -> dict[str, dict[str, Any]]:
    from agentrag_verl.testing import load_qa

    return {q["question"]: q for q in load_qa()}


@pytest.fixture
def fixture_datasets(tmp_path) -> dict[str, Path]:
    """The fixture QA split by type into three FlashRAG dataset folders under ``tmp_path/data``."""
    from agentrag_verl.testing import load_qa, write_qa

    paths = {}
    for kind, name in (("single-hop", "single"), ("multi-hop", "multi"), ("common-knowledge", "common")):
        rows = [q for q in load_qa() if q["metadata"]["type"] == kind]
        paths[name] = write_qa(rows, tmp_path / "data" / name / "test.jsonl")
    return paths


def _question_in(text: str, qa: dict[str, dict[str, Any]]) -> dict[str, Any]:
    # The last question of the prompt wins (the AutoSearch prompt repeats it after the instructions).
    best, pos = None, -1
    for question, row in qa.items():
        i = text.rfind(question)
        if i > pos:
            best, pos = row, i
    if best is None:
        raise AssertionError(f"scripted policy: no known question in prompt {text[-300:]!r}")
    return best


def _hiprag_turn(response: str, row: dict[str, Any], kind: str, gold: str) -> str:
    """The scripted HiPRAG turn after the observations already in ``response``."""
    searches = response.count("</context>")
    if kind == "common-knowledge":
        return (
            f"<think><step><reasoning>I know this.</reasoning><conclusion>{gold}</conclusion></step></think>\n"
            f"<answer>{gold}</answer>"
        )
    if searches == 0:
        return f"<think><step><reasoning>Look it up.</reasoning><search>{row['question']}</search>"
    if kind == "single-hop":
        return f"{gold}</conclusion></step></think>\n<answer>{gold}</answer>"
    if searches == 1:
        return (
            "a first fact</conclusion></step>"
            "<step><reasoning>One more hop.</reasoning><search>second hop details</search>"
        )
    return (
        f"a second fact</conclusion></step><step><reasoning>Combine both.</reasoning>"
        f"<conclusion>{WRONG}</conclusion></step></think>\n<answer>{WRONG}</answer>"
    )


def policy_reply(fmt: str, prompt: str, qa: dict[str, dict[str, Any]]) -> str:
    """The scripted policy's next generation (see the module docstring)."""
    if "Please answer the following question or provide relevant information" in prompt:  # HiPRAG re-answer
        row = next((r for q, r in qa.items() if q in prompt), None)
        single = row is not None and row["metadata"]["type"] == "single-hop"
        return row["golden_answers"][0] if single else "I do not know"
    row = _question_in(prompt, qa)
    gold, kind = row["golden_answers"][0], row["metadata"]["type"]
    if "Answer the given question according to search trajectories" in prompt:  # AutoSearch Prompt 1
        return f"<think>from the passages</think>\n<answer>{gold}</answer>"
    final = gold if kind != "multi-hop" else WRONG
    response = prompt.rsplit("<|im_start|>assistant", 1)[-1]  # the instructions mention the tags too
    if fmt == "hiprag":
        reply = _hiprag_turn(response, row, kind, gold)
        # the loop also stops at </conclusion> (HiPRAG Alg. 1): continue a turn already partly generated
        done = response.rsplit("</context>\n<conclusion>", 1)[-1] if "</context>" in response else response[1:]
        return reply[len(done) :] if done and reply.startswith(done) else reply
    searches = response.count("</information>")
    want = {"common-knowledge": 0, "single-hop": 1, "multi-hop": 2}[kind]
    if searches < want:
        query = row["question"] if searches == 0 else "second hop details"
        return f"<think>I need to search.</think>\n<search> {query} </search>"
    return f"<think>I can answer.</think>\n<answer>{final}</answer>"


def judge_reply(messages: list[dict[str, str]]) -> str:
    system = messages[0]["content"] if messages else ""
    user = messages[-1]["content"]
    if "semantically equivalent" in system:  # HiPRAG Figure 5
        m = re.search(r"Statement 1: (.*)\nStatement 2: (.*)", user, re.DOTALL)
        same = m is not None and m.group(1).strip() == m.group(2).strip()
        return f"<answer>{same}</answer>"
    if "Fact-Checker" in system:  # HiPRAG Figure 6
        return f"<answer>{WRONG not in user}</answer>"
    if "evaluation assistant" in user:  # multi-stage B.4
        return "NO" if WRONG in user else "YES"
    raise AssertionError(f"scripted judge: unknown prompt {user[:200]!r}")


class ScriptedEndpoint:
    """Routes FakeOpenAIServer requests: completions -> policy, chat -> judge. Counts policy calls."""

    def __init__(self, tokenizer: Any, qa: dict[str, dict[str, Any]]) -> None:
        self.tokenizer = tokenizer
        self.qa = qa
        self.policy_calls = 0
        self.judge_calls = 0

    def __call__(self, request: dict[str, Any]) -> str:
        if "messages" in request:
            self.judge_calls += 1
            return judge_reply(request["messages"])
        self.policy_calls += 1
        prompt = self.tokenizer.decode(request["prompt"])
        fmt = "hiprag" if "<step>" in prompt or "<conclusion>" in prompt else "searchr1"
        return policy_reply(fmt, prompt, self.qa)


@pytest.fixture
def scripted_server(fake_openai_server, tiny_model_dir, qa_by_question):
    """``(server, endpoint)``: the fake OpenAI server answering with the scripted policy and judge."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    endpoint = ScriptedEndpoint(tokenizer, qa_by_question)
    fake_openai_server.reset(replies=endpoint)
    return fake_openai_server, endpoint


def make_config(out_dir, server, retriever_url, tokenizer_dir, formats, **kw):
    from agentrag_verl.eval.harness import EvalConfig
    from agentrag_verl.eval.runner import RunnerConfig

    judge = {"base_url": server.base_url, "model": "fake-model", "api_key_env": None, "max_retries": 0}
    options = {
        "runner": RunnerConfig(
            tokenizer=str(tokenizer_dir),
            base_url=server.base_url,
            model="fake-model",
            retriever_url=retriever_url,
            response_length=1024,
        ),
        "formats": formats,
        "out_dir": str(out_dir),
        "concurrency": 8,
        "judge": judge,
        "progress": False,
    }
    options.update(kw)
    return EvalConfig(**options)
