"""DPO's reward margin on each held-out pair: did step-level DPO learn preferences that carry to unseen questions?

TRL logs the held-out margin only as a mean over the evaluation set. This module gives it per pair, so the rise has
a standard error over pairs, as the RL checks take theirs over questions. For a pair ``(x, y_w, y_l)`` and the
policy π after DPO against the reference π_ref (the policy DPO started from), DPO's implicit rewards are
``r = β · (log π(y | x) - log π_ref(y | x))`` summed over the step's tokens, and the margin is ``r_w - r_l``, TRL's
``rewards/margins``. Before any update π = π_ref, so every pair's margin starts at exactly 0 (TRL's evaluation at
step 0 shows it); the margin after DPO is therefore the rise itself, paired by pair.

The pairs are those training held out: the same split (``val_size`` and ``split_seed`` of the questions), and the
same tokenization as TRL's ``DPOTrainer`` (the prompt's chat template with the generation prompt, then the prompt
and response together; the response is what follows the prompt's tokens, cut at ``max_length`` from the start).

``recipes/reasonrag/dpo/run_dpo.sh`` runs it after DPO (``SCORE_HELDOUT=0`` skips it). By hand, with the training
command's own arguments and this module instead of ``train`` (writes ``<output_dir>/heldout_margins.json``)::

    python -m agentrag_verl.methods.reasonrag.heldout --config recipes/reasonrag/dpo/dpo.yaml \\
        --model_name_or_path <the policy DPO started from> --output_dir <DPO's output> --pairs out/pairs.jsonl
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrag_verl.stats import mean_se

__all__ = ["HELDOUT_FILE", "pair_margins", "held_out_margins", "main"]

HELDOUT_FILE = "heldout_margins.json"
"""Written into DPO's output folder by :func:`main`."""


def _completion_logps(model: Any, prompt_ids: list[int], full_ids: list[int]) -> float:
    """Sum of ``model``'s log-probabilities of ``full_ids[len(prompt_ids):]`` given what precedes each token."""
    import torch

    with torch.no_grad():
        ids = torch.tensor([full_ids], device=model.device)
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        logps = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
    return float(logps[len(prompt_ids) - 1 :].sum())


def pair_margins(
    policy: Any, reference: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], beta: float, max_length: int | None
) -> list[dict[str, float]]:
    """Per conversational preference row (``prompt``, ``chosen``, ``rejected`` message lists): DPO's implicit rewards
    of the chosen and rejected responses and their margin, as TRL's ``DPOTrainer`` computes them for one pair.

    Raises:
        ValueError: A row whose prompt fills ``max_length`` (no response token left to score).
    """
    out = []
    for i, row in enumerate(rows):
        prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]  # fmt: skip
        if max_length is not None and len(prompt) >= max_length:
            raise ValueError(f"held-out pair {i}: its prompt has {len(prompt)} tokens, max_length is {max_length}")
        rewards = {}
        for side in ("chosen", "rejected"):
            full = tokenizer.apply_chat_template(row["prompt"] + row[side], tokenize=True, return_dict=True)
            full = full["input_ids"][:max_length]
            logratio = _completion_logps(policy, prompt, full) - _completion_logps(reference, prompt, full)
            rewards[side] = beta * logratio
        out.append({**rewards, "margin": rewards["chosen"] - rewards["rejected"]})
    return out


def held_out_margins(
    policy_dir: str | Path, reference_dir: str | Path, rows: Sequence[dict[str, Any]], beta: float,
    max_length: int | None = None, dtype: str = "float32",
) -> dict[str, Any]:  # fmt: skip
    """:func:`pair_margins` of the policy in ``policy_dir`` against ``reference_dir`` on ``rows``, with their mean,
    standard error over pairs, and the share of pairs ranked right (margin above 0, TRL's ``rewards/accuracies``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    models = [AutoModelForCausalLM.from_pretrained(str(d), dtype=getattr(torch, dtype)).to(device).eval()
              for d in (policy_dir, reference_dir)]  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(str(policy_dir))
    per_pair = pair_margins(*models, tokenizer, rows, beta, max_length)
    margins = [p["margin"] for p in per_pair]
    mean, se = mean_se(margins)
    return {
        "policy": str(policy_dir),
        "reference": str(reference_dir),
        "beta": beta,
        "n": len(margins),
        "mean": mean,
        "se": se,
        "accuracy": sum(m > 0 for m in margins) / len(margins),
        "pairs": per_pair,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the training command's arguments (TRL's parser, ``dpo.yaml``), rebuild its held-out split and write
    :data:`HELDOUT_FILE` into ``output_dir``; prints the mean margin."""
    from agentrag_verl.methods.reasonrag.train import ProGuideError, _parser, dpo_rows, training_split

    data_args, training_args, model_args = _parser("dpo").parse_args_and_config(args=argv)
    _, val_pairs = training_split(data_args)
    if not val_pairs:
        raise ProGuideError(f"No held-out pairs (val_size={data_args.val_size}); set val_size above 0 to hold some out")
    output_dir = Path(training_args.output_dir)
    if not (output_dir / "config.json").exists():
        raise ProGuideError(f"{output_dir} holds no trained model; run DPO with the same arguments first")
    dtype = "float32" if model_args.dtype in (None, "auto") else model_args.dtype
    result = held_out_margins(output_dir, model_args.model_name_or_path, dpo_rows(val_pairs), training_args.beta,
                              training_args.max_length, dtype)  # fmt: skip
    (output_dir / HELDOUT_FILE).write_text(json.dumps(result, indent=1))
    print(f"held-out margin over {result['n']} pairs: {result['mean']:+.4f} ± {result['se']:.4f} (SE); "
          f"ranked right {result['accuracy']:.0%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
