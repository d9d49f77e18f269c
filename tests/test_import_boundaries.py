"""Import boundaries of the package layout (docs/extending.md, "one folder per method").

- a method's equations (``agentrag_verl/methods/<paper>/reward.py``) import no verl, torch, ray or HTTP client;
- no shared module (anything in ``agentrag_verl`` outside ``methods/``) imports a method;
- ``agentrag_verl`` and ``retriever_server`` import each other only in test fixtures (``agentrag_verl/testing``): the
  retriever is a service deployable on its own, and the trainer talks to it over HTTP only;
- no production module imports ``agentrag_verl.testing``;
- no shared module **names** a method either: a method's name in an identifier or in a string (other than a
  docstring) of shared code fails, so the shared code can only reach a method through the registry
  (``agentrag_verl.registry.Method``). Prose (docstrings, comments) may cite the papers. The test fixtures
  (``agentrag_verl/testing``) play specific formats and are not shared code.

Every ``import`` statement of a module counts, at top level or inside a function: a lazy import is still a
dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentrag_verl"
METHODS = PACKAGE / "methods"
TESTING = PACKAGE / "testing"
HEAVY_OR_HTTP = ("verl", "torch", "ray", "aiohttp", "httpx", "requests", "openai", "urllib3", "http", "urllib")


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from x import y`` counts ``x`` and ``x.y``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join([*parts, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def modules_under(root: Path, exclude: Path | None = None) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if exclude is None or exclude not in p.parents)


def _imports_any(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in imported_modules(path) if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_the_scanner_sees_lazy_and_relative_imports(tmp_path):
    pkg = ROOT / "agentrag_verl" / "eval"
    probe = pkg / "_boundary_probe.py"
    probe.write_text("def f():\n    import torch\n    from ..methods.hiprag import reward\n")
    try:
        names = imported_modules(probe)
    finally:
        probe.unlink()
    assert {"torch", "agentrag_verl.methods.hiprag", "agentrag_verl.methods.hiprag.reward"} <= names


def test_every_method_has_its_equations_and_registration():
    methods = sorted(p.name for p in METHODS.iterdir() if (p / "__init__.py").exists())
    assert methods == ["autosearch", "hiprag", "multistage", "reasonrag", "searchp1", "searchr1"]
    for name in ("autosearch", "hiprag", "multistage", "searchp1", "searchr1"):
        assert (METHODS / name / "reward.py").is_file() and (METHODS / name / "manager.py").is_file(), name


@pytest.mark.parametrize("path", sorted(METHODS.glob("*/reward.py")), ids=lambda p: p.parent.name)
def test_method_equations_import_no_framework_or_http(path):
    assert _imports_any(path, HEAVY_OR_HTTP) == []
    # and at run time: importing the module (and the package it registers from) loads none of them
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    code = (
        f"import sys, {module}; "
        f"print(sorted(m for m in {HEAVY_OR_HTTP!r} if m in sys.modules and m not in ('http', 'urllib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_shared_module_imports_a_method():
    offenders = {
        str(p.relative_to(ROOT)): _imports_any(p, ("agentrag_verl.methods",))
        for p in modules_under(PACKAGE, exclude=METHODS)
        if p.parent != METHODS
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_agentrag_verl_and_retriever_server_import_each_other_only_in_fixtures():
    ours = {str(p.relative_to(ROOT)): _imports_any(p, ("retriever_server",)) for p in modules_under(PACKAGE, TESTING)}
    theirs = {
        str(p.relative_to(ROOT)): _imports_any(p, ("agentrag_verl",)) for p in modules_under(ROOT / "retriever_server")
    }
    assert {k: v for k, v in {**ours, **theirs}.items() if v} == {}


def test_no_production_module_imports_the_test_fixtures():
    production = [*modules_under(PACKAGE, exclude=TESTING), *modules_under(ROOT / "retriever_server")]
    offenders = {str(p.relative_to(ROOT)): _imports_any(p, ("agentrag_verl.testing",)) for p in production}
    assert {k: v for k, v in offenders.items() if v} == {}


METHOD_NAMES = sorted(p.name for p in METHODS.iterdir() if (p / "__init__.py").exists())
ALLOWED_STRINGS = {
    # verl's data_source convention of its search examples (``val-core/searchR1_nq/acc``), not our method
    "searchR1_",
}


def method_names_in_code(path: Path, names: list[str]) -> list[str]:
    """``"<line>: <text>"`` for every identifier or non-docstring string of ``path`` that contains one of ``names``
    (case-insensitive). Docstrings (module, class, function and attribute docstrings) and comments are prose."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    found = []
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            texts = [node.value]
        elif isinstance(node, ast.Name):
            texts = [node.id]
        elif isinstance(node, ast.Attribute):
            texts = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            texts = [node.name]
        elif isinstance(node, ast.arg):
            texts = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            texts = [node.arg]
        elif isinstance(node, ast.alias):
            texts = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom) and node.module:
            texts = [node.module]
        for text in texts:
            if text in ALLOWED_STRINGS:
                continue
            if any(name in text.lower() for name in names):
                found.append(f"{getattr(node, 'lineno', '?')}: {text[:80]!r}")
    return found


def test_the_name_scanner_sees_identifiers_and_strings_but_not_prose(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Module prose may cite HiPRAG."""\n'
        "# so may comments: hiprag\n"
        "def reward_of(x):\n"
        '    """HiPRAG Eq. 1."""\n'
        '    if x == "hiprag":\n'
        "        return HIPRAG_DEFAULTS\n"
        "    table = {'autosearch': 1}\n"
        "    return table\n"
    )
    assert method_names_in_code(probe, METHOD_NAMES) == ["5: 'hiprag'", "6: 'HIPRAG_DEFAULTS'", "7: 'autosearch'"]


def test_shared_code_never_names_a_method():
    assert len(METHOD_NAMES) >= 6
    offenders = {
        str(p.relative_to(ROOT)): method_names_in_code(p, METHOD_NAMES)
        for p in modules_under(PACKAGE, exclude=METHODS)
        if TESTING not in p.parents and p.parent != METHODS
    }
    assert {k: v for k, v in offenders.items() if v} == {}
