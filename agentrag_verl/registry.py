"""Method discovery: every method registers itself; the shared machinery never imports a method by name.

A method is a package (``agentrag_verl/methods/<paper>/`` here, or any installed package) whose import registers
one :class:`Method` (:func:`register_method`): its name, its trajectory grammar, the import path of its verl reward
manager and agent loop, its paper metric, its evaluation hooks, its teacher templates, its stand-in judge rules and
its subcommands. Nothing heavy is imported by that: the manager class (which imports verl and torch), the agent loop
and the hooks are loaded only when they are asked for. The shared machinery asks this registry and never names a
method.

Discovery (:func:`load_methods`, called by the first lookup of an unknown name) imports

1. the packages under ``agentrag_verl/methods/``, in the order of ``agentrag_verl.methods.__all__`` (a source
   checkout that was never installed has no entry points), then
2. the packages named by the ``agentrag_verl.methods`` entry-point group (this package declares its six methods in
   ``pyproject.toml``; a third-party package declares its own the same way).

A method's name is its entry-point name, or its folder name under ``agentrag_verl/methods/``. The shared machinery
reaches a method's other modules through its :class:`Method` (import paths it declares), never by importing it.

>>> load_methods()
>>> reward_manager_names()
['searchr1', 'hiprag', 'multistage', 'searchp1', 'autosearch']
>>> get_method("hiprag").paper_metric, get_method("hiprag").agent_name
('cem', 'hiprag_agent')
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENTRY_POINT_GROUP",
    "Method",
    "SEARCH_AGENT_LOOP",
    "register_method",
    "get_method",
    "methods",
    "load_object",
    "load_methods",
    "method_names",
    "method_rank",
    "register_reward_manager",
    "reward_manager_names",
    "reward_manager_target",
    "reward_manager_class",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "agentrag_verl.methods"
"""Entry-point group whose values are method packages (``name = "package.module"``)."""

SEARCH_AGENT_LOOP = "agentrag_verl.agent_loops.search_agent_loop.SearchAgentLoop"
"""The shared tag-format agent loop (``_target_`` of an agent-loop entry); a method subclasses it for its own
auxiliary generations."""

_BUILTIN_PACKAGE = "agentrag_verl.methods"
_METHODS: dict[str, Method] = {}
_MANAGERS: dict[str, str] = {}
_PACKAGES: dict[str, str] = {}
_loaded = False
_loading = False
_load_lock = threading.RLock()
"""Held while the methods load: another thread's lookup waits for the whole discovery (a server answering requests
in threads looked methods up while the first request was still importing them, and found none). Re-entrant: a
method package whose import looks something up in the same thread gets what is registered so far."""


@dataclass(frozen=True)
class Method:
    """Everything the shared machinery needs from one method, declared in the method's ``__init__.py``.

    Import paths (``"package.module:object"``, or ``"package.module.Class"`` for the agent loop, as verl's YAML
    writes it) are resolved only when used (:func:`load_object`), so registering a method imports no verl or torch.
    """

    name: str
    """The method's name: its folder or entry-point name, its format's name, ``reward.reward_manager.name``."""
    title: str = ""
    """How messages and tables name it (e.g. the paper's short name); empty: :attr:`name`."""
    format: Any = None
    """Its trajectory grammar (:class:`agentrag_verl.formats.Format`, registered by :func:`register_method`)."""
    reward_manager: str | None = None
    """``"module:Class"`` of its verl reward manager; None for a method trained without one (ReasonRAG's DPO)."""
    agent_loop: str = SEARCH_AGENT_LOOP
    """``_target_`` of its agent-loop entry (``<name>_agent`` in the agent-loop YAML)."""
    agent_loop_options: Mapping[str, Any] = field(default_factory=dict)
    """The other keys of that entry: constructor options
    (:class:`agentrag_verl.agent_loops.config.SearchLoopConfig`)."""
    agent_loop_comment: str = ""
    """One line written above the entry in the generated YAML."""
    scores_formats: tuple[str, ...] = ()
    """Formats whose trajectories its reward scores in evaluation; empty = its own format only."""
    paper_metric: str = "em"
    """The paper's outcome metric (``em``, ``cem`` or ``f1``): the demonstrations' rejection rule."""
    eval_reward_kwargs: Callable[[Mapping[str, Any] | None, str | None], dict[str, Any]] | None = None
    """``(judge config or None, retriever root URL or None) -> reward.reward_kwargs`` of its manager in evaluation;
    None = the manager's defaults."""
    reward_needs_judge: bool = False
    """Its reward cannot be computed without an LLM judge endpoint."""
    eval_hooks: str | None = None
    """``"module:object"`` of its :class:`agentrag_verl.eval.hooks.EvalHooks` (its own evaluation metrics)."""
    answer_judge: str | None = None
    """``"module:function"``: ``(prediction, golds) -> JudgeRequest``, a YES/NO answer-correctness judge the
    evaluation may use for its judge accuracy (the first method that declares one)."""
    teacher: Any = None
    """Its script for the scripted stand-in teacher (a :class:`agentrag_verl.warmstart.teacher.TeacherScript`: the
    :class:`~agentrag_verl.warmstart.teacher.TeacherTemplates` of a tag format, or the method's own)."""
    standin: str | None = None
    """``"module:function"``: ``(system, user) -> reply or None``, its rules in the stand-in judge server
    (:mod:`agentrag_verl.standin`); None = it asks no judge."""
    commands: tuple[str, ...] = ()
    """Modules exposing ``add_parser(subparsers)``: its ``agentrag-verl`` subcommands."""
    data_presets: str | None = None
    """``"module:object"``: a mapping of ``data prepare --preset`` names to its data recipes."""
    local_reward_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """``reward.reward_kwargs`` its manager needs against the stand-in judge on CPU (the demo, the learning
    benchmark), e.g. an ablation whose detector the stand-in cannot judge."""
    demo: Mapping[str, Any] | None = None
    """Its settings of the warm-start-then-RL demo (:class:`agentrag_verl.demo.pipeline.PipelineSettings` fields);
    the demo runs the first method that declares them, or the one asked for."""
    score_reading: str | None = None
    """``"module:function"``: ``(score) -> {"right": bool, "over_search": bool}``, what one trajectory's reward says
    about its answer and its searches (the demo's per-step search counts)."""

    @property
    def label(self) -> str:
        """:attr:`title`, else :attr:`name`."""
        return self.title or self.name

    @property
    def agent_name(self) -> str:
        """Its agent loop's name in the agent-loop YAML (``<name>_agent``)."""
        return f"{self.name}_agent"

    @property
    def scored_formats(self) -> tuple[str, ...]:
        """:attr:`scores_formats`, else its own format."""
        return self.scores_formats or (self.name,)

    def load(self, attribute: str) -> Any:
        """The object behind one of the import-path attributes; None when the method declares none."""
        target = getattr(self, attribute)
        return load_object(target) if target else None


def load_object(target: str) -> Any:
    """Import ``"package.module:qualname"`` and return the object."""
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        obj = getattr(obj, part)
    return obj


def register_method(method: Method) -> Method:
    """Declare a method (call it from the method package's ``__init__.py``): registers its format and its reward
    manager too. The same declaration again is a no-op.

    Raises:
        ValueError: Another method of that name is declared already.
    """
    key = method.name.strip().lower()
    if key != method.name:
        raise ValueError(f"Method name {method.name!r} must be lowercase without spaces (use {key!r}).")
    if _METHODS.get(key, method) != method:
        raise ValueError(f"Method {key!r} is already declared by {_PACKAGES.get(key, 'another package')}.")
    _METHODS[key] = method
    if method.format is not None:
        from agentrag_verl.formats import register_format

        register_format(method.format)
    if method.reward_manager:
        register_reward_manager(key, method.reward_manager)
    return method


def get_method(name: str) -> Method:
    """The declared :class:`Method` called ``name``.

    Raises:
        ValueError: Unknown name (the message lists the declared ones).
    """
    return _declared(
        _METHODS,
        name,
        "method",
        lambda: [m.name for m in methods()],
        f"(a folder under agentrag_verl/methods/ or a package named in the {ENTRY_POINT_GROUP!r} entry points).",
    )


def _declared(table: dict[str, Any], name: str, what: str, choices: Callable[[], list[str]], how: str) -> Any:
    """``table``'s entry for ``name`` (case and surrounding spaces ignored), once every method package is loaded.

    Raises:
        ValueError: Unknown name: ``Unknown <what> <name>; choose one of <choices()> <how>``.
    """
    load_methods()
    key = str(name).strip().lower()
    if key not in table:
        raise ValueError(f"Unknown {what} {name!r}; choose one of {choices()} {how}")
    return table[key]


def methods() -> list[Method]:
    """Every declared method, in method order (:func:`method_rank`)."""
    load_methods()
    return sorted(_METHODS.values(), key=lambda m: method_rank(m.name))


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
    return _declared(
        _MANAGERS,
        name,
        "reward manager",
        reward_manager_names,
        "(set reward.reward_manager.name), or declare yours with register_reward_manager().",
    )


def reward_manager_class(name: str) -> type:
    """Import and return a declared reward manager class (this imports verl and torch)."""
    return load_object(reward_manager_target(name))


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
