"""The composition core of every reward: the trajectory record, reward parts, and the verl reward-manager base.

- :mod:`agentrag_verl.rewards.record`: the one trajectory record every reward, the eval and the loops read.
- :mod:`agentrag_verl.rewards.parts`: :class:`~agentrag_verl.rewards.parts.Reward` and the shared parts.
- :mod:`agentrag_verl.rewards.managers`: the verl adapters (the composed manager, the per-step agent-loop manager).
- :mod:`agentrag_verl.rewards.registration`: registers the methods' managers in verl's reward-manager registry.

Each paper's equations, parts and manager live in its folder, ``agentrag_verl/methods/<paper>/`` (``reward.py``,
``parts.py``, ``manager.py``); this package imports none of them. Importing it imports neither verl nor torch.
"""
