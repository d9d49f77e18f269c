"""Resuming: an interrupted run (cancelled mid-flight, torn last line, failing endpoint) continues where it stopped,
evaluates every question exactly once, and refuses to mix results of a different configuration."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from agentrag_verl.eval.data import load_datasets
from agentrag_verl.eval.harness import EvalIncomplete, evaluate, open_results
from agentrag_verl.testing import Fault

from .conftest import make_config

pytestmark = pytest.mark.timeout(600)


def keys(path) -> list[str]:
    return [f"{r['dataset']}/{r['id']}" for r in map(json.loads, path.read_text().splitlines())]


async def test_resume_after_cancel_and_torn_line(
    tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir
):
    server, endpoint = scripted_server
    datasets = load_datasets([str(tmp_path / "data")])
    config = make_config(tmp_path / "out", server, retriever_service.url, tiny_model_dir, ["searchr1"], concurrency=2)
    results = tmp_path / "out" / "searchr1" / "results.jsonl"

    task = asyncio.create_task(evaluate(config, datasets))
    while not results.exists() or len(results.read_text().splitlines()) < 6:
        await asyncio.sleep(0.05)
        assert not task.done(), task.exception() if task.done() else None
    task.cancel()  # like Ctrl-C: questions in flight are lost, finished ones are on disk
    with pytest.raises(asyncio.CancelledError):
        await task
    done_before = keys(results)
    assert 6 <= len(done_before) < 30 and len(set(done_before)) == len(done_before)
    # A crash in the middle of a write leaves a torn last line.
    with open(results, "a") as f:
        f.write('{"dataset": "single", "id": "test_9", "em": 1')

    calls_before = endpoint.policy_calls
    summary = await evaluate(config, datasets)
    final = keys(results)
    assert sorted(final) == sorted({q.key for qs in datasets.values() for q in qs})  # all 30, each once
    assert final[: len(done_before)] == done_before  # earlier results kept, torn line dropped
    # Only the missing questions were rolled out again: common 0 searches (1 call), single 1 (2), multi 2 (3).
    calls_per = {"common": 1, "single": 2, "multi": 3}
    expected = sum(calls_per[k.split("/")[0]] for k in set(final) - set(done_before))
    assert endpoint.policy_calls - calls_before == expected
    d = summary["formats"]["searchr1"]["datasets"]
    assert (d["common"]["em"], d["single"]["em"], d["multi"]["em"]) == (1.0, 1.0, 0.0)


async def test_failed_questions_are_reported_then_retried(
    tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir
):
    server, endpoint = scripted_server
    datasets = load_datasets([str(tmp_path / "data" / "common")])
    config = make_config(
        tmp_path / "out", server, retriever_service.url, tiny_model_dir, ["searchr1"], concurrency=1, question_retries=0
    )
    # The completions client tries 3 times (2 retries): the first question fails for good, the others pass.
    server.inject(Fault.server_error(503), times=3)
    with pytest.raises(EvalIncomplete) as info:
        await evaluate(config, datasets)
    assert sum(len(v) for v in info.value.missing.values()) == 1 and "rerun" in str(info.value)
    results = tmp_path / "out" / "searchr1" / "results.jsonl"
    assert len(keys(results)) == 7
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["formats"]["searchr1"]["missing"] == 1
    summary = await evaluate(config, datasets)
    assert len(keys(results)) == 8 and summary["formats"]["searchr1"]["missing"] == 0


async def test_other_configuration_is_refused(
    tmp_path, fixture_datasets, scripted_server, retriever_service, tiny_model_dir
):
    server, _ = scripted_server
    datasets = load_datasets([str(tmp_path / "data" / "common")], limit=1)
    config = make_config(tmp_path / "out", server, retriever_service.url, tiny_model_dir, ["searchr1"])
    await evaluate(config, datasets)
    hotter = dataclasses.replace(config, runner=dataclasses.replace(config.runner, temperature=1.0))
    with pytest.raises(ValueError, match="--overwrite"):
        await evaluate(hotter, datasets)
    summary = await evaluate(dataclasses.replace(hotter, overwrite=True), datasets)
    assert summary["formats"]["searchr1"]["average"]["n"] == 1


def test_store_drops_torn_line_and_rejects_corrupt_middle(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"dataset": "d", "id": "1"}\n{"dataset": "d", "id": "2"}\n{"dataset": "d", "i')
    store = open_results(path)
    assert set(store.records) == {"d/1", "d/2"}
    store.append({"dataset": "d", "id": "3"})
    store.close()
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["1", "2", "3"]
    path.write_text('{"dataset": "d", "id": "1"}\nnot json\n{"dataset": "d", "id": "2"}\n')
    with pytest.raises(ValueError, match="line 2"):
        open_results(path)
