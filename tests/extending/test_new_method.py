"""A method is a folder: a new method in a temporary package, declared through the ``agentrag_verl.methods`` entry
point alone, works with every shared command, with no edit to shared code.

The package (written by :func:`write_method_package`) declares one :class:`~agentrag_verl.registry.Method`: a grammar
(Search-R1's tags under its own name), a verl reward manager, teacher templates, evaluation hooks and a data preset.
A fresh process that has the package on ``sys.path`` then runs ``data prepare``, ``eval`` (its agent loop through
verl's ``AgentLoopWorker``, its reward manager and its evaluation hooks), ``demos generate`` (the scripted teacher)
and its reward manager through verl's own loader (``load_reward_manager``), and checks what each one wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(900)

NAME = "toysearch"

PACKAGE = {
    "__init__.py": '''
        """A test method: Search-R1's tags under another name, with its own reward, evaluation metric and preset."""

        import dataclasses

        from agentrag_verl.data.prepare import OutputSpec, Preset, SourceSpec
        from agentrag_verl.methods.searchr1.grammar import FORMAT as TAGS
        from agentrag_verl.methods.searchr1.teacher import TEMPLATES
        from agentrag_verl.registry import Method, register_method

        PRESETS = {"toy_mini": Preset("its preset", (OutputSpec("train", "train", (SourceSpec("mini"),)),))}

        register_method(
            Method(
                name="toysearch",
                title="Toy",
                format=dataclasses.replace(TAGS, name="toysearch", paper="a test method"),
                reward_manager="toy_method.manager:ToyRewardManager",
                agent_loop_comment="The test method: the shared search loop.",
                teacher=TEMPLATES,
                eval_hooks="toy_method.evaluation:HOOKS",
                data_presets="toy_method:PRESETS",
            )
        )
    ''',
    "manager.py": """
        from dataclasses import dataclass

        from agentrag_verl.methods.searchr1.manager import SearchR1RewardManager
        from agentrag_verl.rewards.registration import verl_reward_manager


        @dataclass(frozen=True)
        class ToyOptions:
            variant: str = "em"
            lambda_f: float = 0.2
            format: str = "toysearch"

            @classmethod
            def from_config(cls, config):
                from agentrag_verl.rewards.managers.base import options_from_config

                return options_from_config(cls, config)


        @verl_reward_manager("toysearch")
        class ToyRewardManager(SearchR1RewardManager):
            options_cls = ToyOptions
    """,
    "evaluation.py": """
        from agentrag_verl.eval.hooks import EvalHooks


        class ToyHooks(EvalHooks):
            columns = (("toy_searched", "Searched", True),)

            def question(self, format_name, response, golds, fields, trajectory):
                return {"searched": trajectory.num_searches > 0} if format_name == "toysearch" else None

            def dataset(self, entries):
                return {"toy_searched": sum(e["searched"] for e in entries) / len(entries) if entries else None}


        HOOKS = ToyHooks()
    """,
}


def write_method_package(site: Path) -> None:
    """``toy_method`` and a distribution whose only entry point is ``toysearch = toy_method``."""
    package = site / "toy_method"
    package.mkdir(parents=True)
    for name, text in PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    dist = site / "toy_method-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-method\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[agentrag_verl.methods]\n{NAME} = toy_method\n")


SCRIPT = """
import json, sys
from pathlib import Path

import pandas as pd

from agentrag_verl.cli import main

policy_url, retriever_url, tokenizer, qa, plans, out = sys.argv[1:7]
out = Path(out)
result = {}

# 1. data prepare: the parquet rows name the method's agent loop
assert main(["data", "prepare", "--input", qa, "--name", "mini", "--split", "test", "--max-per-source", "4",
             "--format", "toysearch", "--out", str(out / "data")]) == 0
rows = pd.read_parquet(out / "data" / "test.parquet")
result["agent_names"] = sorted(set(rows["agent_name"]))
from agentrag_verl.data.prepare import presets
result["presets"] = sorted(presets())

# 2. eval: the agent loop (registered in verl by the plugin), the reward manager and the evaluation hooks
assert main(["eval", f"--base-url={policy_url}", "--model=fake-model", f"--tokenizer={tokenizer}",
             f"--retriever-url={retriever_url}", f"--data=mini={qa}", "--limit=4", "--format=toysearch",
             "--rewards=toysearch", f"--out={out / 'eval'}", "--no-progress"]) == 0
metrics = json.loads((out / "eval" / "metrics.json").read_text())["formats"]["toysearch"]["average"]
result["eval"] = {k: metrics[k] for k in ("n", "em", "toy_searched", "reward/toysearch")}
result["table"] = (out / "eval" / "metrics.md").read_text()

# 3. demos generate: the scripted teacher writes the method's format from its templates
assert main(["demos", "generate", "--format=toysearch", f"--tokenizer={tokenizer}",
             f"--retriever-url={retriever_url}", f"--data=single={plans}", f"--out={out / 'demos'}",
             "--loop-option=max_observation_tokens=256", "--no-progress"]) == 0
demos = [json.loads(line) for line in (out / "demos" / "toysearch" / "demos.jsonl").read_text().splitlines()]
result["demos"] = [d["format"] for d in demos]

# 4. the reward manager through verl's own loader
from hydra import compose, initialize_config_module
from transformers import AutoTokenizer
from verl.trainer.ppo.reward import load_reward_manager

with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=["reward.reward_manager.name=toysearch"])
manager = load_reward_manager(cfg, AutoTokenizer.from_pretrained(tokenizer))
result["manager"] = type(manager).__name__
print("RESULT " + json.dumps(result))
"""


def test_a_method_added_through_the_entry_point_alone_works_with_every_shared_command(
    tmp_path, tiny_model_dir, retriever_service, fake_openai_server
):
    from transformers import AutoTokenizer

    from agentrag_verl.testing import load_qa, write_qa
    from tests.eval.conftest import ScriptedEndpoint
    from tests.warmstart.conftest import ROWS

    site = tmp_path / "site"
    write_method_package(site)
    qa_rows = [q for q in load_qa() if q["metadata"]["type"] == "single-hop"][:4]
    qa = write_qa(qa_rows, tmp_path / "qa.jsonl")
    plans = write_qa(ROWS["single_hop"][:2], tmp_path / "plans.jsonl")  # questions with the teacher's plans
    endpoint = ScriptedEndpoint(AutoTokenizer.from_pretrained(tiny_model_dir), {q["question"]: q for q in load_qa()})
    fake_openai_server.reset(replies=endpoint)
    (tmp_path / "run.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "run.py"), fake_openai_server.base_url, retriever_service.url,
         str(tiny_model_dir), str(qa), str(plans), str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(proc.stdout.rsplit("RESULT ", 1)[1])
    assert result["agent_names"] == ["toysearch_agent"]
    assert "toy_mini" in result["presets"]
    # single-hop questions: the scripted policy searches once and answers right; the reward is the method's own
    assert result["eval"] == {"n": 4, "em": 1.0, "toy_searched": 1.0, "reward/toysearch": 1.0}
    assert "Searched" in result["table"]  # the method's column in the summary table
    assert result["demos"] and set(result["demos"]) == {"toysearch"}
    assert result["manager"] == "ToyRewardManager"
    # and nothing of the test method leaked into this process's registry
    from agentrag_verl.registry import method_names

    assert NAME not in method_names()
