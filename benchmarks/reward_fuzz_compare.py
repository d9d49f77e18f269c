"""Score one fixed set of fuzzed and edge-case samples with the five reward managers, and compare two such runs.

Used to show which reward outputs a change moves: run it once against each checkout and diff the JSON::

    PYTHONPATH=/path/to/main   python benchmarks/reward_fuzz_compare.py score --out before.json
    PYTHONPATH=/path/to/branch python benchmarks/reward_fuzz_compare.py score --out after.json
    python benchmarks/reward_fuzz_compare.py compare before.json after.json

The samples are deterministic (seeded): tag soup with random ``extra_fields`` (the property tests' fuzz), well-formed
trajectories of every format with the fields the agent loop writes (legacy records, without the ``observed`` key),
and hand-written edge cases. Judges are a deterministic fake (verdicts from a hash of the request), query embeddings
come from a local ``/encode`` stand-in (vectors from a hash), and the tokenizer maps characters to ids, so nothing
needs a network, a model or a GPU. Only APIs present on both sides are used (managers, ``run_single``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TAGS = [
    "<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>",
    "<step>", "</step>", "<reasoning>", "</reasoning>", "<conclusion>", "</conclusion>", "<context>", "</context>",
    "<reflect>", "</reflect>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
]  # fmt: skip
WORDS = ["Paris", "q", " ", "x y", "1934", "Lyon", "Will Smith birth date", "What is it?", "capital of France"]
QUERIES = [
    "capital of France",
    "Will Smith birth date",
    "Can Tho population",
    "Is Paris the capital of France",
    "what year was Marrow & Tilde founded",
    "Orla Brennick founder",
    "Marrow & Tilde founding year",
    "",
]
GOLDS = ["Paris", "1934"]
MANAGERS = ["searchr1", "hiprag", "multistage", "searchp1", "autosearch"]


class CharTokenizer:
    """Token id = character code."""

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids)


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


class FakeJudge:
    """Deterministic verdicts: a function of the request's text only."""

    async def judge(self, request: Any) -> Any:
        from agentrag_verl.judges import Verdict

        text = " ".join(str(m.get("content", "")) for m in request.messages)
        h = _h(text)
        parser = getattr(request.parser, "__name__", "")
        if parser in ("parse_evaluation", "parse_searchp1_evaluation"):  # Search-P1 Figure 9 (0.1 / earlier name)
            if parser == "parse_evaluation":
                from agentrag_verl.methods.searchp1.judge import SearchP1Evaluation
            else:  # the layout before methods/ (compare against an older checkout)
                from agentrag_verl.judges import SearchP1Evaluation

            value = SearchP1Evaluation(
                [0.2, 0.6, 1.0, 1.2][h % 4], 1 + h % 3, h % 3, (h >> 3) % 3, [0.0, 0.5, 1.0][(h >> 5) % 3], 0.5
            )
            return Verdict(value, "{}", True, None, None)
        if h % 11 == 0:
            return Verdict(None, None, False, "timeout", "scripted failure")
        return Verdict(bool(h % 2), "", True, None, None)

    async def judge_many(self, requests: Any) -> list[Any]:
        return [await self.judge(r) for r in requests]


class _Encode(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        vectors = [[((_h(q) >> (4 * i)) % 16) / 15.0 + 0.01 for i in range(6)] for q in body["queries"]]
        data = json.dumps({"embeddings": vectors}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


# ------------------------------------------------------------------------------------------------------- samples


def fuzz_sample(rng: random.Random) -> dict[str, Any]:
    pieces = [rng.choice(TAGS) if rng.random() < 0.5 else rng.choice(WORDS) for _ in range(rng.randint(0, 25))]
    fields: dict[str, Any] | None = None
    if rng.random() < 0.7:
        n = rng.randint(0, 4)
        fields = {
            "agentrag_steps": [
                {"kind": rng.choice(["search", "invalid", "answer"]), "end_token_index": rng.randint(-3, 40)}
                for _ in range(n)
            ],
            "agentrag_reanswers": [
                {"step": rng.randint(0, 4), "query": rng.choice(QUERIES), "text": rng.choice(WORDS)}
                for _ in range(rng.randint(0, 2))
            ],
            "agentrag_intermediate_answers": [
                {"step": rng.randint(0, 4), "answer": rng.choice(GOLDS + ["Lyon", None])}
                for _ in range(rng.randint(0, 3))
            ],
            "agentrag_num_searches": rng.randint(0, 3),
        }
    return {"kind": "fuzz", "response": "".join(pieces), "fields": fields, "golds": [rng.choice(GOLDS)]}


def _end(text: str) -> int:
    return len(text) - 1


def _searches(text: str, queries: list[str], steps: list[dict], call: str, observation: str) -> str:
    """``text`` followed, for each query ``q``, by ``call`` (the model's search; its last character ends the step
    appended to ``steps``) and ``observation`` (the environment's), both formatted with ``q``."""
    for q in queries:
        text += call.format(q=q)
        steps.append({"kind": "search", "query": q, "end_token_index": _end(text)})
        text += observation.format(q=q)
    return text


def wellformed_sample(rng: random.Random, fmt: str) -> dict[str, Any]:
    """A trajectory as the (pre-change) agent loop writes it: legacy step records (no ``observed`` key)."""
    gold = rng.choice(GOLDS)
    n = rng.randint(0, 4)
    queries = [rng.choice(QUERIES[:-1]) for _ in range(n)]
    answer = gold if rng.random() < 0.6 else "Lyon"
    text, steps, reans, inter = "", [], [], []
    if fmt == "hiprag":
        text = "<think>"
        for q in queries:
            text += f"<step><reasoning>look up {q}</reasoning><search>{q}</search>"
            steps.append({"kind": "search", "query": q, "end_token_index": _end(text)})
            conclusion = rng.choice(GOLDS + ["WRONG"])
            text += f"<context>Doc 1(Title: T) {q}.</context>\n<conclusion>{conclusion}</conclusion></step>"
            reans.append({"step": len(steps) - 1, "query": q if rng.random() < 0.7 else q.lower() + "?", "text": gold})
        if rng.random() < 0.5:
            text += "<step><reasoning>so</reasoning><conclusion>it is it</conclusion></step>"
        text += f"</think>\n<answer>{answer}</answer>"
    elif fmt == "searchp1":
        text = _searches(
            "<reasoning>Plan: 1. look up.</reasoning>\n",
            queries,
            steps,
            "<tool_call>{q}</tool_call>",
            "\n<tool_response>\nDoc 1(Title: T) {q}.\n</tool_response>\n<reasoning>next</reasoning>\n",
        )
        text += f"<answer>{answer}</answer>"
    elif fmt == "multistage":
        text = _searches(
            "<think>hmm</think>",
            queries,
            steps,
            "<search>{q}</search>",
            "\n\n<information>Doc 1(Title: T) {q}.</information>\n\n<reflect>ok</reflect>",
        )
        if not queries:
            text += "<reflect>I know it.</reflect>"
        text += f"<answer>{answer}</answer>"
    else:  # searchr1 / autosearch
        for q in queries:
            text += f"<think>need {q}</think>\n<search> {q} </search>"
            steps.append({"kind": "search", "query": q, "end_token_index": _end(text)})
            text += f"\n\n<information>Doc 1(Title: T) {q}.</information>\n\n"
            inter.append({"step": len(steps) - 1, "text": "", "answer": rng.choice(GOLDS + ["Lyon"])})
        text += f"<think>so</think>\n<answer>{answer}</answer>"
    steps.append({"kind": "answer", "query": None, "end_token_index": _end(text)})
    fields = {
        "agentrag_format": fmt,
        "agentrag_steps": steps,
        "agentrag_num_searches": n,
        "agentrag_reanswers": reans,
        "agentrag_intermediate_answers": inter,
    }
    plan = {"ref_planner": "look it up", "ref_reasoning_path": queries[:2] or ["capital of France"]}
    return {"kind": f"wellformed/{fmt}", "response": text, "fields": fields, "golds": [gold], "extra_info": plan}


def edge_samples() -> list[dict[str, Any]]:
    """Cases the fidelity change targets (the new agent loop's fields, with ``observed``)."""
    out = []
    # AutoSearch: empty query (answered with an observation), then a search whose intermediate answer is right.
    t1 = "<think>Search.</think>\n<search> </search>"
    t2 = (
        t1
        + "\n\n<information>The search query is empty.</information>\n\n<think>again</think>\n<search> Marrow </search>"
    )
    t3 = t2 + "\n\n<information>Doc 1(Title: M) 1934.</information>\n\n<think>Found.</think>\n<answer>1934</answer>"
    steps = [
        {"kind": "invalid", "query": "", "end_token_index": _end(t1), "observed": True},
        {"kind": "search", "query": "Marrow", "end_token_index": _end(t2), "observed": True},
        {"kind": "answer", "query": None, "end_token_index": _end(t3), "observed": False},
    ]
    inter = [{"step": 0, "text": "", "answer": "1950"}, {"step": 1, "text": "", "answer": "1934"}]
    fields = {"agentrag_steps": steps, "agentrag_intermediate_answers": inter, "agentrag_num_searches": 1}
    out.append({"kind": "edge/autosearch_empty_query", "response": t3, "fields": fields, "golds": ["1934"]})
    # HiPRAG: non-search step, empty-query step, then a search step whose recorded query differs from the parse.
    h1 = "<think><step><reasoning>Known.</reasoning><conclusion>a fact</conclusion></step><step><reasoning>Look."
    h1 += "</reasoning><search></search>"
    h2 = h1 + "<context>The search query is empty.</context>\n<conclusion>none</conclusion></step><step><reasoning>"
    h2 += "Again.</reasoning><search>Marrow Tilde founding</search>"
    h3 = h2 + "<context>Doc 1(Title: M) 1934.</context>\n<conclusion>Founded in 1934.</conclusion></step></think>\n"
    h3 += "<answer>1934</answer>"
    steps = [
        {"kind": "invalid", "query": "", "end_token_index": _end(h1), "observed": True},
        {"kind": "search", "query": "Marrow Tilde founding", "end_token_index": _end(h2), "observed": True},
        {"kind": "answer", "query": None, "end_token_index": _end(h3), "observed": False},
    ]
    reans = [{"step": 1, "query": "marrow & tilde: founding?", "text": "Founded in 1934."}]
    fields = {"agentrag_steps": steps, "agentrag_reanswers": reans, "agentrag_num_searches": 1}
    out.append({"kind": "edge/hiprag_reanswer_mapping", "response": h3, "fields": fields, "golds": ["1934"]})
    # Multi-stage: one search whose query opens with an auxiliary that is a name.
    for q in ("Will Smith birth date", "Can Tho population", "Is Paris the capital of France"):
        m = f"<think>t</think><search>{q}</search>\n\n<information>d</information>\n\n<reflect>r</reflect>"
        m += "<answer>Paris</answer>"
        out.append({"kind": "edge/multistage_auxiliary", "response": m, "fields": None, "golds": ["Paris"]})
    return out


def samples(seed: int = 17, n_fuzz: int = 300, n_wellformed: int = 40) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = [fuzz_sample(rng) for _ in range(n_fuzz)]
    for fmt in ("searchr1", "hiprag", "multistage", "searchp1"):
        out += [wellformed_sample(rng, fmt) for _ in range(n_wellformed)]
    out += edge_samples()
    for i, s in enumerate(out):
        s["id"] = i
    return out


# ------------------------------------------------------------------------------------------------------- scoring


def make_data(sample: dict[str, Any]) -> Any:
    import numpy as np
    import torch
    from verl import DataProto

    ids = [ord(c) for c in sample["response"]] or [32]
    nt = {
        "data_source": np.array(["nq"], dtype=object),
        "reward_model": np.array([{"ground_truth": {"target": list(sample["golds"])}}], dtype=object),
        "extra_info": np.array(
            [{"index": sample["id"], "question": "q", **sample.get("extra_info", {})}], dtype=object
        ),
        "global_steps": np.array([2]),
    }
    if sample["fields"] is not None:
        arr = np.empty(1, dtype=object)
        arr[0] = sample["fields"]
        nt["tool_extra_fields"] = arr
    batch = {
        "prompts": torch.tensor([[1, 2]]),
        "responses": torch.tensor([ids]),
        "attention_mask": torch.ones(1, 2 + len(ids), dtype=torch.long),
    }
    return DataProto.from_dict(tensors=batch, non_tensors=nt)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9) if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


async def score_all(embedding_url: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from agentrag_verl.rewards import managers

    if hasattr(managers, "MANAGERS"):  # the layout before methods/ (compare against an older checkout)

        def reward_manager_class(name: str) -> Any:
            return managers.MANAGERS[name]

    else:
        from agentrag_verl.registry import reward_manager_class

    kwargs = {
        "multistage": {"embedding": {"kind": "retriever", "url": embedding_url}},
        "autosearch": {"per_step": True},
    }
    judge = FakeJudge()
    out: dict[str, Any] = {"samples": [], "managers": {}}
    built = {}
    for name in MANAGERS:
        config = OmegaConf.create({"reward": {"reward_kwargs": kwargs.get(name, {})}})
        manager = reward_manager_class(name)(config=config, tokenizer=CharTokenizer())

        async def provider(*_: Any) -> Any:
            return judge

        manager.judge = provider
        built[name] = manager
        out["managers"][name] = []
    for sample in samples():
        out["samples"].append({"id": sample["id"], "kind": sample["kind"]})
        for name, manager in built.items():
            result = await manager.run_single(make_data(sample))
            info = dict(result["reward_extra_info"])
            placement = info.pop("_agentrag_token_rewards", None)
            out["managers"][name].append(
                {
                    "id": sample["id"],
                    "score": _round(float(result["reward_score"])),
                    "info": _round(info),
                    "placement": _round(json.loads(placement)) if placement else None,
                }
            )
    return out


def score(path: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Encode)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = asyncio.run(score_all(f"http://127.0.0.1:{server.server_address[1]}"))
    finally:
        server.shutdown()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=0, sort_keys=True)
    print(f"scored {len(result['samples'])} samples x {len(result['managers'])} managers -> {path}")


def compare(before_path: str, after_path: str) -> int:
    before = json.load(open(before_path, encoding="utf-8"))
    after = json.load(open(after_path, encoding="utf-8"))
    kinds = {s["id"]: s["kind"] for s in after["samples"]}
    changed_any = 0
    for name in MANAGERS:
        b = {r["id"]: r for r in before["managers"][name]}
        a = {r["id"]: r for r in after["managers"][name]}
        changed = []
        for i in sorted(a):
            rb, ra = b[i], a[i]
            keys = sorted(
                k
                for k in set(rb["info"]) | set(ra["info"])
                if rb["info"].get(k, "<absent>") != ra["info"].get(k, "<absent>")
            )
            if rb["score"] != ra["score"] and "score" not in keys:
                keys = ["score", *keys]
            if rb["placement"] != ra["placement"]:
                keys.append("placement")
            if keys:
                changed.append((i, keys, rb["score"], ra["score"]))
        by_kind: dict[str, int] = {}
        for i, *_ in changed:
            by_kind[kinds[i]] = by_kind.get(kinds[i], 0) + 1
        print(f"{name}: {len(changed)} of {len(a)} samples changed {dict(sorted(by_kind.items()))}")
        for i, keys, sb, sa in changed:
            print(f"  #{i} {kinds[i]}: score {sb} -> {sa}; changed {keys}")
        changed_any += len(changed)
    return 0 if changed_any == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="Score the sample set with the five managers of the importable package.")
    s.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="List the outputs that differ between two score files.")
    c.add_argument("before")
    c.add_argument("after")
    args = p.parse_args(argv)
    if args.command == "score":
        score(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
