"""Search-P1 reference planners (Algorithm 1, Eq. 5): candidates, correctness filter, vote, cache, resume.

The planner LLM is the fake OpenAI server over real HTTP with the real judges client; the retrieval filter uses the
real retriever server over the fixture corpus.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from agentrag_verl.cli import main
from agentrag_verl.data.corpus import QA_PATH
from agentrag_verl.data.flashrag import Question
from agentrag_verl.jsonl import JsonlLockedError
from agentrag_verl.judges import JudgeClient
from agentrag_verl.methods.searchp1.planners.generate import (
    PlanCache,
    PlannerOptions,
    generate_plans,
    load_questions,
    plan_question,
    rejected_path,
)
from agentrag_verl.testing import FakeOpenAIServer, Fault
from tests.support import CONSOLE

from .conftest import QA, PlannerLLM, plan_reply

Q0 = "In what year did Orla Brennick found Marrow & Tilde Instruments?"  # gold 1934, passage 10


def client_for(server: FakeOpenAIServer, **kw) -> JudgeClient:
    cfg = {
        "base_url": server.base_url,
        "model": "fake-model",
        "api_key_env": None,
        "max_retries": 0,
        "backoff_base_s": 0.0,
        **kw,
    }
    return JudgeClient.from_config(cfg)


def question(text: str = Q0, qid: str = "q0") -> Question:
    return Question(qid, text, tuple(QA[text]["golden_answers"]), dataset="mini", split="train")


def chat_requests(server: FakeOpenAIServer) -> list[dict]:
    return [r.body for r in server.requests if r.path.endswith("/chat/completions")]


async def test_k3_filter_then_vote():
    # seeds 0 and 1 mention the gold answer, seed 2 does not: 2 correct candidates -> one vote call (Eq. 5)
    with FakeOpenAIServer(replies=PlannerLLM(correct_seeds=(0, 1))) as server:
        async with client_for(server) as client:
            out = await plan_question(question(), client, PlannerOptions(num_candidates=3, correctness="answer"))
    rec = out.record
    assert out.failure is None and not out.rejected
    assert (rec["num_parsed"], rec["num_correct"], rec["selection"], rec["llm_calls"]) == (3, 2, "vote", 4)
    assert rec["reasoning_path"] == [f"VOTED {Q0}"] and "1934" in rec["planner"]
    bodies = chat_requests(server)
    assert sorted(b.get("seed") for b in bodies[:3]) == [0, 1, 2]  # K distinct samples
    assert all(b["temperature"] == 0.7 for b in bodies[:3])
    vote = bodies[3]["messages"][0]["content"]
    # only the correct candidates are shown to the vote
    assert "Candidate 2:" in vote and "Candidate 3:" not in vote and "Correct Answer: 1934" in vote


async def test_failed_vote_keeps_the_shortest_correct_candidate():
    with FakeOpenAIServer(replies=PlannerLLM(correct_seeds=(1, 2), vote_reply="I cannot decide.")) as server:
        async with client_for(server, retry_on_parse_error=False) as client:
            out = await plan_question(question(), client, PlannerOptions(num_candidates=3, correctness="answer"))
    # correct candidates have 2 and 3 queries (seed k has k + 1): the 2-query one is kept
    assert out.record["selection"] == "shortest" and len(out.record["reasoning_path"]) == 2


async def test_single_candidate_needs_no_vote_and_none_correct_is_rejected():
    with FakeOpenAIServer(replies=PlannerLLM(correct_seeds=(0,))) as server:
        async with client_for(server) as client:
            one = await plan_question(question(), client, PlannerOptions(num_candidates=1, correctness="answer"))
            two = await plan_question(
                question(), client, PlannerOptions(num_candidates=2, correctness="answer", candidate_temperature=0.9)
            )
    assert one.record["selection"] == "single" and one.record["llm_calls"] == 1
    first = chat_requests(server)[0]
    assert first["temperature"] == 0.0 and "seed" not in first  # K = 1: the planner LLM config's sampling
    # K = 2 with seeds 0, 1: only seed 0 is correct -> no vote call
    assert (two.record["selection"], two.record["num_correct"], two.record["llm_calls"]) == ("single", 1, 2)
    assert [b["temperature"] for b in chat_requests(server)[1:]] == [0.9, 0.9]
    with FakeOpenAIServer(replies=PlannerLLM(correct_seeds=())) as server:
        async with client_for(server) as client:
            rej = await plan_question(question(), client, PlannerOptions(num_candidates=2, correctness="answer"))
    assert rej.rejected and rej.record["reason"] == "no_correct_candidate" and rej.record["num_parsed"] == 2


async def test_endpoint_failure_is_not_recorded():
    with FakeOpenAIServer(replies=Fault.server_error(503)) as server:
        async with client_for(server) as client:
            out = await plan_question(question(), client, PlannerOptions(num_candidates=2, correctness="answer"))
    assert out.record is None and out.failure.startswith("server_error")


async def test_retrieval_filter_runs_the_path_through_the_retriever(retriever_service):
    good = plan_reply(["Orla Brennick Marrow & Tilde Instruments founded"], "Search the founder, read the year.")
    bad = plan_reply(["herring festival boathouses"], "Search the festival.")

    def reply(body):
        return good if body.get("seed") == 0 else bad

    retriever_service.requests.clear()
    # the answer-mention filter would reject both (neither planner names 1934); the retrieval filter keeps the
    # path whose passages contain 1934
    assert "1934" in str(retriever_service.search("Orla Brennick Marrow & Tilde Instruments founded", 3))
    assert "1934" not in str(retriever_service.search("herring festival boathouses", 3))
    from agentrag_verl.tools.retriever_client import RetrieverClient, RetrieverConfig

    retriever = RetrieverClient(RetrieverConfig(url=retriever_service.url, topk=3))
    options = PlannerOptions(num_candidates=2, retriever_url=retriever_service.url)
    assert options.resolved_correctness == "retrieval"
    with FakeOpenAIServer(replies=reply) as server:
        async with client_for(server) as client:
            out = await plan_question(question(), client, options, retriever)
    await retriever.aclose()
    assert (out.record["num_correct"], out.record["selection"]) == (1, "single")
    assert out.record["reasoning_path"] == ["Orla Brennick Marrow & Tilde Instruments founded"]
    assert {q for r in retriever_service.requests for q in r["queries"]} == {
        "Orla Brennick Marrow & Tilde Instruments founded",
        "herring festival boathouses",
    }


def test_options_errors():
    with pytest.raises(ValueError, match="needs a retriever URL"):
        PlannerOptions(correctness="retrieval")
    with pytest.raises(ValueError, match="choose one of"):
        PlannerOptions(correctness="maybe")
    with pytest.raises(ValueError, match=">= 1"):
        PlannerOptions(num_candidates=0)


def test_cache_repairs_a_partial_line_and_locks(tmp_path):
    cache = tmp_path / "plans.jsonl"
    cache.write_text('{"id": "a", "planner": "p", "reasoning_path": ["x"]}\n{"id": "b", "plann')
    with PlanCache(cache) as c:
        assert c.done == {"a"} and c.repaired_bytes == len('{"id": "b", "plann')
        with pytest.raises(JsonlLockedError, match="another"), PlanCache(cache):
            pass
        c.append({"id": "b", "planner": "p2", "reasoning_path": ["y"]})
    assert [json.loads(line)["id"] for line in cache.read_text().splitlines()] == ["a", "b"]


async def test_generate_writes_what_the_searchp1_manager_reads(tmp_path):
    from agentrag_verl.methods.searchp1.manager import load_planner_cache

    questions = [question(q, f"mini/test_{i}") for i, q in enumerate(list(QA)[:6])]
    unanswerable = (questions[5].question,)
    cache = tmp_path / "plans.jsonl"
    with FakeOpenAIServer(replies=PlannerLLM(correct_seeds=(0, 1), unanswerable=unanswerable)) as server:
        async with client_for(server) as client:
            summary = await generate_plans(
                questions, cache, client, PlannerOptions(num_candidates=2, correctness="answer"), progress=False
            )
            again = await generate_plans(
                questions, cache, client, PlannerOptions(num_candidates=2, correctness="answer"), progress=False
            )
    assert (summary.planned, summary.rejected, summary.failed, summary.selections) == (5, 1, 0, {"vote": 5})
    assert summary.llm_calls == 5 * 3 + 2  # 2 candidates + 1 vote each; the rejected one: 2 candidates
    assert (again.already_done, again.planned, again.rejected) == (6, 0, 0)  # nothing re-planned
    plans = load_planner_cache(str(cache))
    assert sorted(plans) == [f"mini/test_{i}" for i in range(5)]
    assert plans["mini/test_0"]["reasoning_path"] == [f"VOTED {questions[0].question}"]
    rejected = [json.loads(line) for line in rejected_path(cache).read_text().splitlines()]
    assert [r["id"] for r in rejected] == ["mini/test_5"] and rejected[0]["reason"] == "no_correct_candidate"


def prepare_mini(out: Path) -> int:
    """``agentrag-verl data prepare`` of the fixture QA set (``mini``, Search-P1 format) into ``out``: its exit
    status."""
    return main(
        ["data", "prepare", "--input", str(QA_PATH), "--name", "mini", "--format", "searchp1", "--out", str(out)]
    )


def test_load_questions_from_prepared_parquet(tmp_path):
    assert prepare_mini(tmp_path) == 0
    qs = load_questions(tmp_path / "train.parquet")
    assert len(qs) == 30 and qs[0].id == "mini/test_0" and qs[0].golden_answers == ("1934",)
    assert load_questions(QA_PATH)[0].id == "test_0"  # FlashRAG jsonl: ids verbatim
    with pytest.raises(ValueError, match="not found"):
        load_questions(tmp_path / "none.parquet")


def test_load_questions_keeps_a_question_listed_in_several_passes_once(tmp_path):
    """The learning benchmark's training file lists its fixed question set in 4 passes: one plan per question."""
    import pandas as pd

    assert prepare_mini(tmp_path) == 0
    frame = pd.read_parquet(tmp_path / "train.parquet")
    passes = pd.concat([frame, frame.iloc[::-1], frame], ignore_index=True)
    passes.to_parquet(tmp_path / "passes.parquet")
    qs = load_questions(tmp_path / "passes.parquet")
    assert [q.id for q in qs] == [q.id for q in load_questions(tmp_path / "train.parquet")]  # first-seen order
    assert len(qs) == 30

    info = dict(passes.at[31, "extra_info"])  # a later pass renames question 1: the same id, another question
    passes.at[31, "extra_info"] = {**info, "question": "Who wrote something else?"}
    passes.to_parquet(tmp_path / "conflict.parquet")
    with pytest.raises(ValueError, match=rf"\['{info['id']}'\] repeat with a different question"):
        load_questions(tmp_path / "conflict.parquet")


@pytest.mark.timeout(240)
def test_killed_mid_run_and_restarted_plans_every_question_exactly_once(tmp_path):
    """SIGKILL the CLI mid-run, start it again: each of the 30 questions ends in the cache (or the rejected file)
    exactly once, and no question finished before the kill is sent to the planner LLM again."""
    assert prepare_mini(tmp_path / "data") == 0
    cache = tmp_path / "plans.jsonl"
    unanswerable = (list(QA)[7],)  # one question gets no correct candidate -> rejected file
    llm = PlannerLLM(correct_seeds=(0, 1), delay=0.1, unanswerable=unanswerable)
    with FakeOpenAIServer(replies=llm) as server:
        cmd = [
            CONSOLE,
            "planners",
            "generate",
            "--questions",
            str(tmp_path / "data" / "train.parquet"),
            "--out",
            str(cache),
            "--base-url",
            server.base_url,
            "--model",
            "fake-model",
            "--api-key-env",
            "none",
            "--num-candidates",
            "2",
            "--correctness",
            "answer",
            "--concurrency",
            "2",
            "--max-retries",
            "0",
            "--no-progress",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = cache.read_text().count("\n") if cache.exists() else 0
            if done >= 8 or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed: " + proc.stdout.read()
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(timeout=30)
        before = {json.loads(line)["id"] for line in cache.read_text().splitlines() if line.endswith("}")}
        before |= (
            {json.loads(line)["id"] for line in rejected_path(cache).read_text().splitlines() if line.endswith("}")}
            if rejected_path(cache).exists()
            else set()
        )
        assert 8 <= len(before) < 30
        n_requests = len(server.requests)
        rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        summary = json.loads(rerun.stdout[rerun.stdout.index("{") :])
        assert summary["already_done"] == len(before) and summary["failed"] == 0
        after_restart = [r.body for r in server.requests[n_requests:] if r.path.endswith("/chat/completions")]
    planned = [json.loads(line)["id"] for line in cache.read_text().splitlines()]
    rejected = [json.loads(line)["id"] for line in rejected_path(cache).read_text().splitlines()]
    counts = Counter(planned + rejected)
    assert sorted(counts) == sorted(f"mini/test_{i}" for i in range(30))
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v > 1}
    assert rejected == ["mini/test_7"]
    # the restarted run asked only about questions not finished before the kill
    ids_by_question = {q["question"].strip(): f"mini/{q['id']}" for q in QA.values()}
    asked = {ids_by_question[PlannerLLM.question_of(b)] for b in after_restart}
    assert asked and not asked & before
