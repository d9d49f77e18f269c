"""FlashRAG-layout QA rows -> verl RL parquet rows (the columns ``RLHFDataset`` and the reward loop read).

Row: ``data_source``, ``prompt`` (chat messages: the format's paper prompt with the question), ``ability``,
``reward_model`` ``{style: "rule", ground_truth: {target: [gold answers]}}``, ``extra_info``
``{index, split, question, id}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def qa_to_verl_rows(
    qa_rows: Iterable[dict], *, split: str, data_source: str, format_name: str, prompt_name: str | None = None
) -> list[dict]:
    """Convert FlashRAG rows (``id``, ``question``, ``golden_answers``) to verl rows using ``format_name``'s
    prompt (see :func:`agentrag_verl.formats.get_format`; ``prompt_name`` picks another of its named prompts)."""
    from agentrag_verl.formats import get_format

    prompt = get_format(format_name).policy_prompt(prompt_name)
    rows = []
    for index, qa in enumerate(qa_rows):
        rows.append(
            {
                "data_source": data_source,
                "prompt": prompt.messages(qa["question"]),
                "ability": "fact-reasoning",
                "reward_model": {"style": "rule", "ground_truth": {"target": list(qa["golden_answers"])}},
                "extra_info": {"index": index, "split": split, "question": qa["question"], "id": str(qa["id"])},
            }
        )
    return rows


def write_parquet(rows: list[dict], path: Path) -> Path:
    """Write ``rows`` to ``path`` as parquet (parent directories created)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path
