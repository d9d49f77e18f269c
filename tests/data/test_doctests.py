"""The ``>>>`` examples of the data-prep and planner modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "agentrag_verl.data.flashrag",
        "agentrag_verl.data.knowledge",
        "agentrag_verl.data.prepare",
        "agentrag_verl.methods.searchp1.planners.generate",
        "agentrag_verl.methods.searchp1.planners.prompts",
    ],
)
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
