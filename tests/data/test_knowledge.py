"""The knowledge probe (``agentrag-verl data knowledge``): closed-book answers through a format's no-search path,
scored with the paper metric, labelled into the rows, resumable; a scripted policy over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrag_verl.cli import main

pytestmark = pytest.mark.timeout(600)


class ClosedBookPolicy:
    """Knows common-knowledge answers always, single-hop ones only greedily, multi-hop ones never; on a multi-hop
    question it first tries to search (the no-search path must not run it)."""

    def __init__(self, tokenizer: Any, qa: dict[str, dict[str, Any]]) -> None:
        self.tokenizer, self.qa, self.calls = tokenizer, qa, 0
        self.prompts: list[str] = []

    def __call__(self, request: dict[str, Any]) -> str:
        self.calls += 1
        prompt = self.tokenizer.decode(request["prompt"])
        self.prompts.append(prompt)
        row = max(self.qa.values(), key=lambda r: prompt.rfind(r["question"]))
        kind, gold = row["metadata"]["type"], row["golden_answers"][0]
        if prompt.endswith("<answer>"):  # the answer forced after the (not run) search
            return "I am not sure</answer>"
        if kind == "multi-hop":
            return f"<think>I need to search.</think>\n<search> {row['question']} </search>"
        known = kind == "common-knowledge" or (kind == "single-hop" and request.get("temperature", 1.0) == 0)
        return f"<think>I know this.</think>\n<answer>{gold if known else 'no idea'}</answer>"


@pytest.mark.parametrize(("fmt", "metric"), [("searchr1", "em"), ("hiprag", "cem")])
def test_probe_labels_what_the_policy_knows_and_resumes(fmt, metric, tmp_path, fake_openai_server, tiny_model_dir,
                                                        keyword_retriever, capsys):  # fmt: skip
    from transformers import AutoTokenizer

    from agentrag_verl.testing import load_qa, write_qa

    qa = load_qa()
    by_kind = {k: [q for q in qa if q["metadata"]["type"] == k][:2] for k in ("single-hop", "multi-hop",
                                                                              "common-knowledge")}  # fmt: skip
    for kind, rows in by_kind.items():
        write_qa(rows, tmp_path / "data" / kind / "train.jsonl")
    policy = ClosedBookPolicy(AutoTokenizer.from_pretrained(tiny_model_dir), {q["question"]: q for q in qa})
    fake_openai_server.reset(replies=policy)
    out = tmp_path / "out"
    argv = ["data", "knowledge", "--format", fmt, f"--base-url={fake_openai_server.base_url}",
            "--model=policy", f"--tokenizer={tiny_model_dir}", "--samples=2", "--no-progress", f"--out={out}",
            *[f"--data={tmp_path / 'data' / k}" for k in by_kind]]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    counts = {ds: (d["questions"], d["known"], d["greedy_right"]) for ds, d in report["datasets"].items()}
    # common: 3 of 3 right; single-hop: only the greedy one (1/3 < 0.5); multi-hop: never (no search is run)
    assert counts == {"single-hop": (2, 0, 2), "multi-hop": (2, 0, 0), "common-knowledge": (2, 2, 2)}
    assert report["metric"] == metric and report["samples"] == 2
    rows = [json.loads(line) for line in (out / "single-hop" / "train.jsonl").read_text().splitlines()]
    label = rows[0]["metadata"]["knowledge"]
    assert (label["greedy"], label["sampled"], label["rate"], label["known"]) == (1.0, 0.0, 0.3333, False)
    assert rows[0]["metadata"]["type"] == "single-hop" and label["policy"] == "policy"
    # the multi-hop search was cut and the answer forced: nothing was retrieved, no passage reached a prompt
    answers = [json.loads(line) for f in out.glob(f"*/{fmt}/demos.jsonl") for line in f.read_text().splitlines()]
    assert len(answers) == 6 * 3 and not any(a["retriever_errors"] or a["n_search"] for a in answers)
    assert not any("</information>" in p.rsplit("<|im_start|>assistant", 1)[-1] for p in policy.prompts)
    assert "| common-knowledge | 2 | 2 | 0 | 2 |" in capsys.readouterr().out
    calls = policy.calls
    assert main(argv) == 0 and policy.calls == calls  # resumed: nothing sampled again

    # `agentrag-verl eval` on the labelled rows splits its metrics by bucket (the policy answers these two sets
    # without a search)
    from agentrag_verl.demo.pipeline import known_questions

    assert known_questions(out, "train") == {f"common-knowledge/{r['id']}" for r in by_kind["common-knowledge"]}
    evaluated = tmp_path / "eval"
    assert main(["eval", "--format", fmt, f"--base-url={fake_openai_server.base_url}", "--model=fake-model",
                 f"--tokenizer={tiny_model_dir}", "--split=train", f"--retriever-url={keyword_retriever.url}",
                 f"--data={out / 'common-knowledge'}", f"--data={out / 'single-hop'}", "--rewards=none",
                 "--no-progress", f"--out={evaluated}"]) == 0  # fmt: skip
    buckets = json.loads((evaluated / "metrics.json").read_text())["formats"][fmt]["buckets"]
    ok = 1.0 if fmt == "searchr1" else 0.0  # the policy writes Search-R1's layout: no HiPRAG <step> block
    assert {b: (m["n"], m["searched"], m["direct"], m["direct_format"]) for b, m in buckets.items()} == {
        "known": (2, 0.0, 2, ok), "corpus": (2, 0.0, 2, ok)}  # fmt: skip
    assert "| Direct well-formed |" in (evaluated / "metrics.md").read_text()


def test_probe_refuses_samples_without_temperature(tmp_path, tiny_model_dir, capsys):
    argv = ["data", "knowledge", "--format", "hiprag", "--base-url=http://127.0.0.1:9/v1", "--model=policy",
            f"--tokenizer={tiny_model_dir}", "--temperature=0", f"--out={tmp_path}"]  # fmt: skip
    assert main(argv) == 2
    assert "--samples 0 for the greedy answer only" in capsys.readouterr().err
