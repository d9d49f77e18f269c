"""The recipes under test and helpers to run their scripts in DRY_RUN mode and compose their configs offline."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import CONSOLE

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"


@dataclass(frozen=True)
class Recipe:
    """One run script (with env knobs) and what its command must select."""

    script: str
    config: str
    reward: str
    agent: str
    algo: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        extra = "".join(f"-{k}={v}" for k, v in self.env.items())
        return f"{self.script}{extra}"


# (reward manager, default agent loop) that each paper's runs select
SEARCHR1 = ("SearchR1RewardManager", "searchr1_agent")
HIPRAG = ("HipragRewardManager", "hiprag_agent")
MULTISTAGE = ("MultistageRewardManager", "multistage_agent")
SEARCHP1 = ("SearchP1RewardManager", "searchp1_agent")
AUTOSEARCH = ("AutoSearchRewardManager", "autosearch_agent")

CASES = [
    Recipe("searchr1/run_ppo.sh", "searchr1_ppo", *SEARCHR1, "gae"),
    Recipe("searchr1/run_grpo.sh", "searchr1_grpo", *SEARCHR1, "grpo"),
    Recipe("hiprag/run_ppo.sh", "hiprag_ppo", *HIPRAG, "gae"),
    Recipe("hiprag/run_grpo.sh", "hiprag_grpo", *HIPRAG, "grpo"),
    Recipe("multistage/run_dapo.sh", "multistage_stage1", *MULTISTAGE, "grpo", {"STAGE": "1"}),
    Recipe(
        "multistage/run_dapo.sh",
        "multistage_stage2",
        *MULTISTAGE,
        "grpo",
        {"STAGE": "2", "STAGE1_CKPT": "/ckpt/global_step_250"},
    ),
    Recipe("multistage/run_dapo.sh", "multistage_stage1", *MULTISTAGE, "grpo", {"STAGE": "switch"}),
    Recipe("searchp1/run_grpo.sh", "searchp1_grpo", *SEARCHP1, "grpo"),
    Recipe("searchp1/run_grpo.sh", "searchp1_grpo", *SEARCHP1, "grpo", {"MODEL": "Qwen/Qwen2.5-3B-Instruct"}),
    Recipe("autosearch/run_ppo.sh", "autosearch_ppo", *AUTOSEARCH, "gae"),
    Recipe("autosearch/run_grpo.sh", "autosearch_grpo", *AUTOSEARCH, "grpo"),
    Recipe("reasonrag/run_grpo.sh", "reasonrag_orl_grpo", *SEARCHR1, "grpo"),  # RL-ORL: Search-R1's reward and loop
]
"""Every main_ppo run script, one per paper and algorithm, with the knobs that pick each paper setting (the ReasonRAG
DPO recipe is not a main_ppo run: ``tests/reasonrag/test_train.py``)."""

PAPERS = ("searchr1", "hiprag", "multistage", "searchp1", "autosearch", "reasonrag")


def dry_run(recipe: Recipe, *args: str, profile: str = "gpu", **env: str) -> list[str]:
    """The command a script prints with DRY_RUN=1, split as the shell would."""
    full_env = {
        **os.environ,
        "DRY_RUN": "1",
        "PROFILE": profile,
        "PYTHON": sys.executable,
        "AGENTRAG": CONSOLE,
        **recipe.env,
        **env,
    }
    proc = subprocess.run(
        ["bash", str(RECIPES / recipe.script), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"DRY_RUN must print exactly one line (the command), got {lines}"
    return shlex.split(lines[0])


def split_main_ppo(argv: list[str]) -> tuple[str, str, list[str]]:
    """``python -m verl.trainer.main_ppo --config-path=P --config-name=N overrides...`` -> (P, N, overrides)."""
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"], argv[:3]
    path = argv[3].removeprefix("--config-path=")
    name = argv[4].removeprefix("--config-name=")
    return path, name, argv[5:]


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def compose(config_dir: str, name: str, overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name=name, overrides=overrides)
