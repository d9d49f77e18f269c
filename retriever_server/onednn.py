"""Linear layers through oneDNN on CPU, where it is faster than torch's default BLAS.

On CPU torch computes a float32 ``nn.Linear`` with MKL's sgemm. MKL chooses its kernels by CPU vendor, and on AMD
CPUs it runs well below what the cores can do. torch also ships oneDNN, which chooses its kernels by the instruction
sets the CPU reports. Measured on the 2-core AMD EPYC box (medians of 60 calls):

| product | MKL | oneDNN |
|---|---|---|
| ``[625 x 384] x [384 x 1536]`` (a MiniLM feed-forward layer, 64 queries) | 3.46 ms | 1.59 ms |
| ``[625 x 1536] x [1536 x 384]`` | 3.52 ms | 1.59 ms |

One 64-query MiniLM encode took 82 ms with MKL and 46 ms with oneDNN; the embeddings differed by at most 2.1e-7
(another summation order, in float32).

:func:`enable` switches a float32 model's ``nn.Linear`` layers to oneDNN's linear (``torch.ops.mkldnn.
_linear_pointwise``, the kernel torch's own compiler emits for linear layers on CPU) when three checks pass at load:
torch has the operator, oneDNN is at least 25% faster on this machine (:data:`MIN_GAIN`, timed on the model's widest
layer at a batch of 256 tokens), and the model's hidden states on probe texts agree with the BLAS path's. Where MKL
runs at full speed (an Intel CPU; not measured here, this box is AMD) the margin keeps the model's own layers, so
close timings do not flip the choice from one load to the next. Otherwise too the model is left as it was, and the
reason is logged. Only for inference: the operator has no backward.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time

from .unpadded import PROBE_TEXTS, same_hidden_states

logger = logging.getLogger(__name__)

MIN_GAIN = 0.25
"""oneDNN is used when it takes at most ``1 - MIN_GAIN`` of the BLAS path's time on the timed layer."""

TIMED_TOKENS = 256
"""Rows of the timed product: a batch of short queries or a few passages."""

ROWS_MULTIPLE = 8
"""The unpadded encoder rounds its token stack up to a multiple of this many rows (from 64 tokens on; see
:func:`retriever_server.unpadded.last_hidden_state`). oneDNN builds a primitive for each input shape it meets and
keeps it in a cache (1,024 by default), and building one costs more than the product: the first
``[M x 384] x [384 x 1536]`` at a new row count M took 3.2 ms, the next 1.9 ms (medians over M = 601-759). A server's
batches have as many row counts as there are token totals, so the first batches at each total ran 1-4 ms slower
(64 queries: 52 ms a batch), and mixed loads could cycle the cache. With a multiple of 8 a batch computes at most 7
more rows (about 0.5% of 64 queries' 670 tokens), and a load meets an eighth of the shapes."""


def linear(x, weight, bias):
    """``x @ weight.T + bias`` by oneDNN (``bias`` may be ``None``)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@functools.cache
def linear_class() -> type:
    """``nn.Linear`` computed by :func:`linear`; :func:`enable` gives a model's layers this class."""
    import torch

    class OneDnnLinear(torch.nn.Linear):
        def forward(self, x):
            return linear(x, self.weight, self.bias)

    return OneDnnLinear


def _seconds(fn, calls: int = 7) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def enable(model, tokenizer) -> bool:
    """Give the ``nn.Linear`` layers of a float32 CPU ``model`` oneDNN's linear when the checks in the module
    docstring pass.

    Returns:
        Whether it did; if not, the model is left as it was and the reason is logged.
    """
    import torch

    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if not layers:
        return False
    reason = None
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        reason = "this torch has no oneDNN linear operator"
    elif any(m.weight.dtype != torch.float32 or m.weight.device.type != "cpu" for m in layers):
        reason = "its layers are not float32 on CPU"
    if reason is None:
        widest = max(layers, key=lambda m: m.weight.numel())
        x = torch.randn(TIMED_TOKENS, widest.in_features, generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            blas = _seconds(lambda: torch.nn.functional.linear(x, widest.weight, widest.bias))
            onednn = _seconds(lambda: linear(x, widest.weight, widest.bias))
        if onednn > (1.0 - MIN_GAIN) * blas:
            reason = f"not faster here ({1e3 * onednn:.2f} ms against {1e3 * blas:.2f} ms on its widest layer)"
    if reason is None:
        inputs = tokenizer(list(PROBE_TEXTS), padding=True, return_tensors="pt")
        mask = inputs["attention_mask"].bool()
        with torch.inference_mode():
            expected = model(**inputs, return_dict=True).last_hidden_state[mask]
            for m in layers:
                m.__class__ = linear_class()
            got = model(**inputs, return_dict=True).last_hidden_state[mask]
        if same_hidden_states(got, expected):
            logger.info(
                "Linear layers through oneDNN: %.2f ms against %.2f ms on the widest layer.", 1e3 * onednn, 1e3 * blas
            )
            return True
        for m in layers:
            m.__class__ = torch.nn.Linear
        reason = f"its hidden states differ from the BLAS path's by up to {(got - expected).abs().max():.2e}"
    logger.info("Linear layers through torch's BLAS: %s cannot use oneDNN's (%s).", type(model).__name__, reason)
    return False
