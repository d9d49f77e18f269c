"""Dense text encoders: E5, BGE, or any Hugging Face encoder with explicit pooling and prefixes.

The presets (Search-R1's E5 setup, ReasonRAG's BGE, and plain pooling for other encoders):

========  ========  =========  ===================================================================  ==========
preset    pooling   normalize  query prefix / passage prefix                                        max length
========  ========  =========  ===================================================================  ==========
``e5``    mean      yes        ``"query: "`` / ``"passage: "``                                      256
``bge``   CLS       yes        ``"Represent this sentence for searching relevant passages: "`` / -  256
``mean``  mean      yes        - / - (sentence-transformers models such as all-MiniLM-L6-v2)        256
``cls``   CLS       yes        - / -                                                                256
========  ========  =========  ===================================================================  ==========

Decisions:

- Mean pooling averages the last hidden states over the attention mask (padding never counts); pooling and
  L2 normalization run in float32 even when the model runs in fp16, so fp16 on GPU changes scores only through
  the transformer itself.
- fp16 is the default on CUDA and never used on CPU (slow there). bf16 is opt-in (``--bf16``): it changes the
  embeddings slightly (cosine >= 0.9999 to float32 on MiniLM), so ranked hits can swap near-ties; a CPU without
  native bf16 gets a warning. Inference runs under ``torch.inference_mode`` and nothing calls
  ``torch.cuda.empty_cache`` per call: the caching allocator reuses the same blocks for the next batch, and emptying
  it only forces new ``cudaMalloc`` calls.
- Passage encoding (index builds) sorts texts by length inside each call so batches carry little padding, then
  restores the input order; query encoding keeps the given order (micro-batches are small).
- On CPU a float32 model's linear layers run through oneDNN (:mod:`retriever_server.onednn`) when a check at load
  shows the same hidden states and a faster layer than torch's BLAS (2.2x on the AMD box: MKL runs below speed there).
- On CPU a BERT-family encoder runs its layers on the real tokens only (:mod:`retriever_server.unpadded`), when a
  probe at load shows the same hidden states as the padded model; other models, GPUs (unmeasured there) and
  ``pooling="pooler"`` run padded batches.
- The Search-R1 rule "a model whose name contains e5 / bge gets that model's prefixes" is kept as
  :func:`infer_preset` for the drop-in flags (``--retriever_name``); explicit options always win.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import onednn, unpadded
from ._deps import require

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

Pooling = Literal["mean", "cls", "pooler"]
TextKind = Literal["query", "passage"]

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "

PRESETS: dict[str, dict[str, Any]] = {
    "e5": {"pooling": "mean", "normalize": True, "query_prefix": "query: ", "passage_prefix": "passage: "},
    "bge": {"pooling": "cls", "normalize": True, "query_prefix": BGE_QUERY_INSTRUCTION, "passage_prefix": ""},
    "mean": {"pooling": "mean", "normalize": True, "query_prefix": "", "passage_prefix": ""},
    "cls": {"pooling": "cls", "normalize": True, "query_prefix": "", "passage_prefix": ""},
}


def infer_preset(model: str, name: str | None = None) -> str:
    """Pick a preset from an explicit name or, failing that, from the model path (Search-R1's rule).

    Args:
        model: Model path or hub id.
        name: A preset name or a Search-R1 ``--retriever_name`` (``e5``, ``bge``, ...); ``None`` to infer.

    Returns:
        One of :data:`PRESETS`.

    Raises:
        ValueError: ``name`` is not a known preset.

    Example:
        >>> infer_preset("intfloat/e5-base-v2")
        'e5'
        >>> infer_preset("BAAI/bge-base-en-v1.5")
        'bge'
        >>> infer_preset("sentence-transformers/all-MiniLM-L6-v2")
        'mean'
    """
    if name:
        key = name.strip().lower()
        if key in PRESETS:
            return key
        for preset in ("e5", "bge"):
            if preset in key:
                return preset
        raise ValueError(
            f"Unknown retriever preset {name!r}; choose one of {sorted(PRESETS)} (--retriever-name), or set "
            "--pooling/--query-prefix/--passage-prefix explicitly for another encoder."
        )
    lowered = model.lower()
    for preset in ("e5", "bge"):
        if preset in lowered:
            return preset
    return "mean"


@dataclass
class EncoderConfig:
    """How to load and run a dense encoder. Build one with :meth:`from_preset` or :meth:`from_config`."""

    model: str
    """Hugging Face model directory or hub id (e.g. ``intfloat/e5-base-v2``)."""
    pooling: Pooling = "mean"
    """``mean`` (over the attention mask; E5, sentence-transformers), ``cls`` (first token; BGE) or ``pooler``."""
    normalize: bool = True
    """L2-normalize embeddings, so inner product = cosine similarity (E5, BGE)."""
    query_prefix: str = ""
    """Text prepended to every query (E5: ``"query: "``; BGE: its instruction)."""
    passage_prefix: str = ""
    """Text prepended to every passage (E5: ``"passage: "``)."""
    max_length: int = 256
    """Tokens per text; longer texts are truncated (256, Search-R1's setting for E5)."""
    batch_size: int = 128
    """Texts per forward pass. Larger calls are split into batches of this size."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    fp16: bool | None = None
    """Run the model in float16; ``None`` means yes on CUDA (unless ``bf16``), no on CPU."""
    bf16: bool = False
    """Run the model in bfloat16: on a CPU with AVX512-BF16 or AMX about 2.2x faster than float32 (MiniLM, 64 queries,
    2-core Zen 4), and on GPUs that have it. The embeddings change slightly (cosine >= 0.9999 to float32 on MiniLM)."""
    num_threads: int | None = None
    """``torch.set_num_threads`` for CPU inference; ``None`` keeps torch's default (all cores)."""

    @classmethod
    def from_preset(cls, model: str, preset: str | None = None, **overrides: Any) -> EncoderConfig:
        """Config for ``model`` from a preset (inferred from the model name when ``None``), then ``overrides``.

        ``overrides`` whose value is ``None`` are ignored, so argparse defaults can be passed straight through.

        Example:
            >>> EncoderConfig.from_preset("intfloat/e5-base-v2").query_prefix
            'query: '
            >>> EncoderConfig.from_preset("my/encoder", "bge", max_length=512).pooling
            'cls'
        """
        base = dict(PRESETS[infer_preset(model, preset)])
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(model=model, **base)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EncoderConfig:
        """Build from a plain or OmegaConf mapping; an optional ``preset`` key selects the starting values.

        Raises:
            ValueError: An unknown key, naming the valid ones.
        """
        data = dict(config)
        preset = data.pop("preset", None)
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ValueError(f"Unknown encoder option(s) {unknown}; valid keys: {sorted(valid | {'preset'})}.")
        if "model" not in data:
            raise ValueError("The encoder config needs `model` (a Hugging Face directory or hub id).")
        return cls.from_preset(data.pop("model"), preset, **data)

    def __post_init__(self) -> None:
        if self.pooling not in ("mean", "cls", "pooler"):
            raise ValueError(f"Unknown pooling {self.pooling!r}; choose one of ['mean', 'cls', 'pooler'] (--pooling).")
        if self.fp16 and self.bf16:
            raise ValueError("fp16 and bf16 are both set; choose one precision (--fp16 or --bf16).")
        if self.max_length < 1 or self.batch_size < 1:
            raise ValueError(
                f"max_length ({self.max_length}) and batch_size ({self.batch_size}) must be positive integers."
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (stored in an index's ``meta.json``)."""
        return asdict(self)

    def embedding_settings(self) -> dict[str, Any]:
        """The settings that change embeddings (resuming a build checks these; device/batching do not count)."""
        keys = ("model", "pooling", "normalize", "query_prefix", "passage_prefix", "max_length")
        return {k: getattr(self, k) for k in keys}


CLIP_CHARS_PER_TOKEN = 8
"""A text longer than ``max_length`` x this many characters is tokenized from that many first (4x more at a time while
its complete words hold fewer than ``max_length`` tokens); English averages 4-5 characters per token."""
CLIP_MAX_CHARS_PER_TOKEN = 128
"""The window stops growing at ``max_length`` x this many characters: a text whose first 32,768 characters (at 256
tokens) hold fewer than 256 tokens of complete words (a run of 100-character words, each one unknown token) is
encoded from those characters alone."""


class TokenCounter:
    """The tokens the encoder reads of each text, with the encoder's own tokenizer, and long texts cut to what it reads.

    :meth:`tokenize` gives each text's token ids as the tokenizer gives them to the model (prefix and special tokens
    included, truncated at ``max_length``); :meth:`Encoder.encode` takes them as they are (``token_ids``), so a text the
    server counted is not tokenized again. The tokenizer is a private copy of the fast tokenizer, which may be used
    from another thread than the encoder's.

    Long texts (:meth:`clip`): a tokenizer reads a whole text before it truncates, and keeps per character and per
    token bookkeeping meanwhile, about 180 bytes of memory per character (an 8 MB passage took 1.45 GB to build). So a
    text is tokenized from its first ``max_length`` x :data:`CLIP_CHARS_PER_TOKEN` characters, and cut there when the
    complete words of that window hold the ``max_length`` tokens the encoder reads: those tokens are then the whole
    text's (tokenizers split text into words and tokenize each word alone), so the embedding is the same. Otherwise the
    window grows 4x at a time, up to :data:`CLIP_MAX_CHARS_PER_TOKEN` characters per token.
    """

    def __init__(self, tokenizer: Any, config: EncoderConfig) -> None:
        self.config = config
        self.max_length = config.max_length
        self._hf = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._words = self._ids = None
        if backend is not None:
            from tokenizers import Tokenizer

            self._words = Tokenizer.from_str(backend.to_str())  # whole texts, no special tokens: for clip
            self._words.no_truncation()
            self._words.no_padding()
            self._ids = Tokenizer.from_str(backend.to_str())  # what transformers gives the model, unpadded
            self._ids.no_padding()
            self._ids.enable_truncation(
                self.max_length, direction=getattr(tokenizer, "truncation_side", "right"), strategy="longest_first"
            )
            self.specials = len(self._ids.encode("").ids) - len(self._words.encode("", add_special_tokens=False).ids)
        else:  # a slow (Python) tokenizer: through transformers, long texts clipped by characters alone
            self.specials = len(tokenizer("")["input_ids"])
        self._room = max(0, self.max_length - self.specials)
        """Content tokens the encoder reads of a text (prefix included)."""

    @classmethod
    def load(cls, config: EncoderConfig) -> TokenCounter:
        """A counter from the tokenizer of ``config.model`` alone (no model weights: for a process that does not
        encode, such as the ingress of a sharded deployment)."""
        transformers = require("transformers", "Counting tokens")
        return cls(transformers.AutoTokenizer.from_pretrained(config.model, use_fast=True), config)

    def tokenize(
        self, texts: Sequence[str], kind: TextKind = "query", stop_above: int | None = None
    ) -> list[list[int]]:
        """Token ids the encoder reads of each text (``kind`` picks the prefix).

        Args:
            texts: The texts, without their prefix.
            kind: ``"query"`` or ``"passage"``.
            stop_above: Stop once the texts so far hold more tokens than this (the list is then shorter than
                ``texts``).
        """
        prefix = self.config.query_prefix if kind == "query" else self.config.passage_prefix
        window = self.max_length * CLIP_CHARS_PER_TOKEN
        out: list[list[int]] = []
        total = 0
        for text in texts:
            text = prefix + text
            if len(text) > window:
                text = self.clip(text)
            ids = self._ids.encode(text).ids if self._ids is not None else self._slow_ids(text)
            out.append(ids)
            total += len(ids)
            if stop_above is not None and total > stop_above:
                break
        return out

    def count(self, texts: Sequence[str], kind: TextKind = "query", stop_above: int | None = None) -> list[int]:
        """How many tokens the encoder reads of each text (:meth:`tokenize`'s lengths)."""
        return [len(ids) for ids in self.tokenize(texts, kind, stop_above)]

    def clip(self, text: str) -> str:
        """``text`` (with its prefix) cut to what the encoder reads of it, for a text longer than the first window; the
        same text otherwise (class docstring)."""
        window = self.max_length * CLIP_CHARS_PER_TOKEN
        widest = self.max_length * CLIP_MAX_CHARS_PER_TOKEN
        while len(text) > window:
            head = text[:window]
            if window >= widest:
                return head
            if self._words is not None:
                words = self._words.encode(head, add_special_tokens=False).word_ids
                if words and words.index(words[-1]) >= self._room:  # tokens before the last (maybe cut) word
                    return head
            window *= 4
        return text

    def _slow_ids(self, text: str) -> list[int]:
        return list(self._hf(text, truncation=True, max_length=self.max_length)["input_ids"])


@dataclass
class Encoder:
    """A loaded encoder: ``encode(texts, kind)`` returns float32 embeddings ``[n, dim]``.

    Not thread-safe: call it from one thread at a time (the server runs it in a single worker thread).
    """

    config: EncoderConfig
    model: Any = field(repr=False)
    tokenizer: Any = field(repr=False)
    device: str = "cpu"
    dtype_name: str = "float32"
    unpadded: bool = False
    """Run the layers on the real tokens only (:mod:`retriever_server.unpadded`); set by :meth:`load`."""
    onednn: bool = False
    """The linear layers run through oneDNN (:mod:`retriever_server.onednn`); set by :meth:`load`."""
    tokens: TokenCounter | None = field(default=None, repr=False)
    """Cuts long texts to what the encoder reads (:meth:`TokenCounter.clip`); made on first use."""

    @classmethod
    def load(cls, config: EncoderConfig) -> Encoder:
        """Load tokenizer and model onto the configured device.

        Raises:
            ImportError: torch or transformers is missing (with the install hint).
            ValueError: The model path / id is not a loadable model (the message says why and what to pass).
        """
        torch = require("torch", "Encoding text")
        transformers = require("transformers", "Encoding text")
        check_model_path(config.model)
        device = resolve_device(config.device)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        use_fp16 = config.fp16 if config.fp16 is not None else device.startswith("cuda") and not config.bf16
        dtype_name = "float16" if use_fp16 else "bfloat16" if config.bf16 else "float32"
        native_bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)  # absent: cannot tell, no warning
        if dtype_name == "bfloat16" and device == "cpu" and native_bf16 is not None and not native_bf16():
            logger.warning(
                "bf16 is emulated on this CPU (no AVX512-BF16 or AMX) and runs slower than float32; drop --bf16."
            )
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(config.model, use_fast=True)
            model = transformers.AutoModel.from_pretrained(config.model)
        except (OSError, ValueError, KeyError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(
                f"Cannot load the encoder {config.model} ({reason}). Pass a Hugging Face model folder (config.json, "
                "tokenizer and weights) or a hub id that is available (--model)."
            ) from None
        # The dtype is set explicitly: transformers 5 loads a checkpoint in the dtype it was saved in, so a model saved
        # in fp16 or bf16 would otherwise run in it on CPU (slow there, and not what dtype_name reports).
        model = model.eval().to(device=device, dtype=getattr(torch, dtype_name))
        fast_linear = device == "cpu" and dtype_name == "float32" and onednn.enable(model, tokenizer)
        # Unpadded on CPU, where it was measured (1.27x for a batch of short queries); the pooler head needs the
        # model's own output, so pooling="pooler" stays padded.
        unpad = device == "cpu" and config.pooling != "pooler" and unpadded.enable(model, tokenizer, device)
        logger.info(
            "Loaded encoder %s on %s (%s, pooling=%s, %s, linear layers through %s)",
            config.model,
            device,
            dtype_name,
            config.pooling,
            "unpadded" if unpad else "padded",
            "oneDNN" if fast_linear else "torch's BLAS",
        )
        return cls(config, model, tokenizer, device, dtype_name, unpad, fast_linear)

    @property
    def dim(self) -> int:
        """Embedding width (the model's hidden size)."""
        return int(self.model.config.hidden_size)

    def token_counter(self) -> TokenCounter:
        """A new :class:`TokenCounter` over this encoder's tokenizer and settings (for another thread: each has its own
        copy of the tokenizer)."""
        return TokenCounter(self.tokenizer, self.config)

    def encode(
        self,
        texts: Sequence[str],
        kind: TextKind = "query",
        *,
        sort_by_length: bool | None = None,
        token_ids: Sequence[Sequence[int]] | None = None,
    ):
        """Encode texts as queries or passages.

        Args:
            texts: The raw texts; the configured prefix for ``kind`` is prepended here.
            kind: ``"query"`` or ``"passage"``.
            sort_by_length: Batch texts of similar length together (less padding); defaults to ``True`` for
                passages. The output order is always the input order.
            token_ids: The texts already tokenized by :meth:`TokenCounter.tokenize` (with this encoder's settings):
                they are padded into the model's inputs as the tokenizer would pad them, and ``texts`` is not read
                again.

        Returns:
            ``np.ndarray`` float32 ``[len(texts), dim]``, C-contiguous; L2-normalized when configured.
        """
        import numpy as np

        torch = require("torch", "Encoding text")
        if token_ids is not None:
            items: list = list(token_ids)
        else:
            prefix = self.config.query_prefix if kind == "query" else self.config.passage_prefix
            items = [prefix + t for t in texts] if prefix else list(texts)
            window = self.config.max_length * CLIP_CHARS_PER_TOKEN
            if any(len(t) > window for t in items):  # tokenizing a long text whole costs ~180 bytes per character
                if self.tokens is None:
                    self.tokens = self.token_counter()
                items = [self.tokens.clip(t) if len(t) > window else t for t in items]
        out = np.empty((len(items), self.dim), dtype=np.float32)
        if not items:
            return out
        if sort_by_length is None:
            sort_by_length = kind == "passage"
        order = sorted(range(len(items)), key=lambda i: len(items[i])) if sort_by_length else None
        ordered = [items[i] for i in order] if order is not None else items
        target = np.empty_like(out) if order is not None else out
        bs = self.config.batch_size
        with torch.inference_mode():
            for start in range(0, len(ordered), bs):
                batch = ordered[start : start + bs]
                inputs = self._padded(batch) if token_ids is not None else self._tokenized(batch)
                # Copy each batch into the preallocated output at once: keeping per-batch arrays alive between the
                # large temporaries fragments glibc's heap (measured: +0.4-0.8 GB RSS over a 4096-passage chunk).
                target[start : start + bs] = self._forward(inputs, torch)
        if order is not None:
            out[np.asarray(order)] = target
        return out

    def _tokenized(self, batch: list[str]) -> dict[str, Any]:
        return self.tokenizer(
            batch, max_length=self.config.max_length, padding=True, truncation=True, return_tensors="pt"
        )

    def _padded(self, batch: list[Sequence[int]]) -> dict[str, Any]:
        """The model's inputs for token ids, padded as the tokenizer pads (its pad id and side; token type 0)."""
        import numpy as np
        import torch

        width = max(map(len, batch))
        input_ids = np.full((len(batch), width), self.tokenizer.pad_token_id or 0, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        left = self.tokenizer.padding_side == "left"
        for row, ids in enumerate(batch):
            cols = slice(width - len(ids), width) if left else slice(0, len(ids))
            input_ids[row, cols] = ids
            mask[row, cols] = 1
        inputs = {"input_ids": torch.from_numpy(input_ids)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        inputs["attention_mask"] = torch.from_numpy(mask)
        return inputs

    def _forward(self, inputs: dict[str, Any], torch) -> np.ndarray:
        inputs = {k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}
        if self.unpadded and unpadded.worth_it(inputs["attention_mask"]):
            rows_multiple = onednn.ROWS_MULTIPLE if self.onednn else 1
            output, hidden = None, unpadded.last_hidden_state(self.model, inputs, rows_multiple)
        else:
            output = self.model(**inputs, return_dict=True)
            hidden = output.last_hidden_state
        if self.config.pooling == "mean":
            hidden = hidden.float()
            mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        elif self.config.pooling == "cls":
            emb = hidden[:, 0].float()
        else:
            if getattr(output, "pooler_output", None) is None:
                raise ValueError(
                    f"pooling='pooler' but {type(self.model).__name__} returns no pooler_output; use pooling "
                    "'mean' or 'cls' (--pooling)."
                )
            emb = output.pooler_output.float()
        if self.config.normalize:
            emb = torch.nn.functional.normalize(emb, p=2, dim=-1)
        return emb.cpu().numpy()


def check_model_path(model: str) -> None:
    """Refuse a model argument that cannot be a model before anything is loaded: a file, a folder without
    ``config.json``, or a path that does not exist (a plain ``org/name`` is left to the hub).

    Raises:
        NotADirectoryError, FileNotFoundError, ValueError: The message says what was given and what to pass.
    """
    path = Path(model).expanduser()
    if path.is_file():
        raise NotADirectoryError(
            f"The model {model} is a file; pass the model folder (the one holding config.json and the weights) or a "
            "hub id (--model)."
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"The model folder {model} has no config.json, so it is not a Hugging Face model; pass the folder "
                "that holds config.json, the tokenizer and the weights (--model)."
            )
        return
    looks_like_path = model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model
    if looks_like_path:
        raise FileNotFoundError(
            f"The model folder {model} does not exist; pass an existing model folder or a hub id (--model)."
        )


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is usable, else ``cpu``; other values are checked and returned.

    Raises:
        ValueError: CUDA was requested but is not available.
    """
    torch = require("torch", "Encoding text")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but no CUDA GPU is usable here; use --device cpu (or auto).")
    return device


def with_overrides(config: EncoderConfig, **overrides: Any) -> EncoderConfig:
    """A copy of ``config`` with the non-``None`` overrides applied."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
