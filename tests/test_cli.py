"""``agentrag-verl``: every command explains bad input in one line (what, why, how to fix), exits non-zero, shows no
traceback without ``--debug``, and leaves nothing a corrected rerun trips on.

Cases: missing paths, files where folders are needed and the reverse, an ``--out`` that is a file, a model folder
that is not a model, zero and negative counts, non-UTF-8 input (named by file and line), a ``--split`` that would
write outside ``--out``, an API key pasted where its variable's name belongs, endpoints that do not answer. All run
in this process against closed local ports; nothing is trained or served.
"""

from __future__ import annotations

import json

import pytest

from agentrag_verl.cli import main
from agentrag_verl.demo.servers import free_port
from agentrag_verl.testing import load_qa, write_qa
from tests.cli_errors import one_line_error, run_cli

LATIN1 = b'{"id": "1", "question": "caf\xe9?", "golden_answers": ["x"]}\n'
"""A QA line in Latin-1: byte 0xe9 at column 29 of line 2 (after one valid line)."""


@pytest.fixture
def qa_file(tmp_path):
    return write_qa(load_qa()[:4], tmp_path / "qa" / "test.jsonl")


@pytest.fixture
def latin1_file(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "0", "question": "ok?", "golden_answers": ["y"]}\n' + LATIN1)
    return path


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("x")
    return path


@pytest.fixture
def not_a_model(tmp_path):
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    (folder / "weights.txt").write_text("no config.json here")
    return folder


def err(argv, capsys, *expected):
    return one_line_error(main, argv, capsys, *expected)


# ---- agentrag-verl data prepare --------------------------------------------------------------------------------------


def prepare(*args: str, out: str) -> list[str]:
    return ["data", "prepare", "--format", "searchr1", "--out", out, *args]


def test_data_prepare_bad_input(tmp_path, qa_file, latin1_file, a_file, capsys):
    out = str(tmp_path / "out")
    err(prepare("--input", str(tmp_path / "nope.jsonl"), out=out), capsys, "nope.jsonl does not exist")
    err(prepare("--input", str(qa_file.parent), out=out), capsys, "is a folder", "--flashrag-dir")
    err(prepare("--preset", "test7", "--flashrag-dir", str(a_file), out=out), capsys, "is not a directory")
    err(prepare("--input", str(qa_file), out=str(a_file)), capsys, "--out", "is a file")
    err(
        prepare("--input", str(latin1_file), out=out),
        capsys,
        "latin1.jsonl, line 2: not UTF-8 (byte 0xe9 at column 29)",
    )
    err(prepare("--input", str(qa_file), "--max-per-source", "0", out=out), capsys, "--max-per-source", "at least 1")
    err(["data", "prepare", "--input", str(qa_file), "--format", "nope", "--out", out], capsys, "Unknown trajectory")
    escape = tmp_path / "escaped.parquet"
    err(prepare("--input", str(qa_file), "--split", "../escaped", out=out), capsys, "--split", "not a plain file name")
    assert not escape.exists() and not (tmp_path / "out").exists()  # nothing written, inside or outside --out
    assert run_cli(main, prepare("--input", str(qa_file), "--split", "test", out=out), capsys)[0] == 0


# ---- agentrag-verl eval ----------------------------------------------------------------------------------------------


def eval_argv(tmp_path, *args: str, tokenizer: str, data: str) -> list[str]:
    closed = f"http://127.0.0.1:{free_port()}"
    return [
        "eval",
        f"--base-url={closed}/v1",
        "--model=m",
        f"--tokenizer={tokenizer}",
        f"--retriever-url={closed}/retrieve",
        f"--data={data}",
        f"--out={tmp_path / 'out'}",
        "--no-progress",
        *args,
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--limit=0"], "argument --limit: 0 is not a whole number of at least 1"),
        (["--concurrency=-3"], "argument --concurrency"),
        (["--question-retries=-1"], "argument --question-retries: -1 is not a whole number of at least 0"),
        (["--temperature=-0.5"], "argument --temperature"),
        (["--top-p=0"], "argument --top-p: 0 is not a number greater than 0"),
        (["--top-p=1.5"], "--top-p 1.5 is above 1"),
        (["--prompt-length=0"], "argument --prompt-length"),
        (["--topk=0"], "argument --topk"),
        (["--format=searchr1,nope"], "Unknown or missing format(s) ['nope']"),
        (["--rewards=hiprag,nope"], "Unknown reward design(s) ['nope']"),
        (["--plot-metric=acc"], "argument --plot-metric: invalid choice: 'acc'"),
        (["--base-url=127.0.0.1:8000/v1"], "--base-url '127.0.0.1:8000/v1' is not an http(s) URL"),
        (["--split=../../x"], "--split '../../x' is not a plain file name"),
        (["--judge-base-url=http://127.0.0.1:9/v1"], "--judge-base-url needs --judge-model"),
    ],
)
def test_eval_checks_every_argument(tmp_path, qa_file, tiny_model_dir, args, expected, capsys):
    err(eval_argv(tmp_path, *args, tokenizer=str(tiny_model_dir), data=str(qa_file)), capsys, expected)
    assert not (tmp_path / "out").exists()


def test_eval_bad_paths_and_keys(tmp_path, qa_file, latin1_file, a_file, not_a_model, tiny_model_dir, capsys):
    tok = str(tiny_model_dir)
    err(eval_argv(tmp_path, tokenizer=str(not_a_model), data=str(qa_file)), capsys, "has no config.json", "--tokenizer")
    err(eval_argv(tmp_path, tokenizer=tok, data=str(latin1_file)), capsys, "latin1.jsonl, line 2: not UTF-8")
    err(eval_argv(tmp_path, tokenizer=tok, data=str(tmp_path / "gone.jsonl")), capsys, "does not exist")
    argv = eval_argv(tmp_path, tokenizer=tok, data=str(qa_file))
    err([*argv, f"--out={a_file}"], capsys, "--out", "is a file")
    line = err([*argv, "--api-key-env=sk-live-0123456789abcdef"], capsys, "not an environment variable name")
    assert "sk-live" not in line  # a pasted key is never echoed
    assert not (tmp_path / "out").exists()


def test_eval_checks_the_endpoints_before_writing_its_fingerprint(tmp_path, qa_file, tiny_model_dir, capsys):
    argv = eval_argv(tmp_path, tokenizer=str(tiny_model_dir), data=str(qa_file))
    err(argv, capsys, "the policy server at", "does not answer", "--base-url")
    assert not (tmp_path / "out").exists()  # no run.json: nothing blocks the corrected rerun


def test_eval_retriever_endpoint_is_checked(tmp_path, qa_file, tiny_model_dir, fake_openai_server, capsys):
    fake_openai_server.reset()
    argv = eval_argv(tmp_path, tokenizer=str(tiny_model_dir), data=str(qa_file))
    argv[1] = f"--base-url={fake_openai_server.base_url}"
    argv[2] = "--model=fake-model"
    err(argv, capsys, "the retriever at", "does not answer", "--retriever-url")
    argv[2] = "--model=other-model"
    err(argv, capsys, "serves ['fake-model'], not --model 'other-model'")
    assert not (tmp_path / "out").exists()


def test_a_fingerprint_without_results_does_not_block_a_rerun(tmp_path):
    from agentrag_verl.eval.harness import EvalConfig, _check_run_file
    from agentrag_verl.eval.runner import RunnerConfig

    def config(temperature: float) -> EvalConfig:
        runner = RunnerConfig(tokenizer="t", base_url="http://x/v1", model="m", retriever_url="http://x/retrieve")
        runner = RunnerConfig(**{**runner.__dict__, "temperature": temperature})
        return EvalConfig(runner=runner, formats=["searchr1"], out_dir=str(tmp_path))

    _check_run_file(tmp_path, config(0.0))  # a run that stopped before its first result left only run.json
    _check_run_file(tmp_path, config(0.7))  # the corrected rerun goes through and records its own fingerprint
    assert json.loads((tmp_path / "run.json").read_text())["fingerprint"]["runner"]["temperature"] == 0.7
    (tmp_path / "searchr1").mkdir()
    (tmp_path / "searchr1" / "results.jsonl").write_text('{"dataset": "d", "id": "1"}\n')
    with pytest.raises(ValueError, match="holds results of a different evaluation"):
        _check_run_file(tmp_path, config(0.0))  # with results, another configuration is still refused


def test_results_without_judged_metrics_do_not_resume_a_judged_evaluation(tmp_path):
    """Judge accuracy and HiPRAG's OSR/USR are written per question: a judged rerun over unjudged results would keep
    the questions already done without them."""
    from agentrag_verl.eval.harness import EvalConfig, _check_run_file
    from agentrag_verl.eval.runner import RunnerConfig

    runner = RunnerConfig(tokenizer="t", base_url="http://x/v1", model="m", retriever_url="http://x/retrieve")
    judge = {"base_url": "http://x/v1", "model": "judge"}

    def config(judge_metrics: bool, judge: dict | None = judge) -> EvalConfig:
        return EvalConfig(runner, ["hiprag"], str(tmp_path), judge=judge, judge_metrics=judge_metrics)

    assert config(True).fingerprint()["judge_metrics"] and not config(False).fingerprint()["judge_metrics"]
    assert config(True, None).fingerprint() == config(False, None).fingerprint()  # no judge: nothing judged either way
    _check_run_file(tmp_path, config(False))
    (tmp_path / "hiprag").mkdir()
    (tmp_path / "hiprag" / "results.jsonl").write_text('{"dataset": "d", "id": "1"}\n')
    with pytest.raises(ValueError, match=r"differs in \['judge_metrics'\]"):
        _check_run_file(tmp_path, config(True))


# ---- agentrag-verl planners generate ---------------------------------------------------------------------------------


def planners(*args: str) -> list[str]:
    return ["planners", "generate", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m", *args]


def test_planners_bad_input(tmp_path, qa_file, latin1_file, capsys):
    out = str(tmp_path / "plans.jsonl")
    err(planners("--questions", str(tmp_path / "q.parquet"), "--out", out), capsys, "--questions", "does not exist")
    err(planners("--questions", str(tmp_path), "--out", out), capsys, "--questions", "is a folder")
    err(planners("--questions", str(qa_file), "--out", str(tmp_path)), capsys, "--out", "is a folder")
    err(planners("--questions", str(latin1_file), "--out", out), capsys, "latin1.jsonl, line 2: not UTF-8")
    err(planners("--questions", str(qa_file), "--out", out, "-k", "0"), capsys, "argument --num-candidates/-k")
    err(planners("--questions", str(qa_file), "--out", out, "--max-retries", "-1"), capsys, "--max-retries")
    line = err(planners("--questions", str(qa_file), "--out", out, "--api-key-env", "sk-abc-123"), capsys, "NAME")
    assert "sk-abc" not in line
    line = err(planners("--questions", str(qa_file), "--out", out, "--api-key-env", "none"), capsys, "unreachable")
    assert "Planner LLM endpoint" in line and "fix --base-url" in line
    assert not (tmp_path / "plans.jsonl").exists()


def test_planners_errors_name_its_flags(tmp_path, qa_file, monkeypatch, capsys):
    # The planner LLM goes through the judge client; its errors called the key "Judge API key" and pointed at
    # judge.api_key_env / judge.base_url / judge.max_concurrency, which this command has no way to set.
    out = str(tmp_path / "plans.jsonl")
    monkeypatch.delenv("PLANNER_KEY_UNSET", raising=False)
    argv = planners("--questions", str(qa_file), "--out", out)
    line = err([*argv, "--api-key-env", "PLANNER_KEY_UNSET"], capsys, "Planner LLM API key missing", "--api-key-env")
    assert "judge" not in line.lower(), line
    bad_option = [*argv, "--api-key-env", "none", "--judge-option", "cache_max_entries=-1"]
    err(bad_option, capsys, "set --judge-option cache_max_entries")  # a field without a flag of its own
    line = err([*argv, "--api-key-env", "none"], capsys, "--base-url")
    assert "judge" not in line.lower(), line
    assert not (tmp_path / "plans.jsonl").exists()


def test_eval_judge_errors_name_its_flags(
    tmp_path, qa_file, tiny_model_dir, fake_openai_server, keyword_retriever, capsys
):
    # eval sets the judge with --judge-* flags: a judge that does not answer names --judge-base-url.
    argv = eval_argv(tmp_path, tokenizer=str(tiny_model_dir), data=str(qa_file))
    argv[1:3] = [f"--base-url={fake_openai_server.base_url}", "--model=fake-model"]
    closed = f"http://127.0.0.1:{free_port()}/v1"
    argv += [f"--retriever-url={keyword_retriever.url}", f"--judge-base-url={closed}", "--judge-model=j"]
    line = err(argv, capsys, "Judge endpoint", "is unreachable", "fix --judge-base-url")
    assert "judge.base_url" not in line


# ---- agentrag-verl reasonrag -----------------------------------------------------------------------------------------


def reasonrag(tmp_path, *args: str) -> list[str]:
    closed = f"http://127.0.0.1:{free_port()}"
    return ["reasonrag", "generate", "--policy-url", f"{closed}/v1", "--policy-api-key-env", "none", *args]


def test_reasonrag_bad_input(tmp_path, qa_file, latin1_file, a_file, capsys):
    out = str(tmp_path / "rr")
    err(reasonrag(tmp_path, "--data", str(tmp_path / "q.jsonl"), "--out", out), capsys, "--data", "does not exist")
    err(reasonrag(tmp_path, "--data", str(latin1_file), "--out", out), capsys, "latin1.jsonl, line 2: not UTF-8")
    err(reasonrag(tmp_path, "--data", str(qa_file), "--out", str(a_file)), capsys, "--out", "is a file")
    err(reasonrag(tmp_path, "--data", str(qa_file), "--out", out, "--limit", "-2"), capsys, "argument --limit")
    err(reasonrag(tmp_path, "--data", str(qa_file), "--out", out, "--max-rollouts", "0"), capsys, "mcts.max_rollouts")
    err(["reasonrag", "pairs", "--out", str(tmp_path / "nothing")], capsys, "--out", "does not exist")
    err(["reasonrag", "train", "dpo", "--config", str(tmp_path / "dpo.yaml")], capsys, "dpo.yaml", "no such file")
    assert not (tmp_path / "rr").exists()


# ---- agentrag-verl train-local ---------------------------------------------------------------------------------------


def test_train_local_bad_input(tmp_path, qa_file, a_file, not_a_model, capsys):
    work = str(tmp_path / "work")
    base = ["train-local", "--work-dir", work, "--skip-checks"]
    err([*base, "--model", str(not_a_model)], capsys, "has no config.json")
    err([*base, "--train-files", str(tmp_path / "train.parquet")], capsys, "--train-files", "does not exist")
    err([*base, "--config-path", str(a_file)], capsys, "--config-path", "is a file")
    err([*base, "--config-path", str(tmp_path), "--config-name", "nope"], capsys, "has no nope.yaml")
    err(["train-local", "--work-dir", str(a_file)], capsys, "--work-dir", "is a file")
    err([*base, "--steps", "0"], capsys, "argument --steps")
    assert not (tmp_path / "work").exists()


MODEL = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(FileNotFoundError):
        main(["--debug", "planners", "generate", "--questions", str(tmp_path / "q"), "--out", "o", *MODEL])


def test_usage_errors_are_one_line(capsys):
    line = err(["eval", "--model", "m"], capsys, "the following arguments are required")
    assert "see agentrag-verl eval --help" in line
