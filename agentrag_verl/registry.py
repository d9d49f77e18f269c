"""Method discovery: every method registers itself; the shared machinery never imports a method by name.

A method is a package (``agentrag_verl/methods/<paper>/`` here, or any installed package) whose import registers
what it provides: its trajectory grammar (:func:`agentrag_verl.formats.register_format`) and the import path of its
verl reward manager (:func:`register_reward_manager`). Nothing heavy is imported by that: the manager class (which
imports verl and torch) is loaded only when it is asked for.

Discovery (:func:`load_methods`, called by the first lookup of an unknown name) imports

1. the packages under ``agentrag_verl/methods/``, in the order of ``agentrag_verl.methods.__all__`` (a source
   checkout that was never installed has no entry points), then
2. the packages named by the ``agentrag_verl.methods`` entry-point group (this package declares its six methods in
   ``pyproject.toml``; a third-party package declares its own the same way).

A method's name is its entry-point name, or its folder name under ``agentrag_verl/methods/``. The shared machinery
reaches a method's other modules by that name (:func:`method_module`), never by importing it: the evaluation finds
HiPRAG's step judges with ``method_module("hiprag", "judge")``.

>>> load_methods()
>>> reward_manager_names()
['searchr1', 'hiprag', 'multistage', 'searchp1', 'autosearch']
>>> method_module("hiprag", "judge").__name__
'agentrag_verl.methods.hiprag.judge'
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from types import ModuleType

__all__ = [
    "ENTRY_POINT_GROUP",
    "load_methods",
    "method_names",
    "method_module",
    "method_rank",
    "register_reward_manager",
    "reward_manager_names",
    "reward_manager_target",
    "reward_manager_class",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "agentrag_verl.methods"
"""Entry-point group whose values are method packages (``name = "package.module"``)."""

_BUILTIN_PACKAGE = "agentrag_verl.methods"
_MANAGERS: dict[str, str] = {}
_PACKAGES: dict[str, str] = {}
_loaded = False
_loading = False
_load_lock = threading.RLock()
"""Held while the methods load: another thread's lookup waits for the whole discovery (a server answering requests
in threads looked methods up while the first request was still importing them, and found none). Re-entrant: a
method package whose import looks something up in the same thread gets what is registered so far."""


def register_reward_manager(name: str, target: str) -> None:
    """Declare the reward manager of a method: ``name`` (``reward.reward_manager.name``) -> ``"module:Class"``.

    Raises:
        ValueError: ``name`` is declared already with another target, or ``target`` is not ``module:Class``.
    """
    key = str(name).strip().lower()
    if ":" not in target:
        raise ValueError(f"Reward manager target {target!r} of {name!r} must read 'package.module:ClassName'.")
    if _MANAGERS.get(key, target) != target:
        raise ValueError(f"Reward manager {key!r} is already declared as {_MANAGERS[key]!r}; pick another name.")
    _MANAGERS[key] = target


def load_methods() -> None:
    """Import every method package once: the built-in folder (in the order of ``agentrag_verl.methods.__all__``),
    then the packages of the entry points."""
    global _loaded, _loading
    if _loaded:
        return
    with _load_lock:
        if _loaded or _loading:  # done by another thread meanwhile, or re-entered from a method's import
            return
        _loading = True
        try:
            _discover()
            _loaded = True
        finally:
            _loading = False


def _discover() -> None:
    builtin = importlib.import_module(_BUILTIN_PACKAGE)
    folders = [m.name for m in pkgutil.iter_modules(builtin.__path__) if m.ispkg]
    listed = list(getattr(builtin, "__all__", ()))
    ordered = [n for n in listed if n in folders] + sorted(set(folders) - set(listed))
    packages = [(name, f"{_BUILTIN_PACKAGE}.{name}") for name in ordered]
    try:
        from importlib.metadata import entry_points

        packages += [(ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # broken metadata must not hide the built-in methods
        logger.warning("agentrag-verl: reading the %s entry points failed", ENTRY_POINT_GROUP, exc_info=True)
    for name, package in packages:
        _PACKAGES.setdefault(name.strip().lower(), package)
    for package in dict.fromkeys(package for _, package in packages):
        importlib.import_module(package)


def reward_manager_names() -> list[str]:
    """Declared reward-manager names, in method order (:func:`method_rank`)."""
    load_methods()
    return sorted(_MANAGERS, key=method_rank)


def reward_manager_target(name: str) -> str:
    """``"module:Class"`` of a declared reward manager.

    Raises:
        ValueError: Unknown name; the message lists the declared ones.
    """
    load_methods()
    key = str(name).strip().lower()
    if key not in _MANAGERS:
        raise ValueError(
            f"Unknown reward manager {name!r}; choose one of {reward_manager_names()} "
            f"(set reward.reward_manager.name), or declare yours with register_reward_manager()."
        )
    return _MANAGERS[key]


def reward_manager_class(name: str) -> type:
    """Import and return a declared reward manager class (this imports verl and torch)."""
    module, _, qualname = reward_manager_target(name).partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def method_names() -> list[str]:
    """Names of the discovered methods, in discovery order."""
    load_methods()
    return list(_PACKAGES)


def method_rank(name: str) -> int:
    """Position of the method ``name`` in discovery order; names of no method sort last. Listings use it, so their
    order does not depend on which method a process happened to import first.

    >>> method_rank("searchr1") < method_rank("autosearch") < method_rank("no-such-method")
    True
    """
    load_methods()
    ranks = {key: i for i, key in enumerate(_PACKAGES)}
    return ranks.get(str(name).strip().lower(), len(ranks))


def method_module(method: str, module: str) -> ModuleType:
    """Import and return ``module`` of the method package named ``method`` (e.g. ``("hiprag", "judge")``).

    Raises:
        ValueError: Unknown method (the message lists the discovered ones), or the method has no such module.
    """
    load_methods()
    key = str(method).strip().lower()
    if key not in _PACKAGES:
        raise ValueError(
            f"Unknown method {method!r}; choose one of {list(_PACKAGES)} (a folder under agentrag_verl/methods/ or "
            f"a package named in the {ENTRY_POINT_GROUP!r} entry points)."
        )
    target = f"{_PACKAGES[key]}.{module}"
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if e.name != target:
            raise
        raise ValueError(f"Method {method!r} has no module {module!r} ({target} does not exist).") from None
