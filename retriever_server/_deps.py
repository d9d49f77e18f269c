"""Lazy imports of the optional heavy stacks, failing with an install hint instead of a bare ``ImportError``.

``import retriever_server`` imports none of torch, faiss, transformers or ray.serve (the light-import rule); every
module that needs one calls these helpers inside the function that uses it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RETRIEVAL_HINT = 'pip install "agentrag-verl[retrieval]"'
SERVE_HINT = 'pip install "agentrag-verl[serve]"'

_HINTS = {
    "torch": "pip install torch (on CPU machines: torch==2.13.0, the CPU build)",
    "transformers": RETRIEVAL_HINT,
    "faiss": RETRIEVAL_HINT + " (CPU) or install faiss-gpu from conda-forge / pytorch for GPU search",
    "fastapi": SERVE_HINT,
    "uvicorn": SERVE_HINT,
    "ray": SERVE_HINT,
    "ray.serve": SERVE_HINT,
}


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` or raise an ``ImportError`` naming the feature that needs it and how to install it.

    Args:
        module: Dotted module name, e.g. ``"faiss"``.
        feature: What the caller is doing, for the message (``"building an index"``).

    Returns:
        The imported module.

    Raises:
        ImportError: The module is not installed; the message holds the ``pip install`` line.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        hint = _HINTS.get(module, _HINTS.get(module.split(".")[0], f"pip install {module.split('.')[0]}"))
        raise ImportError(
            f"{feature} needs the `{module}` package, which is not importable ({e}). Install it: {hint}"
        ) from e
