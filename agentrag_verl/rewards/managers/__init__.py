"""verl reward managers (thin adapters over :mod:`agentrag_verl.rewards`), one per paper + Search-R1.

================  ==================================  ======================================================
registered name   class                               ``acc`` (main metric)
================  ==================================  ======================================================
``searchr1``      ``searchr1.SearchR1RewardManager``   EM
``hiprag``        ``hiprag.HipragRewardManager``       CEM
``multistage``    ``multistage.MultistageRewardManager``  judge correctness
``searchp1``      ``searchp1.SearchP1RewardManager``   CEM
``autosearch``    ``autosearch.AutoSearchRewardManager``  EM
================  ==================================  ======================================================

Select one by name (``reward.reward_manager.name=hiprag``; registered by the ``verl.plugins`` entry point, see
:mod:`agentrag_verl.rewards.registration`), or by path, which needs no plugin::

    reward.reward_manager.source=importlib
    reward.reward_manager.module.path=pkg://agentrag_verl.rewards.managers
    reward.reward_manager.name=HipragRewardManager

Each is a :class:`~agentrag_verl.rewards.managers.composed.ComposedRewardManager` over reward parts
(:mod:`agentrag_verl.rewards.parts`); new designs are written the same way (``docs/extending.md``).
Options go to ``reward.reward_kwargs`` (e.g. ``+reward.reward_kwargs.lambda_p=0.6``). This package imports verl
(and torch); :mod:`agentrag_verl.rewards` itself does not.
"""

from .autosearch import AutoSearchRewardManager
from .hiprag import HipragRewardManager
from .multistage import MultistageRewardManager
from .searchp1 import SearchP1RewardManager
from .searchr1 import SearchR1RewardManager

MANAGERS = {
    "searchr1": SearchR1RewardManager,
    "hiprag": HipragRewardManager,
    "multistage": MultistageRewardManager,
    "searchp1": SearchP1RewardManager,
    "autosearch": AutoSearchRewardManager,
}
"""Registry names -> classes."""


def _register() -> None:
    # verl's registry is loaded by now (our base imports verl's RewardManagerBase); covers the import order in
    # which our managers load before the plugin's post-import hook could import them.
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    for name, cls in MANAGERS.items():
        REWARD_MANAGER.setdefault(name, cls)


_register()

__all__ = [
    "MANAGERS",
    "AutoSearchRewardManager",
    "HipragRewardManager",
    "MultistageRewardManager",
    "SearchP1RewardManager",
    "SearchR1RewardManager",
]
