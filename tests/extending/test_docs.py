"""docs/extending.md: every ``python`` block runs (in order, as one module), its ``>>>`` examples pass, the ``yaml``
recipe composes with Hydra on verl's ``ppo_trainer``, the Hydra override lines compose, and the ``toml`` parses."""

from __future__ import annotations

import doctest
import re
import sys
import types
from pathlib import Path

import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(DOC.read_text()) if kind == lang]


def test_doc_has_snippets_for_each_topic():
    text = DOC.read_text()
    for heading in (
        "## 1. A new reward manager",
        "## 2. A new trajectory format",
        "## 3. A new agent loop",
        "## 4. A new method",
    ):
        assert heading in text
    assert len(blocks("python")) >= 6 and blocks("yaml") and blocks("bash") and blocks("toml")


def test_python_blocks_run_in_order(tmp_path, monkeypatch):
    from agentrag_verl import formats, registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(formats, "_FORMATS", dict(formats._FORMATS))  # the page registers a format: keep it local
    registry.load_methods()  # the built-in methods declare themselves in the real registry first
    monkeypatch.setattr(registry, "_MANAGERS", dict(registry._MANAGERS))  # the page declares a manager: keep it local
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))  # and a method
    module = types.ModuleType("agentrag_extending_doc")  # a real module: dataclasses and Hydra _target_ need one
    sys.modules[module.__name__] = module
    try:
        for i, code in enumerate(blocks("python")):
            try:
                exec(compile(code, f"{DOC}:python-block-{i}", "exec"), module.__dict__)
            except Exception as exc:
                raise AssertionError(f"docs/extending.md python block {i} failed: {exc!r}\n{code}") from exc
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0
    finally:
        sys.modules.pop(module.__name__, None)


def test_recipe_yaml_composes_on_ppo_trainer(tmp_path):
    from hydra import compose, initialize_config_dir

    (recipe,) = [b for b in blocks("yaml") if "defaults:" in b]
    yaml.safe_load(recipe)
    (tmp_path / "recipe.yaml").write_text(recipe)
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose(config_name="recipe")
    assert cfg.reward.reward_manager.name == "BudgetRewardManager" and cfg.reward.reward_kwargs.free_searches == 3
    assert cfg.algorithm.adv_estimator  # inherited from ppo_trainer


@pytest.mark.parametrize("i", range(len(blocks("bash"))))
def test_override_lines_compose(i):
    from hydra import compose, initialize_config_module

    lines = [ln.strip() for ln in blocks("bash")[i].splitlines() if ln.strip() and not ln.startswith("#")]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=lines)
    assert cfg.reward.reward_manager.source == "importlib" and cfg.reward.reward_kwargs.free_searches == 3


def test_toml_parses():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    groups = set()
    for block in blocks("toml"):
        entry_points = tomllib.loads(block)["project"]["entry-points"]
        assert entry_points and all(entry_points.values())
        groups.update(entry_points)
    # the two ways into every process: our method discovery, and verl's plugin import
    assert groups == {"agentrag_verl.methods", "verl.plugins"}
    from agentrag_verl.registry import ENTRY_POINT_GROUP

    assert ENTRY_POINT_GROUP == "agentrag_verl.methods"
