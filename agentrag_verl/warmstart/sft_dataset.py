"""Demonstrations as a verl SFT dataset: pre-tokenized ids and a loss mask, served through ``data.custom_cls``.

Why not verl's ``MultiTurnSFTDataset``: it re-tokenizes chat messages turn by turn with the chat template, so the
passages the environment injects *inside* the assistant turn (Search-R1's ``<information>``, HiPRAG's
``<context>``) could only be trained on or dropped with their turn, and the ids would be the template's, not the
rollout's. The demonstration writer (:mod:`agentrag_verl.warmstart.demos`) stores the agent loop's own
``prompt_ids``, ``response_ids`` and ``response_mask``; this dataset feeds exactly those to verl's SFT trainer
(``python -m verl.trainer.sft_trainer``), so SFT and RL train the same tokens with the same mask:

- ``input_ids = prompt_ids + response_ids``;
- ``loss_mask = [0] * len(prompt_ids) + response_mask``: the loss covers model-written tokens only; observations and
  injected tags (mask 0 in the rollout) are context, never targets. verl's ``sft_loss`` shifts the mask by one so
  that ``loss_mask[i]`` marks token ``i`` as a prediction target;
- a staged loop (ReasonRAG: one chat per stage) generates each stage from its own prompt, not from ``prompt_ids`` and
  the transcript; its record lists the stages (``stages``: each one's prompt ids and output span), and each stage is
  an example of its own, ``stage prompt_ids + its output``, as the loop asks for it at inference.

Select it with::

    data.custom_cls.path=pkg://agentrag_verl.warmstart.sft_dataset data.custom_cls.name=DemonstrationDataset
    data.train_files=<out>/hiprag/demos.jsonl

Records with ``kept: false`` (rejected by the writer) are skipped. ``data.pad_mode`` ``no_padding`` (verl's
default) and ``right`` (padded to ``data.max_length``) are supported; ``data.truncation`` ``error`` (default)
refuses an over-long demonstration, ``right`` cuts it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

__all__ = ["DemonstrationDataset", "load_demonstrations", "sft_examples"]


def load_demonstrations(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The kept demonstrations of one or more ``demos.jsonl`` files, in file order.

    Raises:
        FileNotFoundError: A file does not exist.
        ValueError: A line is not JSON or lacks the token fields (the message names file and line).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(
                f"Demonstration file {p} not found; write it with `agentrag-verl demos generate` and pass its "
                "demos.jsonl as data.train_files."
            )
        with open(p, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p}, line {lineno}: not valid JSON ({e.msg}).") from None
                if not rec.get("kept", False):
                    continue
                missing = [k for k in ("prompt_ids", "response_ids", "response_mask") if k not in rec]
                if missing or len(rec["response_ids"]) != len(rec["response_mask"]):
                    raise ValueError(
                        f"{p}, line {lineno}: a demonstration needs prompt_ids, response_ids and an equally long "
                        f"response_mask (missing {missing}); regenerate it with `agentrag-verl demos generate`."
                    )
                out.append(rec)
    return out


def sft_examples(record: Mapping[str, Any]) -> list[tuple[list[int], list[int]]]:
    """The ``(input_ids, loss_mask)`` examples of one demonstration (module docstring): one, or one per stage of a
    staged loop (``stages``), each stage's output after the prompt it was generated from.

    >>> sft_examples({"prompt_ids": [1, 2], "response_ids": [3, 4, 5], "response_mask": [1, 0, 1]})
    [([1, 2, 3, 4, 5], [0, 0, 1, 0, 1])]
    >>> sft_examples({"prompt_ids": [1], "response_ids": [3, 0, 5, 6], "response_mask": [1, 0, 1, 1],
    ...               "stages": [{"prompt_ids": [1], "start": 0, "end": 1}, {"prompt_ids": [7, 8], "start": 2,
    ...                                                                       "end": 4}]})
    [([1, 3], [0, 1]), ([7, 8, 5, 6], [0, 0, 1, 1])]
    """
    response, mask = list(record["response_ids"]), [int(m) for m in record["response_mask"]]
    if not record.get("stages"):
        prompt = list(record["prompt_ids"])
        return [(prompt + response, [0] * len(prompt) + mask)]
    out = []
    for stage in record["stages"]:
        prompt, start, end = list(stage["prompt_ids"]), int(stage["start"]), int(stage["end"])
        out.append((prompt + response[start:end], [0] * len(prompt) + mask[start:end]))
    return out


class DemonstrationDataset(Dataset):
    """verl ``data.custom_cls`` dataset over demonstration JSONL files (module docstring).

    Args:
        parquet_files: ``data.train_files`` / ``data.val_files`` (verl's argument name; here ``demos.jsonl`` paths).
        tokenizer: The model's tokenizer (its pad id pads ``right`` mode).
        config: verl's ``data`` config (``max_length``, ``pad_mode``, ``truncation``).
        processor: Unused (text only).
        max_samples: Keep the first N demonstrations (-1: all).
    """

    def __init__(
        self,
        parquet_files: Any,
        tokenizer: Any,
        config: Mapping[str, Any] | None = None,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        config = config or {}
        files = [str(f) for f in parquet_files] if not isinstance(parquet_files, (str, os.PathLike)) else parquet_files
        self.records = load_demonstrations(files)
        if max_samples is not None and max_samples > 0:
            self.records = self.records[:max_samples]
        if not self.records:
            raise ValueError(
                f"No kept demonstration in {files}: every trajectory was rejected or the files are empty. See the "
                "writer's stats.json for the rejection reasons."
            )
        self.max_length = int(config.get("max_length", 1024))
        self.pad_mode = str(config.get("pad_mode", "no_padding"))
        self.truncation = str(config.get("truncation", "error"))
        if self.pad_mode not in ("no_padding", "right"):
            raise ValueError(f"data.pad_mode {self.pad_mode!r} is not supported; choose 'no_padding' or 'right'.")
        if self.truncation not in ("error", "right"):
            raise ValueError(f"data.truncation {self.truncation!r} is not supported; choose 'error' or 'right'.")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self.examples = [(record, example) for record in self.records for example in sft_examples(record)]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        record, (ids, mask) = self.examples[item]
        if len(ids) > self.max_length:
            if self.truncation == "error":
                raise ValueError(
                    f"Demonstration {record.get('dataset')}/{record.get('id')} has {len(ids)} tokens, more than "
                    f"data.max_length={self.max_length}; raise data.max_length or set data.truncation=right."
                )
            ids, mask = ids[: self.max_length], mask[: self.max_length]
        input_ids = torch.tensor(ids, dtype=torch.long)
        loss_mask = torch.tensor(mask, dtype=torch.long)
        position_ids = torch.arange(len(ids), dtype=torch.long)
        if self.pad_mode == "no_padding":
            return {"input_ids": input_ids, "position_ids": position_ids, "loss_mask": loss_mask}
        pad = self.max_length - len(ids)
        return {
            "input_ids": torch.cat([input_ids, torch.full((pad,), self.pad_token_id, dtype=torch.long)]),
            "attention_mask": torch.cat([torch.ones(len(ids), dtype=torch.long), torch.zeros(pad, dtype=torch.long)]),
            "position_ids": torch.cat([position_ids, torch.zeros(pad, dtype=torch.long)]),
            "loss_mask": torch.cat([loss_mask, torch.zeros(pad, dtype=torch.long)]),
        }
