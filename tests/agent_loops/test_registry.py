"""The shipped agent-loop YAML: generated from the method registry, one entry per method, importable targets, options
that SearchLoopConfig accepts; and the same entries in verl's own agent-loop registry through the plugin."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from agentrag_verl.agent_loops import AGENT_LOOP_CONFIG, agent_loop_entries, agent_name, render_agent_loop_yaml
from agentrag_verl.agent_loops.config import SearchLoopConfig
from agentrag_verl.formats import available_formats
from agentrag_verl.registry import methods


def test_shipped_yaml_is_the_generated_one():
    with open(AGENT_LOOP_CONFIG) as f:
        assert f.read() == render_agent_loop_yaml(), (
            "regenerate: python -m agentrag_verl.agent_loops > " + AGENT_LOOP_CONFIG
        )


def test_yaml_has_one_entry_per_method():
    entries = OmegaConf.to_container(OmegaConf.load(AGENT_LOOP_CONFIG))
    assert (
        [e["name"] for e in entries] == [m.agent_name for m in methods()] == [f"{f}_agent" for f in available_formats()]
    )
    for entry in entries:
        module, cls = entry["_target_"].rsplit(".", 1)
        assert hasattr(importlib.import_module(module), cls)
        config = SearchLoopConfig.from_sources(entry, None)  # no unknown keys
        assert agent_name(config.format) == entry["name"]
    # the method loops that add auxiliary generations subclass the shared loop
    targets = {e["format"]: e["_target_"] for e in entries}
    assert targets["hiprag"].endswith("methods.hiprag.agent_loop.HipragAgentLoop")
    assert targets["autosearch"].endswith("methods.autosearch.agent_loop.AutoSearchAgentLoop")


def test_the_plugin_registers_every_method_loop_in_verl():
    # a fresh process: importing verl's agent-loop module runs the plugin's post-import registration
    code = (
        "import verl.experimental.agent_loop.agent_loop as al\n"
        "import json; print(json.dumps(al._agent_loop_registry, default=str))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    registered = json.loads(out)
    for entry in agent_loop_entries():
        assert registered[entry["name"]] == entry


def test_custom_overrides_yaml_and_typos_are_reported():
    config = SearchLoopConfig.from_sources(
        {"name": "x", "format": "hiprag", "retriever_topk": 3}, {"agentrag": {"retriever_topk": 5}}
    )
    assert config.retriever_topk == 5 and config.retriever.topk == 5
    with pytest.raises(ValueError, match="observation_truncation_side"):
        SearchLoopConfig(format="hiprag", observation_truncation_side="top")
    with pytest.raises(ValueError, match="has no format"):
        SearchLoopConfig()


def test_package_import_is_light():
    # Importing the package and the fields module must not pull torch or verl (the rewards import fields).
    code = "import sys, agentrag_verl.agent_loops.fields, agentrag_verl.tools; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_doctests():
    import doctest

    from agentrag_verl.agent_loops import openai_client, search_agent_loop

    for module in (search_agent_loop, openai_client):
        assert doctest.testmod(module).failed == 0, module.__name__
