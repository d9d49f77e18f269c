"""Run a callback right after a module finishes importing (or at once if it is imported already).

The verl plugin registers our reward managers and agent loops in verl's registries this way: importing verl's
registry modules from the plugin itself would cost seconds in every process that imports verl (figure in
``benchmarks/README.md``), and would import them while ``import verl`` is still running.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["when_imported"]

logger = logging.getLogger(__name__)


def _run_quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # verl hides plugin errors; say it loudly once
        logger.warning("agentrag-verl: %s failed", getattr(callback, "__qualname__", callback), exc_info=True)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """One shot: wraps the module's loader so that ``callback`` runs after the module body."""

    def __init__(self, module: str, callback: Callable[[], None]) -> None:
        self.module, self.callback = module, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; also prevents recursion in find_spec below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _run_quietly(self.callback)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def when_imported(module: str, callback: Callable[[], None]) -> None:
    """Run ``callback`` now if ``module`` is imported, else right after its import (idempotent per pair; a failing
    callback logs one WARNING with its traceback)."""
    if module in sys.modules:
        _run_quietly(callback)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _PostImportHook) and (finder.module, finder.callback) == (module, callback):
            return
    sys.meta_path.insert(0, _PostImportHook(module, callback))
