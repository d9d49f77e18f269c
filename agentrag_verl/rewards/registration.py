"""Register the reward managers in verl's reward-loop registry, lazily, from the ``verl.plugins`` entry point.

verl loads :mod:`agentrag_verl.verl_plugin` at ``import verl`` in every process. Importing verl's reward-manager
package there would cost seconds per process (it pulls in ray, aiohttp and the reward loop; figure in
``benchmarks/README.md``), so :func:`install`
registers the names only when verl itself imports ``verl.experimental.reward_loop.reward_manager`` (a one-shot
post-import hook, :mod:`agentrag_verl._post_import`), or at once if it is already imported. Names: the methods' names
(``reward.reward_manager.name=<name>``, source ``register``).

The names are those the methods declare (:func:`agentrag_verl.registry.register_reward_manager`); each manager
module also registers its own class when it is imported (:func:`verl_reward_manager`). Without the plugin, select a
manager by path (``reward.reward_manager.source=importlib``,
``reward.reward_manager.module.path=pkg://agentrag_verl.methods.hiprag.manager``,
``reward.reward_manager.name=HipragRewardManager``).
"""

from __future__ import annotations

import logging
import sys

from agentrag_verl._post_import import when_imported

logger = logging.getLogger(__name__)

__all__ = ["install", "register_all", "verl_reward_manager", "REWARD_MANAGER_PACKAGE"]

REWARD_MANAGER_PACKAGE = "verl.experimental.reward_loop.reward_manager"


def verl_reward_manager(name: str):
    """Class decorator: register a reward manager under ``name`` in verl's reward-manager registry (imports verl).

    A name registered already with another class keeps that class (a warning says so), as verl's first
    registration wins. The other declared managers are registered too, once this one is: when one of our managers
    was the first to import verl's reward-manager package, the post-import hook could not import the others yet
    (they need the shared manager modules that were still importing).
    """

    def decorator(cls: type) -> type:
        from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

        existing = REWARD_MANAGER.get(name)
        if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
            logger.warning("reward manager %r already registered as %s; keeping it", name, existing)
        else:
            REWARD_MANAGER[name] = cls
        _register_declared()
        return cls

    return decorator


def register_all() -> dict[str, type]:
    """Import every declared manager module now (each registers its class); returns the name -> class mapping."""
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    from agentrag_verl.registry import reward_manager_class, reward_manager_names, reward_manager_target

    for name in reward_manager_names():
        module = reward_manager_target(name).partition(":")[0]
        if name in REWARD_MANAGER or module in sys.modules:
            continue  # registered, or importing right now: its decorator registers it when it is done
        try:
            reward_manager_class(name)
        except ImportError as exc:
            if not _shared_modules_importing():
                raise
            logger.debug("reward manager %r: deferred until the shared manager modules are imported (%s)", name, exc)
    return {name: REWARD_MANAGER[name] for name in reward_manager_names() if name in REWARD_MANAGER}


def _shared_modules_importing() -> bool:
    """Whether one of our shared manager modules is partially imported (the import that reached verl's package)."""
    return any(
        getattr(getattr(module, "__spec__", None), "_initializing", False)
        for name, module in list(sys.modules.items())
        if name.startswith("agentrag_verl.rewards.")
    )


def install() -> None:
    """Register now if verl's reward-manager package is loaded, else on its import (idempotent, cheap)."""
    when_imported(REWARD_MANAGER_PACKAGE, register_all)


def _register_declared() -> None:
    try:
        register_all()
    except Exception:  # verl hides plugin errors; say it loudly once
        logger.warning("agentrag-verl: registering reward managers failed", exc_info=True)
