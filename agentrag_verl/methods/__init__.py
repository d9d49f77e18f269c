"""The methods: one folder per paper, each holding everything that is that paper's.

=================  =============================================================================================
folder             paper
=================  =============================================================================================
``searchr1/``      Search-R1 (Jin et al.), the baseline: tags, EM / outcome + format reward
``hiprag/``        HiPRAG: ``<step>`` grammar, over-/under-search judges, hierarchical reward (Eq. 1)
``multistage/``    "Learning When to Search": format, search (Eq. 7-9) and staged answer rewards, judge (B.4)
``searchp1/``      Search-P1: grammar, reference planners (offline), dual-track path reward (Eq. 4, 6-8)
``autosearch/``    AutoSearch: per-step format, outcome, efficiency and quality rewards (Eq. 1, 2, 6, 7, 9)
``reasonrag/``     ReasonRAG: staged grammar and agent loop, MCTS + SPRE, preference pairs, step-level DPO
=================  =============================================================================================

A method folder holds (each file only where the paper has it):

- ``__init__.py``: declares the method (``METHOD``, an :class:`agentrag_verl.registry.Method`): its grammar, reward
  manager, agent loop, evaluation hooks, teacher templates, stand-in judge rules, subcommands and data presets;
- ``grammar.py``: the trajectory grammar and the paper's prompts (:class:`agentrag_verl.formats.Format`);
- ``reward.py``: the paper's equations as pure functions of plain values (no verl, torch, ray or HTTP);
- ``judge.py``: the paper's judge prompts, verdict parsers and what a failed verdict means;
- ``parts.py``: the reward parts that read a trajectory record and call ``reward.py``
  (:mod:`agentrag_verl.rewards.parts`);
- ``manager.py``: the verl reward manager, thin: unpack, call, pack;
- ``agent_loop.py``: the paper's own agent loop or its additions to the shared one (HiPRAG's re-answers, AutoSearch's
  intermediate answers, ReasonRAG's staged workflow);
- ``evaluation.py``, ``standin.py``, ``teacher.py``, ``data.py``: its evaluation metrics, its rules in the stand-in
  judge server, the scripted teacher's templates and its dataset presets;
- the offline pipeline (``searchp1/planners/``; ReasonRAG's ``mcts.py``, ``spre.py``, ``pairs.py``, ``train.py``).

The shared machinery (everything outside ``methods/``) imports no method and names none: it asks the registry
(:func:`agentrag_verl.registry.methods`, :func:`~agentrag_verl.registry.get_method`) and uses what each ``Method``
declares. Adding a method is adding a folder (``docs/extending.md``). Importing this package imports no method.
"""

__all__ = ["searchr1", "hiprag", "multistage", "reasonrag", "searchp1", "autosearch"]
"""The built-in methods, in the order listings show them (:func:`agentrag_verl.registry.method_rank`)."""
