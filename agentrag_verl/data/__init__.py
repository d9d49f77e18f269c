"""Dataset preparation: FlashRAG-layout QA files -> verl RL parquet (``agentrag-verl data prepare``).

- :mod:`agentrag_verl.data.flashrag`: read and validate FlashRAG JSON Lines rows (``id``, ``question``,
  ``golden_answers``) from a local copy of ``RUC-NLPIR/FlashRAG_datasets`` (``<dir>/<dataset>/<split>.jsonl``) or,
  when online, from the Hugging Face hub.
- :mod:`agentrag_verl.data.prepare`: turn rows into the columns verl's ``RLHFDataset``, our agent loops and our
  reward managers read, with the presets the papers train and test on.
- :mod:`agentrag_verl.data.cli`: the ``agentrag-verl data`` subcommand.

Importing this package imports no torch, verl or pandas.
"""

from __future__ import annotations

__all__ = ["flashrag", "prepare"]
