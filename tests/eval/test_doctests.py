"""The ``>>>`` examples of the eval metrics and report modules run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["agentrag_verl.eval.metrics", "agentrag_verl.eval.report"])
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
