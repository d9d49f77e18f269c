"""A tiny tokenizer and a tiny random Qwen2 causal LM, built locally (no hub download).

The tokenizer is a byte-level BPE trained at call time with the ``tokenizers`` library on text that contains
every tag our trajectory formats use, so tags tokenize compactly but stay *ordinary text* (as in Qwen, where
``<search>`` is not a special token). Only ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>`` are special.
Its chat template follows Qwen2.5's conventions, tools included: tool schemas inside ``<tools>`` in the system
turn, assistant tool calls as ``<tool_call>`` JSON, tool results as ``<tool_response>`` in a user turn (what
verl's ``hermes`` tool parser expects).

The model defaults to head_dim 64 (hidden 128, 2 heads) because vLLM's CPU attention kernels need it.
Both save with ``save_pretrained`` and load with ``AutoTokenizer`` / ``AutoModelForCausalLM``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FORMAT_TAGS", "SPECIAL_TOKENS", "CHAT_TEMPLATE", "build_tiny_tokenizer", "build_tiny_qwen2"]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Every structural tag used by the five papers' formats and Search-R1 (docs/methods/).
FORMAT_TAGS = [
    "think",
    "step",
    "reasoning",
    "search",
    "context",
    "conclusion",
    "information",
    "reflect",
    "answer",
    "query",
    "evidence",
    "tool_call",
    "tool_response",
    "tools",
]

# Qwen2.5-style chat template with tool support. Written for this project; the layout is the one verl's
# hermes parser and Qwen models expect.
CHAT_TEMPLATE = (
    # transformers renders templates with trim_blocks, so newlines after block tags are written as {{ NL }}.
    '{% set NL = "\n" %}'
    "{% set sys_msg = messages[0].content if messages and messages[0].role == 'system' else none %}"
    "{% if tools %}"
    "<|im_start|>system\n"
    "{{ sys_msg if sys_msg is not none else 'You are a helpful assistant.' }}\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "Function signatures are listed within <tools></tools>:\n<tools>"
    "{% for tool in tools %}{{ NL }}{{ tool | tojson }}{% endfor %}{{ NL }}</tools>\n\n"
    "Return each call as a JSON object with the function name and arguments inside <tool_call></tool_call>:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    "<|im_end|>\n"
    "{% elif sys_msg is not none %}"
    "<|im_start|>system\n{{ sys_msg }}<|im_end|>{{ NL }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ NL }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>{{ NL }}{% endif %}"
    "{% else %}"
    "{% set content = message.content if message.content is string else '' %}"
    "<|im_start|>{{ message.role }}\n{{ content }}"
    "{% if message.role == 'assistant' and message.tool_calls %}"
    "{% for call in message.tool_calls %}"
    "{% set fn = call.function if call.function is defined else call %}"
    "{% if content or not loop.first %}{{ NL }}{% endif %}"
    '<tool_call>\n{"name": "{{ fn.name }}", "arguments": '
    "{{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>{{ NL }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ NL }}{% endif %}"
)

_BASE_TEXT = """\
Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new
information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query
</search> and it will return the top searched results between <information> and </information>. You can search as
many times as you want. If you find no further external knowledge needed, you can directly provide the answer
inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>.
Question: who wrote the novel about the lighthouse keeper? Doc 1(Title: "Lighthouse") The keeper lived alone.
The capital of France is Paris. Water boils at 100 degrees Celsius at sea level. Yes. No. 0 1 2 3 4 5 6 7 8 9 10
So the next query is <query>river town founder</query>. So the answer is <answer>Paris</answer>.
So the score is 0.8. <answer>True</answer> <answer>False</answer> YES NO {"name": "search", "arguments": {}}
"""


def _training_text() -> list[str]:
    lines = _BASE_TEXT.splitlines()
    for tag in FORMAT_TAGS:
        lines += [f"<{tag}>", f"</{tag}>", f"<{tag}> text </{tag}>", f"</{tag}>\n\n<{tag}>"]
    try:  # the fixture corpus, when present, gives the vocabulary real words
        from agentrag_verl.data import corpus

        lines += [p.contents for p in corpus.load_corpus()]
        lines += [row["question"] for row in corpus.load_qa()]
    except (ImportError, FileNotFoundError):
        pass
    return lines * 4


def build_tiny_tokenizer(out_dir: str | Path, vocab_size: int = 2048):
    """Train a byte-level BPE tokenizer and save it as a ``PreTrainedTokenizerFast`` in ``out_dir``.

    Args:
        out_dir: Directory to write ``tokenizer.json`` and ``tokenizer_config.json`` into (created if needed).
        vocab_size: Target vocabulary size including the special tokens.

    Returns:
        The loaded ``transformers.PreTrainedTokenizerFast`` (eos ``<|im_end|>``, pad ``<|endoftext|>``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.save_pretrained(out_dir)
    return hf_tok


def build_tiny_qwen2(
    out_dir: str | Path,
    *,
    hidden_size: int = 128,
    num_attention_heads: int = 2,
    num_hidden_layers: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
    vocab_size: int = 2048,
    seed: int = 0,
) -> Path:
    """Build a random tiny Qwen2 causal LM plus the tiny tokenizer, saved together in ``out_dir``.

    The default ``hidden_size / num_attention_heads`` is 64, the head size vLLM's CPU attention supports.

    Args:
        out_dir: Directory for the model and tokenizer files.
        hidden_size: Model width.
        num_attention_heads: Attention heads (also the number of key/value heads).
        num_hidden_layers: Decoder layers.
        intermediate_size: MLP width.
        max_position_embeddings: Maximum sequence length.
        vocab_size: Tokenizer target vocabulary size.
        seed: Torch seed for the random weights (same seed, same weights).

    Returns:
        ``out_dir`` as a Path, loadable with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tok = build_tiny_tokenizer(out_dir, vocab_size=vocab_size)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.pad_token_id]
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out_dir)
    return out_dir
