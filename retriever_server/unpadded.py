"""Encoding without padding: a BERT-family encoder runs its token-wise layers on the real tokens only.

A padded batch of short queries is mostly padding in its wider rows: 64 agent queries of 7-14 tokens fill a 64 x 14
grid of 896 positions with 625 real tokens, and every Linear layer (about 80% of an encoder's CPU time) computes all
896. Only attention mixes tokens; embeddings, projections, feed-forward layers, residuals and LayerNorm work on each
token alone. So the batch is embedded as usual (the model computes its own position ids, RoBERTa's included), the
padding rows are dropped, and every layer runs on the ``[1, T, hidden]`` stack of real tokens, its rows taken
shortest first. Attention alone needs the rows apart: the rows of one length lie together in the stack, so each such
run is a ``[rows, heads, length, head_dim]`` view of it, attended with plain SDPA and no mask (a row has no padding
to mask). The hidden states of the real tokens are the padded model's up to float rounding in attention (the masked
padding adds exact zeros there, in another summation order): within 1e-6 on MiniLM. Pooling then works on them as
before.

The route into the layers is transformers' attention interface: :data:`ATTENTION` is registered as an attention
implementation that does the above when the call carries a :class:`Packing` and plain SDPA (with the model's own
mask) otherwise, so the model stays correct when it is called directly. Whether a model takes the route is not
guessed from its class: :func:`enable` switches the model over and compares the two paths on probe texts, and
switches back when they differ or the model lacks the parts (``.embeddings``, ``.encoder``). Measured on a 2-core CPU
(MiniLM, 64 queries of 7-14 tokens): about 90 ms per batch against 114 ms padded. Attention by runs of one length
takes 0.8 ms per layer there, against 1.55 ms for scattering the stack into the padded grid and attending with the
mask.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

ATTENTION = "agentrag_unpadded_sdpa"
"""The attention implementation's name in transformers' registries."""

PROBE_TEXTS = ("who", "the river that flows through the largest city of the northern province", "capital city")
"""Texts of different lengths, so the probe batch holds padding."""


def same_hidden_states(got, expected) -> bool:
    """Whether a switched model's hidden states on the probe batch are the original's up to float rounding (the
    check of :func:`enable` here and of :func:`retriever_server.onednn.enable`)."""
    import torch

    return torch.allclose(got, expected, rtol=1e-4, atol=1e-5)


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded ``[batch, length]`` batch sit. Rows are taken shortest first: ``index`` holds
    the grid positions of their real tokens in that order, and ``runs`` the ``(rows, length)`` of each group of rows
    of one length, in stack order (rows without tokens have none)."""

    index: Any
    batch: int
    length: int
    runs: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, attention_mask) -> Packing:
        import torch

        batch, length = attention_mask.shape
        lengths = attention_mask.sum(dim=1)
        order = torch.argsort(lengths, stable=True)
        positions = order[:, None] * length + torch.arange(length, device=attention_mask.device)[None, :]
        index = positions[attention_mask[order].bool()]
        sizes, counts = torch.unique_consecutive(lengths[order], return_counts=True)
        runs = tuple((rows, size) for size, rows in zip(sizes.tolist(), counts.tolist(), strict=True) if size > 0)
        return cls(index, batch, length, runs)

    def pad(self, tokens):
        """``[T, ...]`` real rows → ``[batch, length, ...]`` with zeros at the padding."""
        out = tokens.new_zeros((self.batch * self.length, *tokens.shape[1:]))
        out[self.index] = tokens
        return out.view(self.batch, self.length, *tokens.shape[1:])


def unpadded_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, packing=None, **kwargs):
    """The registered attention: ``query``/``key``/``value`` are ``[1, heads, T, head_dim]`` when ``packing`` is
    given (then ``attention_mask`` is unused), else the model's padded tensors for plain SDPA."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packing is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    outs, start = [], 0
    for rows, length in packing.runs:
        stop = start + rows * length
        q, k, v = (x[0, :, start:stop].unflatten(1, (rows, length)).transpose(0, 1) for x in (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scaling)  # [rows, heads, length, d]
        outs.append(out.transpose(1, 2).reshape(rows * length, out.shape[1], out.shape[3]))
        start = stop
    return torch.cat(outs).unsqueeze(0), None  # [1, T, heads, d], as the interface returns


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(ATTENTION, unpadded_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])  # for direct calls


MIN_PADDING = 0.1
"""Run unpadded only when at least this share of the padded grid is padding: gathering the real tokens and padding
the output back cost time of their own. The first version, which also scattered the tokens into the padded grid
around each attention layer, cost about 0.8 ms per batch (MiniLM, 6 layers, 2-core CPU), 13% of a lone query's
forward pass."""


def worth_it(attention_mask) -> bool:
    """Whether a batch holds enough padding (:data:`MIN_PADDING`) for the unpadded path to pay."""
    return int(attention_mask.sum()) <= (1.0 - MIN_PADDING) * attention_mask.numel()


def last_hidden_state(model, inputs: dict[str, Any], rows_multiple: int = 1):
    """The model's last hidden states ``[batch, length, hidden]`` for a padded batch of ``inputs`` (the tokenizer's
    tensors), computed on the real tokens only; zeros at the padding. The model must have been :func:`enable`-d.

    ``rows_multiple``: a stack of at least 8 times that many tokens gets zero rows appended, up to a multiple of it,
    as a sequence of their own (an attention run that no real token sees); their outputs are dropped. Then the
    layers see fewer distinct row counts (:data:`retriever_server.onednn.ROWS_MULTIPLE` says why that pays).
    """
    import torch

    packing = Packing.of(inputs["attention_mask"])
    embedded = model.embeddings(**{k: v for k, v in inputs.items() if k != "attention_mask"})
    tokens = embedded.reshape(packing.batch * packing.length, -1)[packing.index]
    real = tokens.shape[0]
    filler = (-real) % rows_multiple if real >= 8 * rows_multiple else 0
    if filler:
        tokens = torch.cat([tokens, tokens.new_zeros(filler, tokens.shape[1])])
        packing = dataclasses.replace(packing, runs=(*packing.runs, (1, filler)))
    hidden = model.encoder(tokens.unsqueeze(0), attention_mask=None, packing=packing).last_hidden_state
    return packing.pad(hidden[0, :real])


def enable(model, tokenizer, device: str = "cpu") -> bool:
    """Switch ``model`` to unpadded encoding if it gives the padded model's hidden states on :data:`PROBE_TEXTS`.

    Returns:
        Whether it did; if not, the model is left as it was (its attention implementation restored) and the reason
        is logged.
    """
    import torch

    original = getattr(model.config, "_attn_implementation", None)
    inputs = {k: v.to(device) for k, v in tokenizer(list(PROBE_TEXTS), padding=True, return_tensors="pt").items()}
    mask = inputs["attention_mask"].bool()
    try:
        with torch.inference_mode():
            expected = model(**inputs, return_dict=True).last_hidden_state[mask]
            _register()
            model.set_attn_implementation(ATTENTION)
            got = last_hidden_state(model, inputs)[mask]
        if same_hidden_states(got, expected):
            return True
        reason = f"its hidden states differ from the padded model's by up to {(got - expected).abs().max():.2e}"
    except (AttributeError, TypeError, ValueError, RuntimeError) as e:
        reason = f"{type(e).__name__}: {e}"
    if original is not None and getattr(model.config, "_attn_implementation", None) != original:
        model.set_attn_implementation(original)
    logger.info("Encoding padded batches: %s cannot run unpadded (%s).", type(model).__name__, reason)
    return False
