"""The modules of ``retriever_server`` import one another without a cycle.

Every ``import`` of a ``retriever_server`` module counts, wherever it stands: at top level, under
``if TYPE_CHECKING:``, or inside a function. An import moved into a function or under ``TYPE_CHECKING`` still makes
one module depend on the other, so hiding a cycle there is still a cycle. Imports of other packages (torch, faiss,
ray, uvicorn) are not edges of this graph: a function may import those lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "retriever_server"


def imported_siblings(path: Path, modules: set[str]) -> dict[str, str]:
    """The ``retriever_server`` modules that ``path`` imports, each with where the first such import stands
    (``"top level"``, ``"TYPE_CHECKING"`` or ``"function"``)."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and where == "top level":
                here = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                here = "TYPE_CHECKING"
            names: list[str] = []
            if isinstance(child, ast.ImportFrom):
                if child.level == 1:  # from .x import y / from . import x
                    names = [child.module] if child.module else [alias.name for alias in child.names]
                elif child.level == 0 and (child.module or "").startswith("retriever_server."):
                    names = [child.module.split(".")[1]]
                elif child.level == 0 and child.module == "retriever_server":
                    names = [alias.name for alias in child.names]
            elif isinstance(child, ast.Import):
                names = [a.name.split(".")[1] for a in child.names if a.name.startswith("retriever_server.")]
            for name in names:
                name = name.split(".")[0]
                if name in modules and name != path.stem:
                    found.setdefault(name, here)
            visit(child, here)

    visit(ast.parse(path.read_text(), filename=str(path)), "top level")
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """Module → {imported module: where}, over the package's ``*.py`` files."""
    paths = sorted(package.glob("*.py"))
    modules = {p.stem for p in paths}
    return {p.stem: imported_siblings(p, modules) for p in paths}


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)) is not None:
            return cycle
    return None


def describe(graph: dict[str, dict[str, str]], cycle: list[str]) -> str:
    return " -> ".join(
        f"{a} ({graph[a][b]} import of {b})" if i < len(cycle) - 1 else a
        for i, (a, b) in enumerate(zip(cycle, [*cycle[1:], cycle[0]], strict=True))
    )


def test_the_scanner_sees_every_kind_of_import(tmp_path):
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import b\nif TYPE_CHECKING:\n    from .c import C\n"
        "def f():\n    from .d import g\n    import torch\nclass K:\n    def m(self):\n"
        "        from retriever_server.e import h\n"
    )
    for name in "bcde":
        (tmp_path / f"{name}.py").write_text("")
    graph = import_graph(tmp_path)
    assert graph["a"] == {"b": "top level", "c": "TYPE_CHECKING", "d": "function", "e": "function"}
    (tmp_path / "e.py").write_text("def f():\n    from .a import K\n")
    cycle = find_cycle(import_graph(tmp_path))
    assert cycle == ["a", "e", "a"]


def test_retriever_server_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    assert {"app", "ray_app", "retriever", "sharded", "batching", "protocol"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {describe(graph, cycle)}"
