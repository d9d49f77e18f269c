"""Encoders: presets (docs/decisions.md#retrieval), prefixes, pooling over the attention mask, normalization, order."""

from __future__ import annotations

import numpy as np
import pytest

from retriever_server.encoders import BGE_QUERY_INSTRUCTION, Encoder, EncoderConfig, infer_preset


def test_presets_follow_spec():
    e5 = EncoderConfig.from_preset("intfloat/e5-base-v2")
    assert (e5.pooling, e5.normalize, e5.query_prefix, e5.passage_prefix, e5.max_length) == (
        "mean",
        True,
        "query: ",
        "passage: ",
        256,
    )
    bge = EncoderConfig.from_preset("BAAI/bge-base-en-v1.5")
    assert (bge.pooling, bge.query_prefix, bge.passage_prefix) == ("cls", BGE_QUERY_INSTRUCTION, "")
    assert infer_preset("x", "E5") == "e5"
    assert infer_preset("x", "e5-large") == "e5"  # Search-R1 matches "e5" inside --retriever_name
    with pytest.raises(ValueError, match="choose one of"):
        infer_preset("x", "colbert")


def test_from_config_rejects_unknown_keys():
    cfg = EncoderConfig.from_config({"model": "m", "preset": "bge", "max_length": 512})
    assert (cfg.pooling, cfg.max_length) == ("cls", 512)
    with pytest.raises(ValueError, match="valid keys"):
        EncoderConfig.from_config({"model": "m", "poolng": "cls"})
    with pytest.raises(ValueError, match="pooling"):
        EncoderConfig(model="m", pooling="max")


@pytest.fixture(scope="module")
def tiny(tiny_bert_dir):
    return Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "e5", batch_size=4))


def test_prefixes_are_prepended(tiny, tiny_bert_dir):
    plain = Encoder(EncoderConfig.from_preset(tiny_bert_dir, "mean"), tiny.model, tiny.tokenizer)
    np.testing.assert_allclose(tiny.encode(["salt clock"], "query"), plain.encode(["query: salt clock"]), atol=1e-6)
    np.testing.assert_allclose(
        tiny.encode(["salt clock"], "passage"), plain.encode(["passage: salt clock"], "passage"), atol=1e-6
    )


def test_mean_pooling_ignores_padding_and_keeps_order(tiny):
    texts = ["a", "a much longer text about the river Velda and the town of Åsvik " * 3, "short one", "x y"]
    together = tiny.encode(texts, "passage")  # batch_size 4: one padded batch, sorted by length internally
    alone = np.concatenate([tiny.encode([t], "passage") for t in texts])
    # Same numbers up to float32 rounding: padding tokens are masked out of attention and of the mean.
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert together.dtype == np.float32 and together.flags.c_contiguous


def test_cls_pooling_is_first_token(tiny, tiny_bert_dir):
    import torch

    cls_encoder = Encoder(EncoderConfig.from_preset(tiny_bert_dir, "cls"), tiny.model, tiny.tokenizer)
    got = cls_encoder.encode(["harbour"])
    with torch.no_grad():
        hidden = tiny.model(**tiny.tokenizer(["harbour"], return_tensors="pt")).last_hidden_state[:, 0]
    np.testing.assert_allclose(got, torch.nn.functional.normalize(hidden, dim=-1).numpy(), atol=1e-6)


def test_empty_input(tiny):
    assert tiny.encode([]).shape == (0, 32)


def test_minilm_ranks_the_relevant_passage_first(minilm_encoder):
    """A sanity check of the real model path: the passage answering the question is the most similar."""
    q = minilm_encoder.encode(["Who wrote the novel The Salt Clock?"])
    p = minilm_encoder.encode(
        [
            "The Salt Clock is a 1967 novel by Inès Pallardo.",
            "Mount Feyl is the highest point on the island of Caldra.",
        ],
        "passage",
    )
    scores = (q @ p.T)[0]
    assert scores[0] > scores[1] + 0.2  # 0.2: a wide margin for a direct title match vs an unrelated passage


def test_a_checkpoint_saved_in_half_precision_runs_in_float32_on_cpu(tiny_bert_dir, tmp_path):
    # transformers 5 loads a checkpoint in its saved dtype; the encoder must still run fp32 on CPU, as it reports.
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    half = tmp_path / "half"
    AutoModel.from_pretrained(tiny_bert_dir, dtype=torch.float16).save_pretrained(half)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(half)
    encoder = Encoder.load(EncoderConfig.from_preset(str(half), "mean", device="cpu"))
    assert encoder.dtype_name == "float32"
    assert {p.dtype for p in encoder.model.parameters()} == {torch.float32}
    full = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "mean", device="cpu"))
    texts = ["who wrote the novel", "capital city"]
    cosine = (encoder.encode(texts) * full.encode(texts)).sum(axis=1)
    assert np.all(cosine > 0.999)  # the same model, its weights rounded to fp16 once


TEXTS = ["a", "a much longer text about the river Velda and the town of Åsvik " * 3, "short one", "x y z w"]


@pytest.mark.parametrize("preset", ["mean", "cls"])
def test_unpadded_encoding_gives_the_padded_embeddings(tiny_bert_dir, preset):
    import torch

    unpadded = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, preset, device="cpu"))
    assert unpadded.unpadded  # a BERT model passes the probe at load
    padded = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, preset, device="cpu"))
    padded.model.set_attn_implementation("sdpa")  # the model as transformers ships it, its padded batch
    padded.unpadded = False
    np.testing.assert_allclose(unpadded.encode(TEXTS), padded.encode(TEXTS), atol=1e-6)
    # Called directly, the switched model still masks its padding (its attention falls back to masked SDPA).
    inputs = unpadded.tokenizer(TEXTS, padding=True, return_tensors="pt")
    mask = inputs["attention_mask"].bool()
    with torch.inference_mode():
        direct = unpadded.model(**inputs).last_hidden_state[mask]
        shipped = padded.model(**inputs).last_hidden_state[mask]
    np.testing.assert_allclose(direct.numpy(), shipped.numpy(), atol=1e-6)


def test_unpadded_attention_attends_each_row_over_its_own_tokens():
    # Rows of mixed lengths, one left-padded and one empty: attention by runs of one length gives masked SDPA's
    # output at every real token.
    import torch

    from retriever_server import unpadded

    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    packing = unpadded.Packing.of(mask)
    assert packing.runs == ((2, 2), (2, 3), (1, 4))  # shortest first; the empty row holds no tokens
    assert packing.index.tolist() == [4, 5, 20, 21, 0, 1, 2, 9, 10, 11, 16, 17, 18, 19]
    torch.manual_seed(0)
    heads, dim = 3, 8
    grid = [torch.randn(6, heads, 4, dim) for _ in range(3)]  # [batch, heads, length, d]
    stacked = [g.transpose(1, 2).reshape(24, heads, dim)[packing.index].transpose(0, 1)[None] for g in grid]
    got, _ = unpadded.unpadded_attention(None, *stacked, None, scaling=0.5, packing=packing)
    keys = mask.bool()[:, None, None, :].clone()
    keys[3] = True  # the empty row attends to anything: its output is dropped
    want = torch.nn.functional.scaled_dot_product_attention(*grid, attn_mask=keys, scale=0.5)
    want = want.transpose(1, 2).reshape(24, heads, dim)[packing.index]
    torch.testing.assert_close(got[0], want, atol=1e-6, rtol=1e-5)
    assert torch.equal(packing.pad(got[0]).reshape(24, heads, dim)[packing.index], got[0])


def test_minilm_runs_unpadded_with_the_same_embeddings(minilm_encoder):
    from retriever_server import unpadded

    assert minilm_encoder.unpadded
    texts = ["who wrote the salt clock", "capital of the island of Caldra and its largest harbour town", "river"]
    inputs = minilm_encoder.tokenizer(texts, padding=True, return_tensors="pt")
    assert unpadded.worth_it(inputs["attention_mask"])
    fast = minilm_encoder.encode(texts)
    minilm_encoder.unpadded = False
    try:
        slow = minilm_encoder.encode(texts)
    finally:
        minilm_encoder.unpadded = True
    np.testing.assert_allclose(fast, slow, atol=1e-6)


def test_with_onednn_the_token_stack_is_rounded_up_to_a_multiple_of_rows(minilm_encoder):
    # oneDNN builds a primitive per row count (retriever_server.onednn.ROWS_MULTIPLE): the stack reaches the layers
    # with zero rows appended up to a multiple of 8, and the embeddings stay the same.
    from retriever_server import onednn

    texts = [f"who wrote the salt clock {'and the harbour ' * (i % 5)}in {i}" for i in range(16)]
    rows = []
    hook = minilm_encoder.model.encoder.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[1]))
    flag = minilm_encoder.onednn
    try:
        minilm_encoder.onednn = False
        plain = minilm_encoder.encode(texts)
        minilm_encoder.onednn = True
        rounded = minilm_encoder.encode(texts)
        minilm_encoder.encode(texts[:3])  # under 64 tokens: nothing appended
    finally:
        minilm_encoder.onednn = flag
        hook.remove()
    real, padded, small = rows
    assert real >= 8 * onednn.ROWS_MULTIPLE and real % onednn.ROWS_MULTIPLE != 0  # the case the rounding is for
    assert padded == real + (-real) % onednn.ROWS_MULTIPLE
    assert small < 8 * onednn.ROWS_MULTIPLE and small % onednn.ROWS_MULTIPLE != 0
    np.testing.assert_allclose(rounded, plain, atol=1e-6)


def test_a_batch_without_padding_runs_the_model_as_shipped(tiny, monkeypatch):
    from retriever_server import unpadded

    calls = []
    real = unpadded.last_hidden_state
    monkeypatch.setattr(unpadded, "last_hidden_state", lambda *a: calls.append(1) or real(*a))
    tiny.encode(["one text"])  # a single text has no padding
    tiny.encode(["salt clock harbour", "salt clock harbour"])
    assert calls == []
    tiny.encode(["a", "a much longer text about the river Velda"])
    assert calls == [1]


def test_a_model_that_cannot_run_unpadded_is_left_padded(tmp_path, minilm_dir, caplog):
    # DistilBERT has no `.encoder`: the probe fails, the model keeps its attention and the encoder runs padded.
    import torch
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=1, n_heads=2, hidden_dim=64)
    DistilBertModel(config).eval().save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with caplog.at_level("INFO", logger="retriever_server.unpadded"):
        encoder = Encoder.load(EncoderConfig.from_preset(str(tmp_path), "mean", device="cpu"))
    assert not encoder.unpadded
    assert encoder.model.config._attn_implementation != "agentrag_unpadded_sdpa"
    assert "cannot run unpadded" in caplog.text
    together = encoder.encode(TEXTS)
    alone = np.concatenate([encoder.encode([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta"])
def test_roberta_family_runs_unpadded_with_its_own_position_ids(family, tmp_path, minilm_dir):
    # RoBERTa and XLM-R (multilingual E5) number positions from the padding index on: embedding the padded batch
    # first keeps the model's own position ids.
    from .conftest import save_tiny_encoder

    save_tiny_encoder(tmp_path, minilm_dir, family)
    unpadded = Encoder.load(EncoderConfig.from_preset(str(tmp_path), "mean", device="cpu"))
    padded = Encoder.load(EncoderConfig.from_preset(str(tmp_path), "mean", device="cpu"))
    padded.model.set_attn_implementation("sdpa")
    padded.unpadded = False
    assert unpadded.unpadded
    np.testing.assert_allclose(unpadded.encode(TEXTS), padded.encode(TEXTS), atol=1e-6)


def test_onednn_linear_is_torchs_linear():
    import torch

    from retriever_server import onednn

    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 32, generator=gen), torch.randn(48, generator=gen)
    for x in (torch.randn(5, 32, generator=gen), torch.randn(2, 7, 32, generator=gen).transpose(0, 1)):
        torch.testing.assert_close(onednn.linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias))
        torch.testing.assert_close(onednn.linear(x, weight, None), torch.nn.functional.linear(x, weight))


def _timed(monkeypatch, blas: float, onednn_seconds: float) -> None:
    """The load-time timing (BLAS first, then oneDNN) gives these seconds: which path wins is the test's choice."""
    from retriever_server import onednn

    times = iter([blas, onednn_seconds])
    monkeypatch.setattr(onednn, "_seconds", lambda fn, calls=7: next(times))


def _linear_types(encoder) -> set[str]:
    import torch

    return {type(m).__name__ for m in encoder.model.modules() if isinstance(m, torch.nn.Linear)}


def test_linear_layers_run_through_onednn_where_it_is_faster(tiny_bert_dir, monkeypatch, caplog):
    config = EncoderConfig.from_preset(tiny_bert_dir, "mean", device="cpu")
    _timed(monkeypatch, blas=1.0, onednn_seconds=0.7)
    with caplog.at_level("INFO", logger="retriever_server.onednn"):
        fast = Encoder.load(config)
    assert fast.onednn and _linear_types(fast) == {"OneDnnLinear"}
    assert "700.00 ms against 1000.00 ms" in caplog.text
    _timed(monkeypatch, blas=1.0, onednn_seconds=0.8)  # less than MIN_GAIN faster: kept
    plain = Encoder.load(config)
    assert not plain.onednn and _linear_types(plain) == {"Linear"}
    np.testing.assert_allclose(fast.encode(TEXTS), plain.encode(TEXTS), atol=1e-6)


def test_onednn_that_disagrees_with_blas_is_not_used(tiny_bert_dir, monkeypatch, caplog):
    import torch

    from retriever_server import onednn

    _timed(monkeypatch, blas=1.0, onednn_seconds=0.1)
    monkeypatch.setattr(onednn, "linear", lambda x, w, b: torch.nn.functional.linear(x, w, b) + 1e-3)
    with caplog.at_level("INFO", logger="retriever_server.onednn"):
        encoder = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "mean", device="cpu"))
    assert not encoder.onednn and _linear_types(encoder) == {"Linear"}
    assert "hidden states differ from the BLAS path's" in caplog.text


def test_bf16_runs_the_model_in_bfloat16_and_returns_float32_embeddings(tiny_bert_dir):
    import torch

    bf16 = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "mean", device="cpu", bf16=True))
    fp32 = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "mean", device="cpu"))
    assert bf16.dtype_name == "bfloat16" and {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    assert bf16.unpadded  # the probe passes in bf16 too (the same products, row by row)
    assert not bf16.onednn  # torch's bf16 linear is oneDNN's already
    got, want = bf16.encode(TEXTS), fp32.encode(TEXTS)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # pooling and norm in float32
    assert np.all((got * want).sum(axis=1) > 0.99)  # bf16 keeps about 3 significant digits per weight


def test_fp16_and_bf16_together_are_refused():
    with pytest.raises(ValueError, match="choose one precision"):
        EncoderConfig(model="m", fp16=True, bf16=True)


def test_token_counts_are_what_the_encoder_reads(minilm_encoder):
    """``TokenCounter.count``: the length of what the tokenizer gives the model (prefix and special tokens included,
    truncated at max_length), for short, long, accented, CJK and unknown-word texts."""
    import random

    from retriever_server.encoders import TokenCounter

    words = ["river", "supercalifragilisticexpialidocious", "Åsvik", "日本語", "x" * 120, "a,b", " "]
    rng = random.Random(0)
    texts = ["", "salt clock", "y" * 5000] + [" ".join(rng.choices(words, k=rng.randint(1, 300))) for _ in range(100)]
    tokenizer = minilm_encoder.tokenizer
    for prefix in ("", "query: "):
        config = EncoderConfig.from_preset(minilm_encoder.config.model, "mean", query_prefix=prefix, max_length=64)
        counter = TokenCounter(tokenizer, config)
        read = tokenizer([prefix + t for t in texts], truncation=True, max_length=64)["input_ids"]
        assert counter.tokenize(texts) == read
        assert counter.count(texts) == [len(ids) for ids in read]
        for text, ids in zip(texts, read, strict=True):  # a clipped text gives the model the same tokens
            assert tokenizer(counter.clip(prefix + text), truncation=True, max_length=64)["input_ids"] == ids
        assert len(counter.count(texts, stop_above=100)) < len(texts)  # counting stops once over a limit


def test_a_long_passage_is_tokenized_from_its_beginning_only_with_the_same_embedding(tiny_bert_dir, monkeypatch):
    """A tokenizer reads a whole text before it truncates (about 180 bytes of memory per character: an 8 MB passage
    took 1.45 GB to build); the encoder hands it only the first characters that hold what it reads."""
    from retriever_server import encoders

    encoder = Encoder.load(EncoderConfig.from_preset(tiny_bert_dir, "e5", max_length=32, batch_size=4))
    long = " ".join("river island town harbour salt clock".split() * 40_000)  # 1.3 MB, 240,000 words

    class Recording:
        def __init__(self, tokenizer):
            self.tokenizer, self.longest = tokenizer, 0

        def __call__(self, texts, **kwargs):
            self.longest = max(self.longest, *map(len, texts))
            return self.tokenizer(texts, **kwargs)

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

    encoder.tokenizer = Recording(encoder.tokenizer)
    with monkeypatch.context() as whole:  # the reference: a 5,000-character beginning, tokenized whole
        whole.setattr(encoders, "CLIP_CHARS_PER_TOKEN", 10**9)
        expected = encoder.encode([long[:5000]], "passage")
    assert encoder.tokenizer.longest > 5000
    encoder.tokenizer.longest = 0
    np.testing.assert_array_equal(encoder.encode([long, "salt clock"], "passage")[:1], expected)
    assert encoder.tokenizer.longest <= 32 * encoders.CLIP_CHARS_PER_TOKEN


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_texts_tokenized_by_the_counter_encode_as_the_texts_do(family, tmp_path, minilm_dir):
    """The server tokenizes a request once, when it counts its tokens; the encoder pads those ids itself."""
    from .conftest import save_tiny_encoder

    save_tiny_encoder(tmp_path, minilm_dir, family)
    encoder = Encoder.load(EncoderConfig.from_preset(str(tmp_path), "e5", max_length=32, batch_size=4, device="cpu"))
    texts = [*TEXTS, "", "y" * 5000, "river " * 100]
    counter = encoder.token_counter()
    for kind in ("query", "passage"):
        np.testing.assert_allclose(
            encoder.encode(texts, kind, token_ids=counter.tokenize(texts, kind)), encoder.encode(texts, kind), atol=1e-6
        )
