"""The tiny tokenizer / Qwen2 fixtures load with transformers' Auto classes and generate."""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from agentrag_verl.local_cpu.tiny_model import FORMAT_TAGS, SPECIAL_TOKENS


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    for token in SPECIAL_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1


@pytest.mark.parametrize("tag", FORMAT_TAGS)
def test_format_tags_are_ordinary_text(tokenizer, tag):
    """Tags round-trip exactly and are not special tokens (skip_special_tokens keeps them), as in Qwen."""
    text = f"<{tag}> Åsvik 42 </{tag}>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_chat_template_plain_and_generation_prompt(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_tools(tokenizer):
    """Hermes layout: schemas in <tools>, assistant calls in <tool_call>, results in one user turn."""
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "Q?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "x y"}}}],
        },
        {"role": "tool", "content": "Doc 1"},
        {"role": "tool", "content": "Doc 2"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert '<tools>\n{"type": "function", "function": {"name": "search"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "search", "arguments": {"query": "x y"}}\n</tool_call>' in text
    assert (
        "<|im_start|>user\n<tool_response>\nDoc 1\n</tool_response>\n<tool_response>\nDoc 2\n</tool_response>"
        "<|im_end|>\n"
    ) in text
    assert text.count("<|im_start|>user") == 2  # consecutive tool results share one user turn


def test_model_shape_and_generation(tiny_model_dir, tokenizer):
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert config.model_type == "qwen2"
    assert config.hidden_size // config.num_attention_heads == 64  # vLLM CPU attention needs head_dim 64
    assert config.vocab_size == len(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Where is Åsvik?"}], add_generation_prompt=True, tokenize=False
    )
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    out = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=6, min_new_tokens=6, do_sample=False
    )
    assert out.shape == (1, input_ids.shape[1] + 6)
    assert isinstance(tokenizer.decode(out[0, input_ids.shape[1] :]), str)


def test_same_seed_same_weights(tmp_path):
    from agentrag_verl.testing import build_tiny_qwen2

    a = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tmp_path / "a", seed=3))
    b = AutoModelForCausalLM.from_pretrained(build_tiny_qwen2(tmp_path / "b", seed=3))
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name
