"""No command prints an API key. Some gateways quote the rejected key in their 401 body; the commands quote such
bodies with the key redacted (``agentrag_verl.http.error_detail``), on stdout, on stderr and in every file they
write, and a failure that repeats for every question is one WARNING line, not one per attempt.

The commands run as a user runs them, ``agentrag-verl ...`` in a subprocess (so the log lines reach stderr through
the command's own logging set-up), against :class:`~agentrag_verl.testing.FakeOpenAIServer` (``Fault.unauthorized``
quotes the key the request sent) and :class:`~agentrag_verl.testing.FakeRetriever` on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrag_verl.testing import FakeOpenAIServer, FakeRetriever, Fault

pytestmark = pytest.mark.timeout(300)

KEY = "sk-live-7f3a9c2e5b1d4068"
"""The key the commands are given; the fake endpoints quote it back."""
KEY_ENV = "AGENTRAG_TEST_API_KEY"


def agentrag(*argv: str) -> subprocess.CompletedProcess:
    """``agentrag-verl argv`` with the key in :data:`KEY_ENV`."""
    env = {**os.environ, KEY_ENV: KEY, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "agentrag_verl", *argv], env=env, capture_output=True, text=True, timeout=280
    )


def assert_no_key(proc: subprocess.CompletedProcess, out: Path) -> None:
    """The key, or any 8 characters of it from its start, is nowhere on stdout, stderr or under ``out``."""
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert KEY[:8] not in text, f"the key is on {name}:\n{text[-3000:]}"
    for path in out.rglob("*") if out.exists() else []:
        if path.is_file():
            assert KEY[:8].encode() not in path.read_bytes(), f"the key is in {path}"


def eval_argv(policy: FakeOpenAIServer, retriever: FakeRetriever, tokenizer: Path, out: Path, *extra: str) -> list:
    # The embedded mini_wiki examples: three datasets, the first question of each (3 questions), one retry each.
    return [
        "eval",
        f"--base-url={policy.base_url}",
        "--model=fake-model",
        f"--tokenizer={tokenizer}",
        f"--retriever-url={retriever.url}",
        "--limit=1",
        "--question-retries=1",
        f"--out={out}",
        "--no-progress",
        *extra,
    ]


def test_eval_policy_that_echoes_the_key(tmp_path, tiny_model_dir, keyword_retriever):
    # The policy answers GET /models and rejects every completion with a 401 quoting the key: before the fix the key
    # was printed once per attempt and per question in the final line (303 times over the 100 mini_wiki questions).
    out = tmp_path / "out"
    with FakeOpenAIServer(replies=Fault.unauthorized()) as policy:
        proc = agentrag(*eval_argv(policy, keyword_retriever, tiny_model_dir, out, f"--api-key-env={KEY_ENV}"))
    assert_no_key(proc, out)
    assert proc.returncode == 1, proc.stderr
    assert "HTTP 401: Incorrect API key provided: <redacted>" in proc.stderr
    # 3 questions x 2 attempts fail the same way: one WARNING line, and the last line counts them by cause.
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING") and " attempt " in line]
    assert len(warnings) == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("agentrag-verl eval: error: 3 question(s) could not be evaluated: 3 × RuntimeError: "), last


def test_eval_endpoint_check_that_echoes_the_key(tmp_path, tiny_model_dir, keyword_retriever):
    # The policy wants another key and quotes the one it was sent: the start-up check quoted the body verbatim.
    out = tmp_path / "out"
    with FakeOpenAIServer(api_key="sk-the-right-one", echo_rejected_key=True) as policy:
        proc = agentrag(*eval_argv(policy, keyword_retriever, tiny_model_dir, out, f"--api-key-env={KEY_ENV}"))
    assert_no_key(proc, out)
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert "answered HTTP 401: Incorrect API key provided: <redacted>" in line and "--api-key-env" in line, line
    assert not (out / "run.json").exists()


def test_eval_judge_that_echoes_the_key(tmp_path, tiny_model_dir, keyword_retriever):
    # The judge answers GET /models and rejects every completion, quoting the key: printed once before the fix.
    out = tmp_path / "out"
    with (
        FakeOpenAIServer(replies="<answer>Paris</answer>") as policy,
        FakeOpenAIServer(replies=Fault.unauthorized()) as judge,
    ):
        judge_flags = [
            f"--judge-base-url={judge.base_url}",
            "--judge-model=fake-model",
            f"--judge-api-key-env={KEY_ENV}",
        ]
        proc = agentrag(*eval_argv(policy, keyword_retriever, tiny_model_dir, out, *judge_flags))
    assert_no_key(proc, out)
    assert "Judge request to" in proc.stderr and "<redacted>" in proc.stderr
    assert proc.returncode == 1  # judge_acc could not be computed (tests/eval/test_cli.py holds that rule)


def test_planners_that_echo_the_key(tmp_path):
    # The planner LLM answers GET /models and rejects every completion, quoting the key: printed twice before the fix
    # (the client's WARNING and the command's last line).
    questions = tmp_path / "questions.jsonl"
    rows = [{"id": str(i), "question": f"Who wrote book {i}?", "golden_answers": ["Ann"]} for i in range(3)]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    with FakeOpenAIServer(replies=Fault.unauthorized()) as llm:
        base = ["planners", "generate", f"--questions={questions}", f"--base-url={llm.base_url}", "--model=fake-model"]
        proc = agentrag(*base, f"--out={out / 'plans.jsonl'}", f"--api-key-env={KEY_ENV}", "--no-progress")
    assert_no_key(proc, out)
    assert proc.returncode == 1 and "<redacted>" in proc.stderr
    with FakeOpenAIServer(api_key="sk-the-right-one", echo_rejected_key=True) as llm:
        base[3] = f"--base-url={llm.base_url}"
        proc = agentrag(*base, f"--out={out / 'plans.jsonl'}", f"--api-key-env={KEY_ENV}", "--no-progress")
    assert_no_key(proc, out)
    assert proc.returncode == 2 and "<redacted>" in proc.stderr and "--api-key-env" in proc.stderr
