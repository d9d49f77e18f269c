"""``agentrag-verl eval`` from the command line: arguments reach the harness, bad input exits 2 with the fix."""

from __future__ import annotations

import json

import pytest

from agentrag_verl.cli import main
from agentrag_verl.eval.cli import parse_options

pytestmark = pytest.mark.timeout(600)


def test_cli_runs_the_eval(tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir, capsys):
    server, endpoint = scripted_server
    out = tmp_path / "out"
    argv = [
        "eval",
        f"--base-url={server.base_url}",
        "--model=fake-model",
        f"--tokenizer={tiny_model_dir}",
        f"--retriever-url={retriever_service.url}",
        f"--data=single={fixture_datasets['single']}",
        "--limit=3",
        "--format=searchr1,hiprag",
        f"--out={out}",
        f"--judge-base-url={server.base_url}",
        "--judge-model=fake-model",
        "--rewards=searchr1,hiprag",
        "--reward-option=hiprag.lambda_p=0.6",
        "--loop-option=max_observation_tokens=64",
        "--no-progress",
    ]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    single = metrics["formats"]["hiprag"]["datasets"]["single"]
    assert single["n"] == 3 and single["em"] == 1.0
    # Single-hop steps are over-searches (script), so the bonus is 0 whatever lambda_p: R = 1.0.
    assert single["reward/hiprag"] == pytest.approx(1.0)
    run = json.loads((out / "run.json").read_text())["fingerprint"]
    assert run["reward_kwargs"] == {"hiprag": {"lambda_p": 0.6}}
    assert run["runner"]["loop_options"]["max_observation_tokens"] == 64
    assert "searchr1" in capsys.readouterr().out  # the rich table


def test_a_judge_that_fails_every_verdict_fails_the_run(tmp_path, tiny_model_dir, keyword_retriever, capsys):
    # The judge answers GET /models and rejects every completion (HTTP 401). Before: exit 0, judge_acc null,
    # judge_failures 3 and one WARNING. Now judge_acc could not be computed, so its questions fail as a failed
    # rollout does: exit 1, one line naming the metric and the count, and the rerun judges them again.
    from agentrag_verl.testing import FakeOpenAIServer, Fault

    out = tmp_path / "out"
    with (
        FakeOpenAIServer(replies="<answer>Paris</answer>") as policy,
        FakeOpenAIServer(replies=Fault.unauthorized()) as judge,
    ):
        argv = [
            "eval",
            f"--base-url={policy.base_url}",
            "--model=fake-model",
            f"--tokenizer={tiny_model_dir}",
            f"--retriever-url={keyword_retriever.url}",
            "--limit=1",  # the first question of each of the three mini_wiki datasets
            f"--out={out}",
            f"--judge-base-url={judge.base_url}",
            "--judge-model=fake-model",
            "--no-progress",
        ]
        assert main(argv) == 1
        last = capsys.readouterr().err.strip().splitlines()[-1]
        expected = (
            "3 question(s) could not be evaluated: 3 × judge verdicts failed for judge_acc (client_error: HTTP 401"
        )
        assert expected in last, last
        assert not (out / "searchr1" / "results.jsonl").read_text()  # nothing judged half is kept
        judge.reset(replies="YES")  # the judge is fixed: the same command judges the three questions
        assert main(argv) == 0
    average = json.loads((out / "metrics.json").read_text())["formats"]["searchr1"]["average"]
    assert (average["n"], average["judge_acc"], average["judge_failures"]) == (3, 1.0, 0)


def test_unjudged_metrics_name_each_metric_without_counts():
    import doctest

    from agentrag_verl.eval import harness

    (example,) = doctest.DocTestFinder().find(harness.unjudged_metrics)
    assert doctest.DocTestRunner().run(example).failed == 0
    ok = {
        "judge": {"ok": True, "correct": False},
        "hiprag": {"failures": 0},
        "rewards": {"hiprag": {"judge_failures": 0}},
    }
    assert harness.unjudged_metrics(ok) is None and harness.unjudged_metrics({"judge": None}) is None


def test_cli_bad_input_exits_2(tmp_path, capsys):
    base = ["eval", "--base-url=http://127.0.0.1:9/v1", "--model=m", "--tokenizer=t", f"--out={tmp_path / 'o'}"]
    assert main([*base, f"--data={tmp_path / 'missing.jsonl'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "test.jsonl").write_text('{"id": "1", "question": "q"}\n')
    assert main([*base, f"--data={tmp_path / 'd'}"]) == 2
    assert "golden_answers" in capsys.readouterr().err  # names the missing field and the line
    assert main([*base, f"--data={tmp_path / 'd'}", "--judge-base-url=http://x/v1"]) == 2
    assert "--judge-model" in capsys.readouterr().err


def test_parse_options():
    assert parse_options(["a.b=1", "a.c=[1, 2]", "d=null"], "--x") == {"a": {"b": 1, "c": [1, 2]}, "d": None}
    with pytest.raises(ValueError, match="key=value"):
        parse_options(["oops"], "--loop-option")
