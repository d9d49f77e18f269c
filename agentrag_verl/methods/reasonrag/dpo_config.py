"""TRL's ``DPOConfig`` with ReasonRAG's defaults (imports TRL: load it only where DPO runs).

TRL's default β is 0.1; ReasonRAG's step-level DPO (Eq. 3) uses β = 0.3 (the authors' training config,
``pref_beta: 0.3``). :class:`ProGuideDPOConfig` makes 0.3 the default however training is launched
(``agentrag-verl reasonrag train dpo`` with or without ``--config``, ``python -m
agentrag_verl.methods.reasonrag.train``, or building the config in Python); a config file or ``--beta`` still overrides
it. See ``docs/methods/reasonrag.md#decisions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

__all__ = ["ProGuideDPOConfig", "PAPER_BETA"]

PAPER_BETA = 0.3
"""β of ReasonRAG's step-level DPO (Eq. 3)."""


@dataclass
class ProGuideDPOConfig(DPOConfig):
    """:class:`trl.DPOConfig` whose ``beta`` defaults to ReasonRAG's 0.3 instead of TRL's 0.1.

    >>> ProGuideDPOConfig(output_dir="out", report_to="none", bf16=False).beta
    0.3
    """

    beta: float = field(
        default=PAPER_BETA,
        metadata={"help": "β of the DPO loss (Eq. 3); ReasonRAG uses 0.3 (TRL's own default is 0.1)."},
    )
