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

**The choice to search** (``++data.choice_weight=N``, default 1). A demonstration's first decision, to answer
directly or to search, is a token or two among its 60-400 model-written ones, so a loss averaged over tokens fits how
often the demonstrations skip the search, not on which questions (``docs/warmstart.md`` sections 7.10-7.11: after two
epochs, a 135M warm start gave the direct opening the same probability on every question). With ``choice_weight``
N > 1 the tokens of that opening (:attr:`~agentrag_verl.warmstart.teacher.TeacherTemplates.openings` of the record's
format: the text after the two paths' shared start, up to the first slot) count N times in the loss: verl's
``sft_loss`` sums ``log p x loss_mask`` and divides by the sum of ``loss_mask``, so an integer weight in the mask is
a weight in the loss. A record that opens neither way keeps its 0/1 mask; a dataset where no record does is an
error, not a silent unweighted run.

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

__all__ = ["DemonstrationDataset", "load_demonstrations", "sft_examples", "choice_span"]


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


def choice_span(response_ids: Sequence[int], tokenizer: Any, openings: tuple[str, str, str]) -> range | None:
    """The response tokens that write the choice to search: those whose text overlaps one of the two openings right
    after the shared start (``openings``: :attr:`~agentrag_verl.warmstart.teacher.TeacherTemplates.openings`), or None
    when the response starts with neither (a ReasonRAG stage, a trajectory of another teacher)."""
    shared, *paths = openings
    for opening in paths:
        target, start = shared + opening, None
        for i in range(1, len(response_ids) + 1):
            text = tokenizer.decode(list(response_ids[:i]))
            if not (target.startswith(text) or text.startswith(target)):
                break
            if start is None and len(text) > len(shared):
                start = i - 1
            if len(text) >= len(target):
                return range(start, i)
    return None


def _format_openings(format_name: str) -> tuple[str, str, str] | None:
    from agentrag_verl.warmstart.teacher import TeacherTemplates, teacher_templates

    try:
        templates = teacher_templates(format_name)
    except ValueError:  # a method without templates (its demonstrations come from a teacher model)
        return None
    return templates.openings if isinstance(templates, TeacherTemplates) else None


class DemonstrationDataset(Dataset):
    """verl ``data.custom_cls`` dataset over demonstration JSONL files (module docstring).

    Args:
        parquet_files: ``data.train_files`` / ``data.val_files`` (verl's argument name; here ``demos.jsonl`` paths).
        tokenizer: The model's tokenizer (its pad id pads ``right`` mode).
        config: verl's ``data`` config (``max_length``, ``pad_mode``, ``truncation``, and ours, ``choice_weight``:
            module docstring).
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
        self.tokenizer = tokenizer
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self.examples = [(record, example) for record in self.records for example in sft_examples(record)]
        weight = config.get("choice_weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise ValueError(
                f"data.choice_weight must be a whole number >= 1 (how many times the choice to search counts in the "
                f"loss), got {weight!r}."
            )
        self.choice_weight = weight
        if weight > 1:
            self.examples = [(record, self._weigh_choice(record, example)) for record, example in self.examples]
            self.weighted = sum(1 for _, (_, mask) in self.examples if max(mask, default=0) > 1)
            if not self.weighted:
                raise ValueError(
                    f"data.choice_weight={weight}, but no demonstration in {files} opens with its format's choice "
                    "to search (the teacher templates' direct or searching opening); drop the setting, or use "
                    "demonstrations of a format with teacher templates."
                )

    def _weigh_choice(self, record: Mapping[str, Any], example: tuple[list[int], list[int]]) -> tuple[list, list]:
        ids, mask = example
        openings = _format_openings(str(record.get("format", "")))
        if openings is None or record.get("stages"):
            return example
        prompt = len(record["prompt_ids"])
        span = choice_span(ids[prompt:], self.tokenizer, openings)
        if span is None:
            return example
        mask = list(mask)
        for i in span:
            mask[prompt + i] *= self.choice_weight
        return ids, mask

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
