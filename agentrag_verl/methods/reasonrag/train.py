"""Step-level DPO on RAG-ProGuide (Eq. 3) and the SFT-on-chosen baseline, with TRL (ReasonRAG §2.3; verl has no DPO).

Eq. 3 is DPO on single steps: the prompt is the question with the previous steps ``(x, y_<t)`` (the stage's chat
messages, exactly what the agent loop sends at inference), the responses are the preferred and dispreferred next
steps ``y_t^w`` / ``y_t^l``. ``pairs.jsonl`` from ``agentrag-verl reasonrag generate`` is already in TRL's
conversational preference format, so :class:`trl.DPOTrainer` consumes it as is (sigmoid loss). β defaults to the
authors' 0.3 however the training is launched, with or without a config file
(:class:`~agentrag_verl.methods.reasonrag.dpo_config.ProGuideDPOConfig`; TRL's own default is 0.1).

The SFT baseline (Table 3, "ReasonRAG (SFT)": "we use the preferred responses from the RAG-ProGuide preference pairs
as ground truth and apply supervised fine-tuning") trains :class:`trl.SFTTrainer` on prompt-completion rows
``(prompt, chosen)``, one row per distinct (prompt, chosen step), with the loss on the completion only.

Usage (YAML config + overrides, TRL's own parser; ``accelerate launch`` for several GPUs, FSDP or DeepSpeed as TRL
supports)::

    python -m agentrag_verl.methods.reasonrag.train dpo --config recipes/reasonrag/dpo.yaml --pairs out/pairs.jsonl
    accelerate launch --config_file recipes/reasonrag/accelerate_fsdp.yaml -m agentrag_verl.methods.reasonrag.train dpo
    \\
        --config recipes/reasonrag/dpo.yaml --pairs out/pairs.jsonl

Decisions: the validation split (``val_size``, the authors' 0.1) is drawn by question, so no question's steps
are in both splits; ``min_gap`` can drop low-gap pairs again at training time.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ProGuideArguments", "load_pairs", "dpo_rows", "sft_rows", "split_by_question", "training_split", "main"]


@dataclass
class ProGuideArguments:
    """Where the RAG-ProGuide pairs come from and how they are split."""

    pairs: list[str] = field(
        default_factory=list,
        metadata={"help": "pairs.jsonl file(s) written by `agentrag-verl reasonrag generate`."},
    )
    val_size: float = field(
        default=0.1,
        metadata={"help": "Fraction of questions held out for evaluation (authors: val_size 0.1); 0 for none."},
    )
    split_seed: int = field(default=42, metadata={"help": "Seed of the train/validation split."})
    min_gap: float = field(default=0.0, metadata={"help": "Drop pairs whose reward gap is below this."})
    max_pairs: int | None = field(default=None, metadata={"help": "Use at most this many pairs (smoke tests)."})


class ProGuideError(ValueError):
    """Bad pair files (message says what and how to fix)."""


def load_pairs(paths: Sequence[str | Path], min_gap: float = 0.0) -> list[dict[str, Any]]:
    """Read pair records, checking the fields DPO needs.

    Raises:
        ProGuideError: No files, a missing file, a malformed line, or no pair left.
    """
    if not paths:
        raise ProGuideError("No pair files: pass --pairs out/pairs.jsonl (from `agentrag-verl reasonrag generate`)")
    out = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ProGuideError(f"Pair file {path} does not exist; run `agentrag-verl reasonrag generate` first")
        with path.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise ProGuideError(f"{path}:{line_no} is not JSON ({exc})") from None
                missing = [k for k in ("prompt", "chosen", "rejected") if not record.get(k)]
                if missing:
                    raise ProGuideError(f"{path}:{line_no} lacks {missing}; expected a RAG-ProGuide pair record")
                if record.get("gap", 1.0) >= min_gap:
                    out.append(record)
    if not out:
        raise ProGuideError(f"No preference pairs in {[str(p) for p in paths]} (after min_gap={min_gap})")
    return out


def dpo_rows(pairs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL conversational preference rows ``{"prompt", "chosen", "rejected"}``.

    >>> p = {"prompt": [{"role": "user", "content": "Question: q"}], "chosen": [{"role": "assistant",
    ...      "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}], "gap": 0.5}
    >>> dpo_rows([p])[0]["rejected"][0]["content"]
    'b'
    """
    return [{"prompt": p["prompt"], "chosen": p["chosen"], "rejected": p["rejected"]} for p in pairs]


def sft_rows(pairs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL conversational prompt-completion rows ``{"prompt", "completion"}`` from the chosen steps, one per
    distinct (prompt, chosen).

    >>> p = {"prompt": [{"role": "user", "content": "Question: q"}], "chosen": [{"role": "assistant",
    ...      "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]}
    >>> len(sft_rows([p, {**p, "rejected": [{"role": "assistant", "content": "c"}]}]))
    1
    """
    seen: set[str] = set()
    out = []
    for p in pairs:
        key = json.dumps([p["prompt"], p["chosen"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append({"prompt": p["prompt"], "completion": p["chosen"]})
    return out


def split_by_question(
    pairs: Sequence[dict[str, Any]], val_size: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hold out ``val_size`` of the questions (at least one when ``val_size > 0`` and there are two or more).

    >>> pairs = [{"question_id": str(i // 2)} for i in range(20)]  # 10 questions, 2 pairs each
    >>> train, val = split_by_question(pairs, 0.1, seed=0)
    >>> len(train), len(val), {p["question_id"] for p in val} & {p["question_id"] for p in train}
    (18, 2, set())
    """
    if not 0.0 <= val_size < 1.0:
        raise ProGuideError(f"val_size must be in [0, 1), got {val_size}")
    questions = sorted({str(p.get("question_id", i)) for i, p in enumerate(pairs)})
    n_val = round(len(questions) * val_size)
    if val_size > 0 and n_val == 0 and len(questions) > 1:
        n_val = 1
    held = set(random.Random(seed).sample(questions, n_val))
    train = [p for i, p in enumerate(pairs) if str(p.get("question_id", i)) not in held]
    val = [p for i, p in enumerate(pairs) if str(p.get("question_id", i)) in held]
    return train, val


def training_split(data_args: ProGuideArguments) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pairs of ``data_args`` (``min_gap``, ``max_pairs``) split into training and held-out pairs by question:
    what training uses and what :mod:`agentrag_verl.methods.reasonrag.heldout` scores afterwards."""
    pairs = load_pairs(data_args.pairs, data_args.min_gap)
    if data_args.max_pairs is not None:
        pairs = pairs[: data_args.max_pairs]
    return split_by_question(pairs, data_args.val_size, data_args.split_seed)


def _parser(mode: str) -> Any:
    from trl import ModelConfig, SFTConfig, TrlParser

    from agentrag_verl.methods.reasonrag.dpo_config import ProGuideDPOConfig

    config = {"dpo": ProGuideDPOConfig, "sft": SFTConfig}[mode]
    return TrlParser((ProGuideArguments, config, ModelConfig), prog=f"agentrag-verl reasonrag train {mode}")


def train(mode: str, data_args: ProGuideArguments, training_args: Any, model_args: Any) -> Any:
    """Build the trainer for ``mode`` (``dpo`` or ``sft``), train, save; returns the trainer."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOTrainer, SFTTrainer, get_peft_config

    if not model_args.model_name_or_path:
        raise ProGuideError("Set model_name_or_path (the policy to fine-tune) in the config or on the command line")
    train_pairs, val_pairs = training_split(data_args)
    rows = dpo_rows if mode == "dpo" else sft_rows
    train_set = Dataset.from_list(rows(train_pairs))
    eval_set = Dataset.from_list(rows(val_pairs)) if val_pairs and training_args.eval_strategy != "no" else None
    if eval_set is None and training_args.eval_strategy != "no":
        training_args.eval_strategy = "no"

    training_args.model_init_kwargs = {
        **(training_args.model_init_kwargs or {}),
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    trainer_cls = DPOTrainer if mode == "dpo" else SFTTrainer
    trainer = trainer_cls(
        model=model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: the logged loss and DPO rewards/margins of every logging step
    return trainer


def main(argv: list[str] | None = None) -> int:
    """``python -m agentrag_verl.methods.reasonrag.train {dpo|sft} --config FILE [--key value ...]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("dpo", "sft"):
        print(
            "usage: python -m agentrag_verl.methods.reasonrag.train {dpo|sft} --config FILE [--key value ...]",
            file=sys.stderr,
        )
        return 2
    mode = argv.pop(0)
    data_args, training_args, model_args = _parser(mode).parse_args_and_config(args=argv)
    train(mode, data_args, training_args, model_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
