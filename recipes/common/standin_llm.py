"""Stand-in LLM endpoint for the recipes' local profile (``PROFILE=local``): NOT a model.

An OpenAI-compatible server on 127.0.0.1 (:class:`agentrag_verl.testing.FakeOpenAIServer`) that answers every judge
prompt of the five papers with a fixed, well-formed verdict, so a local CPU run exercises the judge wiring (HTTP,
parsing, metrics) of HiPRAG, multi-stage and Search-P1 without a real judge:

- HiPRAG Figures 5/6: ``<answer>True</answer>``;
- multi-stage B.4 correctness judge: ``YES``;
- Search-P1 Figure 9 evaluator: a fixed JSON (planner_score 0.6, one effective step, outcome scores 0.5);
- Search-P1 Figure 8 planner prompt and the vote prompt: a one-query plan that names the gold answer given in the
  prompt (so ``agentrag-verl planners generate`` can build a local cache).

Usage: ``python recipes/common/standin_llm.py --port 18001`` (serves until SIGTERM / Ctrl-C). Point real runs at a
real endpoint instead (``JUDGE_URL``).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import threading
from typing import Any

EVALUATION = {
    "planner_score": 0.6,
    "model_plan_steps": 1,
    "effective_steps_self": 1,
    "effective_steps_ref": 1,
    "outcome_accuracy_score": 0.5,
    "outcome_reasoning_score": 0.5,
}


def reply(body: dict[str, Any]) -> str:
    """The stand-in verdict for one chat-completions request body."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "Dual-Track Evaluation" in text:
        return json.dumps(EVALUATION)
    if "Only respond with YES or NO" in text:
        return "YES"
    if "Optimized Reasoning Path" in text:
        question = re.search(r"Current Question: (.*?)\n", text)
        answer = re.search(r"Correct Answer: (.*?)\n", text)
        q = question.group(1).strip() if question else "the question"
        a = answer.group(1).strip() if answer else "unknown"
        return (
            f"<correct_reasoning_path>\n1. {q}\n</correct_reasoning_path>\n"
            f"<optimized_planner>\nSearch for the question once, then answer {a}.\n</optimized_planner>"
        )
    return "<answer>True</answer>"


def main() -> None:
    from agentrag_verl.testing import FakeOpenAIServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18001)
    parser.add_argument("--model", default="standin-judge")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakeOpenAIServer(replies=reply, port=args.port, models=[args.model]) as server:
        print(f"stand-in LLM (not a model) at {server.base_url}", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
