"""Lazy package exports: a package names what it exports and the submodule holding each name, and the submodule is
imported on first access, so ``import agentrag_verl.<package>`` stays light (no torch, verl or openai until a name
that needs them is used).

>>> getattr_, dir_, all_ = lazy_exports("json", {"JSONDecoder": "decoder"})
>>> all_, getattr_("JSONDecoder").__module__
(['JSONDecoder'], 'json.decoder')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The module-level ``__getattr__``, ``__dir__`` and ``__all__`` of a package with lazy exports.

    Use it at the bottom of a package's ``__init__.py``::

        __getattr__, __dir__, __all__ = lazy_exports(__name__, {"JudgeClient": "client", ...})

    Args:
        package: The package's ``__name__``.
        exports: ``{exported name: module}``: a submodule name relative to the package (``"client"``), or an
            absolute module name (one with a dot, ``"agentrag_verl.data.corpus"``).

    Returns:
        ``(__getattr__, __dir__, __all__)``: ``__getattr__(name)`` imports ``<package>.<submodule>`` and returns its
        attribute ``name`` (an unknown name raises ``AttributeError`` as for any module); ``__dir__`` lists the
        exports beside the package's own globals; ``__all__`` is the sorted export names.
    """
    table = {name: module if "." in module else f"{package}.{module}" for name, module in exports.items()}

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        import sys

        module = sys.modules.get(package)
        own = set(vars(module)) if module is not None else set()
        return sorted(own | set(table))

    return __getattr__, __dir__, sorted(table)
