"""``agentrag-verl reasonrag generate``: concurrent, resumable data generation (scripted policy and retriever over
real HTTP), including a kill -9 in the middle of a CLI run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrag_verl.jsonl import JsonLinesError
from agentrag_verl.methods.reasonrag.generate import (
    FAILURES,
    PAIRS,
    TREES,
    GenerateError,
    build_dataset,
    generate,
    load_questions,
    open_trees,
)
from agentrag_verl.methods.reasonrag.mcts import MCTSConfig, MCTSEnv
from agentrag_verl.methods.reasonrag.pairs import PairConfig
from agentrag_verl.methods.reasonrag.policy import PolicyClient, PolicyConfig
from agentrag_verl.testing import FakeOpenAIServer, load_qa, write_qa
from agentrag_verl.tools.retriever_client import RetrieverClient, RetrieverConfig

from .conftest import QAPolicy

SMALL = MCTSConfig(max_rollouts=5, max_children=2, max_iter=5, spre_rollouts=1, alpha=0.9)


@pytest.fixture
def qa_file(tmp_path) -> Path:
    return write_qa(load_qa()[:6], tmp_path / "nq_dev.jsonl")


def golds_of(path: Path) -> dict[str, str]:
    return {q.question: q.golden_answers[0] for q in load_questions([path])}


def env_for(server, retriever) -> MCTSEnv:
    policy = PolicyClient(PolicyConfig(base_url=server.base_url, model="policy", api_key_env=None, max_retries=0))
    return MCTSEnv(policy, RetrieverClient(RetrieverConfig(url=retriever.url)), topk=3)


def tree_uids(out: Path) -> list[str]:
    return [json.loads(line)["uid"] for line in (out / TREES).read_text().splitlines()]


async def test_generate_then_resume_skips_finished(tmp_path, qa_file, fake_retriever):
    questions = load_questions([qa_file])
    out = tmp_path / "out"
    with FakeOpenAIServer(QAPolicy(golds_of(qa_file))) as server:
        summary = await generate(questions, out, env_for(server, fake_retriever), SMALL, concurrency=3, progress=False)
        calls_first = len(server.requests)
        again = await generate(questions, out, env_for(server, fake_retriever), SMALL, concurrency=3, progress=False)
        assert len(server.requests) == calls_first  # nothing searched again
    assert (summary.total, summary.searched, summary.failed, summary.skipped) == (6, 6, 0, 0)
    assert (again.searched, again.skipped) == (0, 6)
    assert sorted(tree_uids(out)) == sorted(q.key for q in questions) and tree_uids(out)[0].startswith("nq_dev/")
    # QAPolicy gives every tree a query-vs-wrong-answer pair at the root and an evidence-vs-"None" pair below.
    pairs = [json.loads(line) for line in (out / PAIRS).read_text().splitlines()]
    assert summary.pairs == again.pairs == len(pairs) == 12
    assert {(p["chosen_action"], p["rejected_action"]) for p in pairs} == {
        ("query", "answer"),
        ("evidence", "evidence"),
    }
    stats = json.loads((out / "stats.json").read_text())
    assert stats["questions"]["by_source"] == {"nq_dev": {"count": 6, "share": 1.0}}
    assert "| Questions | 6 |" in (out / "stats.md").read_text()


async def test_failed_question_is_not_written_and_is_retried(tmp_path, qa_file, fake_retriever):
    questions = load_questions([qa_file])
    golds = golds_of(qa_file)
    broken = questions[2].question
    policy = QAPolicy(golds)

    def flaky(body):
        if broken in json.dumps(body):
            raise RuntimeError("policy down for this question")  # the fake answers HTTP 500
        return policy(body)

    out = tmp_path / "out"
    with FakeOpenAIServer(flaky) as server:
        summary = await generate(questions, out, env_for(server, fake_retriever), SMALL, progress=False)
    assert (summary.searched, summary.failed) == (5, 1)
    assert questions[2].key not in tree_uids(out)
    (failure,) = [json.loads(line) for line in (out / FAILURES).read_text().splitlines()]
    assert failure["uid"] == questions[2].key and "PolicyError" in failure["error"]
    with FakeOpenAIServer(QAPolicy(golds)) as server:
        summary = await generate(questions, out, env_for(server, fake_retriever), SMALL, progress=False)
    assert (summary.searched, summary.skipped, summary.failed) == (1, 5, 0)
    assert sorted(tree_uids(out)) == sorted(q.key for q in questions)


async def test_too_many_failures_abort(tmp_path, qa_file, fake_retriever):
    with FakeOpenAIServer(lambda body: 1 / 0) as server:  # every call fails
        summary = await generate(
            load_questions([qa_file]), tmp_path, env_for(server, fake_retriever), SMALL, concurrency=1,
            max_failures=2, progress=False,
        )  # fmt: skip
    assert summary.aborted and summary.failed == 2 and summary.searched == 0


def test_partial_last_line_is_cut_off(tmp_path):
    path = tmp_path / TREES
    good = json.dumps({"uid": "a/1", "tree": {}}) + "\n"
    path.write_text(good + '{"uid": "a/2", "tre')  # killed in the middle of a write
    with open_trees(tmp_path) as store:
        assert store.done == {"a/1"}
    assert path.read_text() == good
    path.write_text(good + "not json\n" + good)
    with pytest.raises(JsonLinesError, match=r"trees.jsonl, line 2: not valid JSON .* delete that line"):
        open_trees(tmp_path)


async def test_resume_with_other_settings_is_refused(tmp_path, qa_file, fake_retriever):
    questions = load_questions([qa_file])[:1]
    with FakeOpenAIServer(QAPolicy(golds_of(qa_file))) as server:
        await generate(questions, tmp_path, env_for(server, fake_retriever), SMALL, progress=False)
        other = MCTSConfig(max_rollouts=5, max_children=2, max_iter=5, spre_rollouts=1, alpha=0.5)
        with pytest.raises(GenerateError, match=r"other settings \(mcts differ.*new --out"):
            await generate(questions, tmp_path, env_for(server, fake_retriever), other, progress=False)
        with pytest.raises(GenerateError, match="process_eval scores nodes with an LLM judge"):
            await generate(
                questions, tmp_path / "pe", env_for(server, fake_retriever), MCTSConfig(value="process_eval")
            )


def test_rebuild_pairs_with_other_filters(tmp_path):
    # A stored tree whose root children differ by 0.05: kept at min_gap 0.01, dropped at 0.1.
    from agentrag_verl.methods.reasonrag.tree import Tree

    tree = Tree.new("q?", ["x"])
    for text, reward in (("So the answer is <answer>x</answer>", 0.9), ("So the answer is <answer>y</answer>", 0.85)):
        child = tree.add_child(tree.root, stage="terminal", text=text, action="answer", content=text[25])
        child.reward = reward
    with open_trees(tmp_path) as store:
        store.append({"uid": "s/1", "source": "s", "tree": tree.to_dict()})
    assert build_dataset(tmp_path)["pairs"] == 1
    assert build_dataset(tmp_path, PairConfig(min_gap=0.1))["pairs"] == 0
    assert (tmp_path / PAIRS).read_text() == ""
    # The same through the CLI.
    out = subprocess.run(
        [sys.executable, "-m", "agentrag_verl", "reasonrag", "pairs", "--out", str(tmp_path), "--min-gap", "0.05"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout) == {"pairs": 1, "questions": 1}
    with pytest.raises(GenerateError, match="run `agentrag-verl reasonrag generate"):
        build_dataset(tmp_path / "missing")


def test_load_questions_errors(tmp_path):
    # Rows are read by data.flashrag.read_questions: the same rules and messages as data prepare and eval.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "1", "question": "q?", "golden_answers": []}) + "\n")
    with pytest.raises(GenerateError, match=r"bad.jsonl, line 1: \"golden_answers\" must be a non-empty list"):
        load_questions([bad])
    dup = tmp_path / "dup.jsonl"
    dup.write_text((json.dumps({"id": "1", "question": "q?", "golden_answers": ["a"]}) + "\n") * 2)
    with pytest.raises(GenerateError, match="dup.jsonl, line 2: id '1' already used on line 1"):
        load_questions([dup])
    other = tmp_path / "other" / "dup.jsonl"  # same source (the stem) from another file
    other.parent.mkdir()
    other.write_text(json.dumps({"id": "1", "question": "q?", "golden_answers": ["a"]}) + "\n")
    single = tmp_path / "single.jsonl"
    single.write_text(json.dumps({"id": "1", "question": "q?", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(GenerateError, match="duplicate question id 'dup/1'"):
        load_questions([single, other], sources=["dup", "dup"])
    with pytest.raises(GenerateError, match="does not exist"):
        load_questions([tmp_path / "none.jsonl"])
    # A string gold is an error (FlashRAG's layout is a list), with the fix in the message.
    string_gold = tmp_path / "string_gold.jsonl"
    string_gold.write_text(json.dumps({"id": "7", "question": "q?", "golden_answers": "a"}) + "\n")
    with pytest.raises(GenerateError, match="wrap the single answer in a list"):
        load_questions([string_gold])
    # --source names the source; questions are stripped; a row without id is numbered by its line.
    ok = tmp_path / "ok.jsonl"
    ok.write_text(
        json.dumps({"id": "7", "question": " q? ", "golden_answers": ["a"]})
        + "\n"
        + json.dumps({"question": "r?", "golden_answers": ["b"]})
        + "\n"
    )
    q, r = load_questions([ok], sources=["popqa"])
    assert (q.key, q.question, q.golden_answers) == ("popqa/7", "q?", ("a",))
    assert (r.key, r.dataset, r.id) == ("popqa/1", "popqa", "1")


def cli(out: Path, qa: Path, server: FakeOpenAIServer, retriever, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agentrag_verl", "reasonrag", "generate",
        "--data", str(qa), "--out", str(out),
        "--policy-url", server.base_url, "--policy-model", "policy", "--policy-api-key-env", "",
        "--policy-retries", "0", "--retriever-url", retriever.url,
        "--max-rollouts", "3", "--spre-rollouts", "1", "--max-iter", "5", "--concurrency", "2", "--no-progress",
        *extra,
    ]  # fmt: skip


def test_kill_and_resume_yields_each_question_once(tmp_path, fake_retriever):
    """A CLI run killed with SIGKILL mid-way, then run again: every question in trees.jsonl exactly once."""
    qa = write_qa(load_qa()[:10], tmp_path / "hotpotqa.jsonl")
    out = tmp_path / "out"
    trees = out / TREES
    # ~7 policy calls per question at 0.15 s each, 2 questions at a time: ~5 s for the 10 questions.
    with FakeOpenAIServer(QAPolicy(golds_of(qa), delay_s=0.15)) as server:
        proc = subprocess.Popen(cli(out, qa, server, fake_retriever), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if trees.exists() and len(trees.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed: " + proc.stderr.read().decode()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
        done_before = len(tree_uids(out))
        assert 3 <= done_before < 10

        # A fresh policy script (the killed run advanced the per-prompt counters of its in-flight questions).
        server.reset(replies=QAPolicy(golds_of(qa), delay_s=0.05))
        second = subprocess.run(cli(out, qa, server, fake_retriever), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert summary["skipped"] == done_before and summary["searched"] == 10 - done_before
    uids = tree_uids(out)
    assert sorted(uids) == sorted(f"hotpotqa/{q['id']}" for q in load_qa()[:10]) and len(uids) == len(set(uids))
    pairs = [json.loads(line) for line in (out / PAIRS).read_text().splitlines()]
    assert {p["question_id"] for p in pairs} == set(uids)


def test_cli_reports_bad_options(tmp_path, qa_file):
    base = [sys.executable, "-m", "agentrag_verl", "reasonrag", "generate", "--data", str(qa_file)]
    base += ["--out", str(tmp_path), "--policy-api-key-env", "none"]
    out = subprocess.run([*base, "--value", "process_eval"], capture_output=True, text=True)
    assert out.returncode == 2 and "needs --judge-url and --judge-model" in out.stderr
    out = subprocess.run([*base, "--alpha", "0"], capture_output=True, text=True)
    assert out.returncode == 2 and "mcts.alpha must be in (0, 1]" in out.stderr
    out = subprocess.run([*base[:6], str(tmp_path / "missing.jsonl"), *base[7:]], capture_output=True, text=True)
    assert out.returncode == 2 and "missing.jsonl does not exist" in out.stderr
