"""The ``>>>`` examples of the package's shared top-level modules run as tests (pytest is not configured with
--doctest-modules; the subpackages' run in their own folders' tests)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["_lazy", "failure_log", "http", "jsonl", "options", "registry", "standin", "stats"])
def test_module_examples(module):
    result = doctest.testmod(importlib.import_module(f"agentrag_verl.{module}"))
    assert result.attempted > 0 and result.failed == 0
