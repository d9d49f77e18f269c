"""verl adapters shared by every method's reward manager (imports verl and torch).

- :mod:`~agentrag_verl.rewards.managers.base`: option parsing and the judge wiring of a manager.
- :mod:`~agentrag_verl.rewards.managers.composed`: :class:`ComposedRewardManager`, a verl ``RewardManagerBase``
  over a :class:`~agentrag_verl.rewards.parts.Reward`; every method's ``manager.py`` is one.
- :mod:`~agentrag_verl.rewards.managers.step_rewards`: the agent-loop manager that places per-step rewards on
  tokens (AutoSearch, PPO with GAE).

The managers themselves live in the methods' folders: select one by name (``reward.reward_manager.name=hiprag``;
the names are registered in verl's registry by :mod:`agentrag_verl.rewards.registration`), or by path, which needs
no plugin::

    reward.reward_manager.source=importlib
    reward.reward_manager.module.path=pkg://agentrag_verl.methods.hiprag.manager
    reward.reward_manager.name=HipragRewardManager

Options go to ``reward.reward_kwargs`` (e.g. ``+reward.reward_kwargs.lambda_p=0.6``).
"""
