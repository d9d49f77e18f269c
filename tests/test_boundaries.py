"""Package boundary: ``agentrag_verl`` and ``retriever_server`` import each other only in test fixtures
(``agentrag_verl/testing/``, ``tests/``). The retriever is a service deployable on its own, and the trainer talks to it
over HTTP only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports (absolute imports, at any depth of the module: lazy imports count)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize(
    ("package", "other"), [("agentrag_verl", "retriever_server"), ("retriever_server", "agentrag_verl")]
)
def test_packages_do_not_import_each_other(package, other):
    fixtures = ROOT / "agentrag_verl" / "testing"
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / package).rglob("*.py"))
        if fixtures not in path.parents and other in imported_packages(path)
    ]
    assert not offenders, f"{package} modules import {other} (only test fixtures may): {offenders}"
