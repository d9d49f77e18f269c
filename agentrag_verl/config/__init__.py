"""Hydra configs the recipes include from the installed package (``hydra.searchpath: [..., pkg://agentrag_verl.config]``).

- ``trainer_mode/``: the settings of each of verl's V1 trainer modes for our search agents (``sync``,
  ``colocate_async``, ``separate_async``), a config group: a recipe's default is ``sync``, and the Hydra override
  ``trainer_mode=colocate_async`` (the run scripts' ``TRAINER_MODE`` knob) picks another. Reasons:
  ``docs/async.md``.
"""
