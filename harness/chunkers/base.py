"""Base class for chunkers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable

from harness.types import Chunk, Document


class Chunker(ABC):
    """Splits documents into span-exact chunks.

    Subclasses take explicit typed keyword arguments (a misspelt YAML key fails), validate
    them in ``__init__`` with a ``ValueError`` naming the parameter and its allowed range,
    do no expensive work in ``__init__``, and implement :meth:`chunk`.

    Contract (checked for every ``conf/chunker/*.yaml`` by ``tests/test_configs.py``):

    * every span lies in its document; ``chunk.text == metadata.get("prefix", "") +
      metadata.get("joiner", "").join(span texts) + metadata.get("suffix", "")``, i.e.
      added context (a section path, a table header) is declared in metadata;
    * no empty or whitespace-only chunk; no two chunks with identical spans;
    * :meth:`size_limit` holds for the source text of every chunk;
    * when ``contiguous``: one span per chunk and starts non-decreasing per document;
    * when ``partitions``: every non-whitespace character of a document is in some chunk;
    * deterministic: same input and parameters give identical chunks and ids.

    Attributes:
        name: strategy name used in run names and metrics.
        needs_encoder: True when the strategy embeds text while splitting; the builder then
            passes the shared :class:`harness.embeddings.model.Encoder` as ``encoder=``.
        contiguous: chunks are single spans in document order.
        partitions: chunks cover every non-whitespace character (no text is dropped).
    """

    name: str = "base"
    needs_encoder: bool = False
    contiguous: bool = True
    partitions: bool = True

    def size_limit(self) -> tuple[str, str, int] | None:
        """``(unit, tokenizer, limit)`` that every chunk's source text respects, or None.

        ``unit`` is ``chars``, ``words`` or ``tokens``; ``tokenizer`` is ``"model"`` or a
        tiktoken encoding name (only meaningful for tokens).
        """
        return None

    def expand(self, ranked: list[Chunk], documents: dict[str, Document]) -> list[Chunk]:
        """Map ranked indexed chunks to what is handed to the generator (default: themselves).

        Hierarchical ("small-to-big") strategies return each hit's parent, deduplicated.
        Metrics score the expanded list.
        """
        return ranked

    @abstractmethod
    def chunk(self, doc: Document) -> list[Chunk]:
        """Split one document.

        Returns:
            Chunks of ``doc`` in document order; every span lies inside ``doc.text``.
        """

    def chunk_all(self, docs: Iterable[Document], progress: bool = False) -> list[Chunk]:
        """Chunk every document and concatenate the results (document order kept).

        Raises:
            ValueError: two chunks share a chunk id (a chunker bug: identical spans twice).
        """
        docs = list(docs)
        if progress:
            from tqdm.auto import tqdm

            docs = tqdm(docs, desc=f"chunk ({self.name})", unit="doc")
        out: list[Chunk] = []
        seen: set[str] = set()
        for doc in docs:
            for c in self.chunk(doc):
                if c.chunk_id in seen:
                    continue  # identical spans from an overlapping window: keep one
                seen.add(c.chunk_id)
                out.append(c)
        return out


class SizedChunker(Chunker):
    """Base for strategies capped at ``max_chunk_size`` units of ``unit`` (chars, words or tokens).

    Subclasses call :meth:`_init_size` in ``__init__``; :meth:`size_limit` then reports the cap.
    """

    max_chunk_size: int
    unit: str
    tokenizer: str

    def _init_size(self, max_chunk_size: int, unit: str, tokenizer: str) -> None:
        """Validate and store the cap.

        Raises:
            ValueError: ``max_chunk_size`` < 1, unknown ``unit`` or ``tokenizer``.
        """
        from harness.chunkers.units import check_unit

        check_size("max_chunk_size", max_chunk_size)
        check_unit(unit, tokenizer)
        self.max_chunk_size = max_chunk_size
        self.unit = unit
        self.tokenizer = tokenizer

    def size_limit(self) -> tuple[str, str, int]:
        return (self.unit, self.tokenizer, self.max_chunk_size)


def check_count_below(name: str, value: int, bound: int, bound_name: str) -> None:
    """Raise ``ValueError`` unless ``0 <= value < bound`` (an integer); the message names both parameters."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        raise ValueError(f"chunker.{name} must be an integer in [0, {bound_name}) = [0, {bound}), got {value!r}")


def check_size(name: str, value: int, minimum: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an int >= ``minimum`` (message names ``name``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"chunker.{name} must be an integer >= {minimum}, got {value!r}")


def check_overlap(size: int, overlap: int) -> None:
    """Raise ``ValueError`` unless ``0 <= chunk_overlap < chunk_size``."""
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0 or overlap >= size:
        raise ValueError(
            f"chunker.chunk_overlap must be an integer in [0, chunk_size) = [0, {size}), got {overlap!r}"
        )
