"""Tracked-offset re-runs of the algorithms the LangChain and chonkie adapters wrap.

An adapter must report where the library cut, not where a copy of the chunk's text
happens to be. For the splitters whose algorithm is known, the functions here run the
same algorithm on spans of the source instead of strings, calling the library's own
length function / tokenizer, and return for every chunk the string the library is
expected to produce together with the source span it came from. The adapter compares the
expected strings with the library's actual output: only when every string is equal (same
number of chunks, same order) are the spans used; otherwise it falls back to constrained
alignment (:mod:`harness.text.align`).

Covered:

* LangChain ``RecursiveCharacterTextSplitter`` (and subclasses that only change its
  settings: markdown, code and LaTeX splitters, ``from_tiktoken_encoder``...) and
  ``CharacterTextSplitter``: separator split (literal or regex, ``keep_separator``
  ``True``/``"start"``/``"end"``/``False``), recursion into pieces that are too long,
  and the greedy merge with overlap (``_merge_splits``), measured with the splitter's
  ``_length_function`` on the same strings LangChain measures. When separators are
  dropped (``keep_separator=False``) a chunk's string is its pieces joined by the
  separator, which can differ from the source (runs of separators collapse); its span
  runs from its first piece's start to its last piece's end.
* LangChain ``TokenTextSplitter`` (tiktoken): the token windows of
  ``split_text_on_tokens`` (``chunk_size`` tokens, step ``chunk_size - chunk_overlap``);
  a window's span is the code points its tokens' bytes overlap, and its expected string
  is those bytes decoded with ``errors="replace"`` (tiktoken's ``decode``).
* chonkie ``TokenChunker``: the same windows over ``tokenizer.encode(text)``; spans from
  the tokenizer's offsets (code points for chonkie's character tokenizer, the offset
  mapping of a HuggingFace ``tokenizers.Tokenizer``, token byte lengths for tiktoken).
  Its expected strings are the library's own decode of each window (WordPiece decoding
  lower-cases and re-spaces text, so the source span is never decoded text).

All spans are half-open code-point offsets into the source, not yet trimmed of
whitespace (the adapters trim).
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Sequence

from harness.types import Span

#: A chunk the library is expected to emit: ``(string, raw source span)``.
Expected = tuple[str, Span]


# --------------------------------------------------------------------------- LangChain
def _same_method(obj: Any, base: type, names: Sequence[str]) -> bool:
    """True when ``type(obj)`` inherits every method of ``names`` from ``base`` unchanged."""
    cls = type(obj)
    return all(getattr(cls, n, None) is getattr(base, n, None) for n in names)


def langchain_expected(splitter: Any, text: str) -> list[Expected] | None:
    """Expected output of a LangChain splitter with the source span of every chunk.

    Args:
        splitter: a ``langchain_text_splitters.TextSplitter`` instance.
        text: the document.

    Returns:
        ``[(string, (start, end)), ...]`` in output order for the algorithms this module
        re-runs (see the module docstring), or None for any other splitter (including a
        subclass that overrides the splitting or merging methods) and when a string
        cannot be expressed as one source span (a regex separator whose groups make
        LangChain concatenate items that are not neighbours in the source).

    Raises:
        Nothing of its own; errors of the splitter's length function or tokenizer pass through.
    """
    try:
        return _langchain_expected(splitter, text)
    except _Untracked:
        return None


def _langchain_expected(splitter: Any, text: str) -> list[Expected] | None:
    from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter, TextSplitter, TokenTextSplitter

    merge_methods = ("_merge_splits", "_join_docs")
    if isinstance(splitter, RecursiveCharacterTextSplitter):
        if not (_same_method(splitter, RecursiveCharacterTextSplitter, ("split_text", "_split_text")) and _same_method(splitter, TextSplitter, merge_methods)):
            return None
        return _LangChainRun(splitter, text).recursive(0, len(text), list(splitter._separators))
    if isinstance(splitter, CharacterTextSplitter):
        if not (_same_method(splitter, CharacterTextSplitter, ("split_text",)) and _same_method(splitter, TextSplitter, merge_methods)):
            return None
        return _LangChainRun(splitter, text).character()
    if isinstance(splitter, TokenTextSplitter):
        if not _same_method(splitter, TokenTextSplitter, ("split_text",)):
            return None
        return _langchain_tokens(splitter, text)
    return None


class _Untracked(Exception):
    """The library's strings cannot be expressed as source spans (the caller falls back)."""


def _cat(a: Span | None, b: Span | None, alone: bool = False) -> Span:
    """Span of the concatenation of two adjacent items (``b`` ignored when ``alone``)."""
    if a is None or (b is None and not alone):
        raise _Untracked("a regex group that did not take part")
    if alone:
        return a
    if a[1] == a[0]:
        return b
    if b[1] == b[0]:
        return a
    if a[1] != b[0]:
        raise _Untracked("concatenated items are not adjacent in the source")
    return a[0], b[1]


class _LangChainRun:
    """One tracked run of LangChain's separator splitting and merging over ``text``."""

    def __init__(self, splitter: Any, text: str) -> None:
        self.sp = splitter
        self.text = text
        self.length = splitter._length_function
        self.size = splitter._chunk_size
        self.overlap = splitter._chunk_overlap
        self.keep = splitter._keep_separator
        self.strip = splitter._strip_whitespace
        self.regex = bool(getattr(splitter, "_is_separator_regex", False))

    def pieces(self, start: int, end: int, pattern: str) -> list[Span]:
        """Spans of ``_split_text_with_regex(text[start:end], pattern, keep_separator)``.

        ``re.split`` on the substring is reproduced item by item as spans (the text between
        matches and, when the pattern has groups, what each group captured): with
        ``keep_separator`` the pattern is wrapped in a group and LangChain pairs each match
        with the following piece (truthy, ``"start"``) or the preceding one (``"end"``) by
        list position, exactly as it does with strings; without it the items are the pieces.
        Empty items are removed, as LangChain does.

        Raises:
            _Untracked: a pair is not adjacent in the source or an item is None (a group
                that did not take part; LangChain itself fails on that).
        """
        if not pattern:
            return [(i, i + 1) for i in range(start, end)]
        sub = self.text[start:end]
        rx = re.compile(f"({pattern})" if self.keep else pattern)
        items: list[Span | None] = []
        prev = 0
        for m in rx.finditer(sub):
            items.append((prev + start, m.start() + start))
            for g in range(1, rx.groups + 1):
                items.append(None if m.start(g) < 0 else (m.start(g) + start, m.end(g) + start))
            prev = m.end()
        items.append((prev + start, end))
        if not self.keep:
            out = [it for it in items if it is not None]
        elif self.keep == "end":
            out = [_cat(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
            if len(items) % 2 == 0:
                out += [_cat(items[-1], None, alone=True)]
            out = [*out, _cat(items[-1], None, alone=True)]
        else:
            out = [_cat(items[i], items[i + 1]) for i in range(1, len(items), 2)]
            if len(items) % 2 == 0:
                out += [_cat(items[-1], None, alone=True)]
            out = [_cat(items[0], None, alone=True), *out]
        return [(s, e) for s, e in out if e > s]

    def _join(self, spans: list[Span], joiner: str) -> Expected | None:
        """LangChain's ``_join_docs``: the pieces joined by ``joiner``, stripped when
        ``strip_whitespace``; None when that is empty."""
        t = self.text
        doc = joiner.join(t[s:e] for s, e in spans)
        if self.strip:
            doc = doc.strip()
        if not doc:
            return None
        return doc, (spans[0][0], spans[-1][1])

    def merge(self, spans: list[Span], joiner: str) -> list[Expected]:
        """LangChain's ``_merge_splits`` over consecutive piece spans, with the same
        length function calls (on piece strings and on the joiner)."""
        t, length, size, overlap = self.text, self.length, self.size, self.overlap
        sep_len = length(joiner)
        out: list[Expected] = []
        current: list[Span] = []
        lens: list[int] = []
        total = 0
        for s, e in spans:
            n = length(t[s:e])
            if total + n + (sep_len if current else 0) > size:
                if current:
                    doc = self._join(current, joiner)
                    if doc is not None:
                        out.append(doc)
                    while total > overlap or (total + n + (sep_len if current else 0) > size and total > 0):
                        total -= lens[0] + (sep_len if len(current) > 1 else 0)
                        current, lens = current[1:], lens[1:]
            current.append((s, e))
            lens.append(n)
            total += n + (sep_len if len(current) > 1 else 0)
        if current:
            doc = self._join(current, joiner)
            if doc is not None:
                out.append(doc)
        return out

    def recursive(self, start: int, end: int, separators: list[str]) -> list[Expected]:
        """``RecursiveCharacterTextSplitter._split_text`` on ``text[start:end]``."""
        sub = self.text[start:end]
        separator, rest = separators[-1], []
        for i, s in enumerate(separators):
            pattern = s if self.regex else re.escape(s)
            if not s:
                separator = s
                break
            if re.search(pattern, sub):
                separator, rest = s, separators[i + 1 :]
                break
        pattern = separator if self.regex else re.escape(separator)
        pieces = self.pieces(start, end, pattern)
        joiner = "" if self.keep else separator
        out: list[Expected] = []
        good: list[Span] = []
        for s, e in pieces:
            if self.length(self.text[s:e]) < self.size:
                good.append((s, e))
                continue
            if good:
                out.extend(self.merge(good, joiner))
                good = []
            if not rest:
                out.append((self.text[s:e], (s, e)))  # emitted as is, not stripped
            else:
                out.extend(self.recursive(s, e, rest))
        if good:
            out.extend(self.merge(good, joiner))
        return out

    def character(self) -> list[Expected]:
        """``CharacterTextSplitter.split_text``: one split, then the merge."""
        sp = self.sp
        pattern = sp._separator if self.regex else re.escape(sp._separator)
        pieces = self.pieces(0, len(self.text), pattern)
        lookaround = self.regex and any(sp._separator.startswith(p) for p in ("(?=", "(?<!", "(?<=", "(?!"))
        joiner = "" if (self.keep or lookaround) else sp._separator
        return self.merge(pieces, joiner)


def _langchain_tokens(splitter: Any, text: str) -> list[Expected] | None:
    """``TokenTextSplitter.split_text`` windows with spans (tiktoken encodings only)."""
    enc = splitter._tokenizer
    if not hasattr(enc, "decode_single_token_bytes"):
        return None
    ids = list(enc.encode(text, allowed_special=splitter._allowed_special, disallowed_special=splitter._disallowed_special))
    starts = tiktoken_byte_starts(enc, ids)
    raw = text.encode("utf-8", "surrogatepass")
    if starts[-1] != len(raw):
        return None
    char_bytes = _char_byte_starts(text)
    size, overlap = splitter._chunk_size, splitter._chunk_overlap
    if size <= overlap:
        return None  # the library raises
    out: list[Expected] = []
    for a, b in token_windows(len(ids), size, overlap):
        decoded = raw[starts[a] : starts[b]].decode("utf-8", errors="replace")
        if decoded:
            out.append((decoded, bytes_to_chars(char_bytes, starts[a], starts[b])))
    return out


# --------------------------------------------------------------------------- tokens
def token_windows(n_tokens: int, size: int, overlap: int) -> list[Span]:
    """Token windows ``[a, b)`` of ``size`` tokens stepping ``size - overlap``, the last
    one ending at ``n_tokens`` (LangChain's ``split_text_on_tokens``, chonkie's
    ``TokenChunker``); empty for no tokens.

    Raises:
        ValueError: ``size <= overlap`` (no progress).
    """
    if size <= overlap:
        raise ValueError(f"token windows need chunk_size > chunk_overlap, got {size} <= {overlap}")
    out: list[Span] = []
    a = 0
    while a < n_tokens:
        b = min(a + size, n_tokens)
        out.append((a, b))
        if b == n_tokens:
            break
        a += size - overlap
    return out


def tiktoken_byte_starts(enc: Any, ids: Sequence[int]) -> list[int]:
    """UTF-8 byte offset of every token of ``ids`` plus the total (``len(ids) + 1`` entries)."""
    out = [0]
    memo: dict[int, int] = {}
    for t in ids:
        n = memo.get(t)
        if n is None:
            n = memo[t] = len(enc.decode_single_token_bytes(t))
        out.append(out[-1] + n)
    return out


def _char_byte_starts(text: str) -> list[int]:
    """UTF-8 byte offset of every code point of ``text`` plus the total length in bytes."""
    out = [0]
    for ch in text:
        o = ord(ch)
        out.append(out[-1] + (1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4))
    return out


def bytes_to_chars(char_bytes: list[int], b0: int, b1: int) -> Span:
    """Code points ``[s, e)`` whose UTF-8 bytes overlap bytes ``[b0, b1)`` (``b0 < b1``)."""
    s = bisect.bisect_right(char_bytes, b0) - 1
    e = bisect.bisect_left(char_bytes, b1)
    return s, e


def token_char_spans(kind: str, tokenizer: Any, text: str, ids: Sequence[int]) -> list[Span] | None:
    """Code-point span of every token of ``ids`` (the tokens of ``text``), or None when the
    tokenizer does not reproduce ``ids`` with offsets.

    Args:
        kind: ``"character"`` (one token per code point), ``"hf"`` (a HuggingFace
            ``tokenizers.Tokenizer``: its offset mapping, no special tokens) or
            ``"tiktoken"`` (a tiktoken ``Encoding``: token byte lengths).
        tokenizer: the tokenizer object (ignored for ``"character"``).
        text: the document.
        ids: the token ids the library obtained for ``text``.
    """
    if kind == "character":
        return [(i, i + 1) for i in range(len(text))] if len(ids) == len(text) else None
    if kind == "hf":
        enc = tokenizer.encode(text, add_special_tokens=False)
        if list(enc.ids) != list(ids):
            return None
        return [tuple(o) for o in enc.offsets]
    if kind == "tiktoken":
        starts = tiktoken_byte_starts(tokenizer, ids)
        if starts[-1] != len(text.encode("utf-8", "surrogatepass")):
            return None
        cb = _char_byte_starts(text)
        return [bytes_to_chars(cb, a, b) if b > a else (bisect.bisect_right(cb, a) - 1,) * 2 for a, b in zip(starts, starts[1:])]
    return None


def window_span(token_spans: list[Span], a: int, b: int) -> Span:
    """Span of tokens ``a .. b-1``: from the smallest start to the largest end."""
    window = token_spans[a:b]
    return min(s for s, _ in window), max(e for _, e in window)


# --------------------------------------------------------------------------- chonkie
def chonkie_recursive_expected(chunker: Any, kind: str, tokenizer: Any, text: str) -> list[Expected] | None:
    """Expected output of chonkie's ``RecursiveChunker`` with the source span of every chunk.

    The recursion of ``RecursiveChunker._recursive_chunk`` is re-run on source spans,
    calling the chunker's own ``_split_text``, ``_estimate_token_count`` and
    ``_merge_splits`` (delimiter and whitespace levels return pieces that concatenate to
    their input, so each has a known span). At a token level (no delimiters, no
    whitespace) chonkie decodes windows of ``chunk_size`` tokens; their spans come from
    the tokenizer's offsets (:func:`token_char_spans`), while chonkie's own
    ``start_index`` adds up decoded lengths and drifts for WordPiece.

    Args:
        chunker: a ``chonkie.RecursiveChunker`` (subclasses overriding its recursion are
            not handled).
        kind: how to read token offsets (see :func:`token_char_spans`).
        tokenizer: the tokenizer object given to chonkie.
        text: the document.

    Returns:
        ``[(chunk text, (start, end)), ...]`` in output order, or None when the chunker is
        not handled or a level's pieces do not concatenate to its input (the caller then
        verifies chonkie's own offsets or aligns).
    """
    from chonkie.chunker.recursive import RecursiveChunker

    names = ("chunk", "_recursive_chunk", "_split_text", "_merge_splits", "_make_chunks")
    if not isinstance(chunker, RecursiveChunker) or not _same_method(chunker, RecursiveChunker, names):
        return None
    rules = chunker.rules
    size = chunker.chunk_size
    out: list[Expected] = []

    def run(s: int, e: int, level: int) -> bool:
        sub = text[s:e]
        if not sub:
            return True
        if level >= len(rules) or rules[level] is None:
            out.append((sub, (s, e)))
            return True
        rule = rules[level]
        splits = list(chunker._split_text(sub, rule))
        if rule.delimiters is None and not rule.whitespace:  # token level: decoded windows
            ids = list(chunker.tokenizer.encode(sub))
            spans = token_char_spans(kind, tokenizer, sub, ids)
            windows = [(a, min(a + size, len(ids))) for a in range(0, len(ids), size)]
            if spans is None or len(windows) != len(splits):
                return False
            deeper = level + 1 < len(rules) and rules[level + 1] is not None
            for (a, b), piece in zip(windows, splits):
                if deeper and chunker._estimate_token_count(piece) > size:
                    return False  # chonkie would split the decoded text further: not tracked
                ws, we = window_span(spans, a, b)
                out.append((piece, (s + ws, s + we)))
            return True
        if "".join(splits) != sub:
            return False
        counts = [chunker._estimate_token_count(p) for p in splits]
        merged, merged_counts = chunker._merge_splits(splits, counts)
        if "".join(merged) != sub:
            return False
        pos = s
        for piece, count in zip(merged, merged_counts):
            if count > size:
                if not run(pos, pos + len(piece), level + 1):
                    return False
            else:
                out.append((piece, (pos, pos + len(piece))))
            pos += len(piece)
        return True

    return out if run(0, len(text), 0) else None
