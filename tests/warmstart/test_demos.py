"""Demonstration writer: rejection sampling through verl's real AgentLoopWorker with the real retriever; its token
ids and loss mask are the RL rollout's; the job resumes after a kill with nothing lost or duplicated."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid

import numpy as np
import pytest

from agentrag_verl.eval.data import load_datasets
from agentrag_verl.eval.runner import RunnerConfig
from agentrag_verl.warmstart.demos import DemoConfig, generate_demos, scripted_teacher_client
from tests.support import CONSOLE, trainer_config
from tests.warmstart.conftest import ROWS

pytestmark = pytest.mark.timeout(600)


def config(tiny_model_dir, retriever_service, out, fmt="hiprag", **kw) -> DemoConfig:
    runner = RunnerConfig(
        tokenizer=str(tiny_model_dir),
        base_url="scripted://teacher",
        model="scripted-teacher",
        retriever_url=retriever_service.url,
        prompt_length=1024,
        response_length=1024,
        loop_options={"max_observation_tokens": 256},
    )
    return DemoConfig(runner=runner, format=fmt, out_dir=str(out), progress=False, **kw)


def generate(cfg, datasets, tokenizer):
    questions = [q for qs in datasets.values() for q in qs]
    client = scripted_teacher_client(tokenizer, cfg.format, questions)
    return asyncio.run(generate_demos(cfg, datasets, llm_client=client)), client


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rejection_sampling_and_stats(tiny_model_dir, retriever_service, train_dir, tmp_path, tokenizer):
    datasets = load_datasets([str(train_dir)], split="train")
    stats, _ = generate(config(tiny_model_dir, retriever_service, tmp_path), datasets, tokenizer)
    # 5 questions x 1 sample: s2's passages lack its hop answer, the teacher gives up and the answer is wrong.
    assert (stats["trajectories"], stats["kept"], stats["rejected"]) == (5, 4, {"wrong_answer": 1})
    assert stats["datasets"]["single_hop"]["searches_per_kept"] == 1.0
    assert stats["datasets"]["multi_hop"]["searches_per_kept"] == 2.0  # two hops, two searches
    assert stats["datasets"]["common"]["searches_per_kept"] == 0.0  # answered directly
    assert (tmp_path / "hiprag" / "stats.json").exists() and "| single_hop |" in (
        tmp_path / "hiprag" / "stats.md"
    ).read_text()
    by_id = {r["id"]: r for r in records(tmp_path / "hiprag" / "demos.jsonl")}
    assert by_id["s2"]["kept"] is False and by_id["s2"]["reject_reason"] == "wrong_answer"
    m0 = by_id["m0"]
    assert m0["kept"] and m0["format_ok"] and m0["cem"] == 1.0
    assert len(m0["response_ids"]) == len(m0["response_mask"])
    model_text = tokenizer.decode([t for t, m in zip(m0["response_ids"], m0["response_mask"], strict=True) if m])
    env_text = tokenizer.decode([t for t, m in zip(m0["response_ids"], m0["response_mask"], strict=True) if not m])
    # The loss covers what the teacher wrote; the retrieved passages and HiPRAG's injected tags are masked.
    assert "<search>What is the capital of Caldra?</search>" in model_text and "Halvern University" in model_text
    assert "<context>" not in model_text and "Doc 1(Title:" not in model_text
    assert env_text.count("<context>") == 2 and env_text.count("<conclusion>") == 2
    assert "Doc 1(Title:" in env_text


@pytest.mark.parametrize("fmt", ["searchr1", "autosearch", "multistage", "searchp1", "reasonrag"])
def test_every_design_gets_a_warm_start_through_its_own_loop(fmt, tiny_model_dir, retriever_service, train_dir,
                                                             tmp_path, tokenizer):  # fmt: skip
    """The scripted teacher writes each design's layout inside that design's agent loop (ReasonRAG: its staged
    Reasoning / Grounding chats) against the real retriever; the same questions are kept as in HiPRAG's format."""
    from agentrag_verl.formats import get_format

    datasets = load_datasets([str(train_dir)], split="train")
    stats, _ = generate(config(tiny_model_dir, retriever_service, tmp_path, fmt=fmt), datasets, tokenizer)
    assert (stats["trajectories"], stats["kept"], stats["rejected"]) == (5, 4, {"wrong_answer": 1}), stats
    assert stats["datasets"]["multi_hop"]["searches_per_kept"] == 2.0
    assert stats["datasets"]["common"]["searches_per_kept"] == 0.0
    by_id = {r["id"]: r for r in records(tmp_path / fmt / "demos.jsonl")}
    text = tokenizer.decode(by_id["m0"]["response_ids"])
    assert get_format(fmt).is_valid(text) and get_format(fmt).parse(text).answer == "Halvern University"
    queries = ["What is the capital of Caldra?", "Which university is in Mérida-Lune?"]
    if fmt == "multistage":  # keywords, which Eq. 9's search reward counts concise
        queries = ["capital Caldra", "university Mérida-Lune"]
    assert get_format(fmt).parse(text).queries == queries
    stages = by_id["m0"].get("stages", [])
    if fmt != "reasonrag":
        assert not stages  # one sequence after the prompt
        return
    # ReasonRAG: each stage from its own chat, Reasoning / Grounding x 2, then the answer; SFT trains each on its own
    from agentrag_verl.warmstart.sft_dataset import sft_examples

    assert len(stages) == 5 and stages[0]["prompt_ids"] == by_id["m0"]["prompt_ids"]
    assert ["<reference>" in tokenizer.decode(st["prompt_ids"]) for st in stages] == [False, True, False, True, False]
    mask = by_id["m0"]["response_mask"]
    assert sum(st["end"] - st["start"] for st in stages) == sum(mask)
    assert all(mask[i] == 1 for st in stages for i in range(st["start"], st["end"]))
    ids, loss_mask = sft_examples(by_id["m0"])[-1]  # the answer stage: its prompt, then its output
    n_prompt = len(stages[-1]["prompt_ids"])
    assert loss_mask == [0] * n_prompt + [1] * (len(ids) - n_prompt)
    last = tokenizer.decode(ids[n_prompt:], skip_special_tokens=True).strip()
    assert "<answer>Halvern University</answer>" in last and text.rstrip().endswith(last)


def test_demo_tokens_equal_the_rl_rollout(tiny_model_dir, retriever_service, train_dir, tmp_path, tokenizer):
    """The writer's ids and mask for a trajectory are exactly what verl's trainer gets from the same rollout."""
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from agentrag_verl.formats import get_format

    datasets = load_datasets([str(train_dir)], split="train")
    cfg = config(tiny_model_dir, retriever_service, tmp_path)
    _, client = generate(cfg, datasets, tokenizer)
    demos = {r["question"]: r for r in records(tmp_path / "hiprag" / "demos.jsonl")}

    worker = AgentLoopWorker(compose_like_training(tiny_model_dir, retriever_service.url), llm_client=client)
    questions = [q for qs in datasets.values() for q in qs]
    raw = np.empty(len(questions), dtype=object)
    raw[:] = [get_format("hiprag").prompt.messages(q.question) for q in questions]
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": raw,
            "agent_name": np.array(["hiprag_agent"] * len(questions), dtype=object),
            "extra_info": np.array(
                [{"question": q.question, "index": i} for i, q in enumerate(questions)], dtype=object
            ),
            "index": np.arange(len(questions)),
        },
        meta_info={"global_steps": 1, "validate": False, "request_id": uuid.uuid4().hex},  # a training batch
    )
    out = asyncio.run(worker.generate_sequences(batch))
    n_resp = out.batch["responses"].shape[1]
    for i, q in enumerate(questions):
        n = int(out.batch["attention_mask"][i, -n_resp:].sum())
        n_prompt = int(out.batch["attention_mask"][i, :-n_resp].sum())
        demo = demos[q.question]
        assert out.batch["responses"][i, :n].tolist() == demo["response_ids"], q.id
        assert out.batch["response_mask"][i, :n].tolist() == demo["response_mask"], q.id
        assert out.batch["prompts"][i, -n_prompt:].tolist() == demo["prompt_ids"], q.id


def compose_like_training(tiny_model_dir, retriever_url):
    from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG

    return trainer_config(
        tiny_model_dir,
        prompt_length=1024,
        response_length=1024,
        agent_loops=AGENT_LOOP_CONFIG,
        agentrag={"retriever_url": retriever_url, "max_observation_tokens": 256},
    )


def test_resumes_after_a_kill_with_nothing_lost_or_duplicated(tiny_model_dir, retriever_service, tmp_path):
    # 40 single-hop questions, one at a time, so the job is still running when it is killed.
    data = tmp_path / "data" / "single_hop"
    data.mkdir(parents=True)
    base = ROWS["single_hop"][0]
    rows = []
    for k in range(40):
        row = json.loads(json.dumps(base))
        row["id"] = f"q{k}"
        row["question"] = f"How long is the river Velda? (variant {k})"
        rows.append(row)
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    cmd = [CONSOLE, "demos", "generate", "--format", "searchr1", "--tokenizer", str(tiny_model_dir),
           "--retriever-url", retriever_service.url, "--data", str(tmp_path / "data"), "--out", str(out),
           "--concurrency", "1", "--no-progress"]  # fmt: skip
    demos = out / "searchr1" / "demos.jsonl"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if demos.exists() and len(demos.read_bytes().splitlines()) >= 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the job ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line) for line in demos.read_bytes().splitlines() if line.endswith(b"}")]  # whole lines
    assert 5 <= len(before) < 40
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(line) for line in demos.read_text().splitlines()]
    keys = [f"{r['id']}#{r['sample']}" for r in lines]
    assert sorted(keys) == sorted(f"q{k}#0" for k in range(40))  # every trajectory exactly once
    assert all(r["kept"] for r in lines)
    assert lines[: len(before)] == before  # what was written before the kill is kept, not sampled again


def test_a_fingerprint_without_records_does_not_block_a_rerun(tmp_path):
    from agentrag_verl.warmstart.demos import _check_run_file

    def cfg(model):
        runner = RunnerConfig(tokenizer="tok", base_url="u", model=model, retriever_url="r")
        return DemoConfig(runner=runner, format="hiprag", out_dir=str(tmp_path), progress=False)

    out = tmp_path / "hiprag"
    _check_run_file(out, cfg("teacher-a"), overwrite=False)
    _check_run_file(out, cfg("teacher-b"), overwrite=False)  # no records yet: a corrected rerun goes on
    (out / "demos.jsonl").write_text('{"dataset": "d", "id": "1", "sample": 0}\n')
    with pytest.raises(ValueError, match="another run"):
        _check_run_file(out, cfg("teacher-c"), overwrite=False)  # records of teacher-b are never mixed
    _check_run_file(out, cfg("teacher-c"), overwrite=True)
    assert not (out / "demos.jsonl").exists()
