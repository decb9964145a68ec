"""Sentence packing: whole sentences packed greedily up to a size limit, optional sentence overlap."""

from __future__ import annotations

from harness.chunkers.base import SizedChunker, check_count_below
from harness.text.packing import fit_units, group_spans, pack_units
from harness.text.sentences import sentence_spans
from harness.text.units import get_counter
from harness.types import Chunk, Document, Span


class SentenceChunker(SizedChunker):
    """Consecutive whole sentences packed into chunks of at most ``max_chunk_size`` units.

    Sentences come from :func:`harness.text.sentences.sentence_spans` (BlingFire, exact
    offsets) with ``split_paragraphs=True``, so a sentence never runs across a blank line
    (a heading is not glued to the paragraph below it); a chunk may still hold sentences
    from several paragraphs. A sentence larger than the limit (code, logs, tables without
    sentence punctuation) is cut at its line breaks, and a line still too large into
    word-aligned windows (:func:`harness.text.units.window_atoms`); those pieces are
    then packed like sentences. Each chunk is the single span from its first sentence's
    start to its last sentence's end (source whitespace between sentences kept) and is
    re-measured on that exact text. This is the sentence-splitter baseline of LlamaIndex's
    ``SentenceSplitter`` and chonkie's ``SentenceChunker``, here with exact spans.

    Overlap: each chunk after the first starts ``overlap_sentences`` sentences before the
    end of the previous chunk, fewer when the shared sentences and the next new sentence
    would not fit together; every chunk starts after the previous one's start and holds
    at least one sentence the previous one did not (see
    :func:`harness.text.packing.pack_units`). With ``overlap_sentences=0`` the chunks
    partition the document.

    Args:
        max_chunk_size: maximum chunk size in ``unit``, >= 1.
        overlap_sentences: sentences repeated at the start of the next chunk,
            ``0 <= overlap_sentences < max_chunk_size`` (an upper bound, reduced per chunk
            when they do not fit).
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``; used for
            ``unit="tokens"``.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "sentence"
    contiguous = True
    partitions = True

    def __init__(
        self,
        max_chunk_size: int = 254,
        overlap_sentences: int = 0,
        unit: str = "tokens",
        tokenizer: str = "model",
    ) -> None:
        self._init_size(max_chunk_size, unit, tokenizer)
        check_count_below("overlap_sentences", overlap_sentences, max_chunk_size, "max_chunk_size")
        self.overlap_sentences = overlap_sentences

    overlap_unit = "sentences"

    def overlap_limit(self) -> int:
        """``overlap_sentences``: consecutive chunks share at most that many whole sentences, fewer only
        when they do not fit with the next new sentence (0: no shared character); see
        :meth:`overlap_atoms` and :func:`harness.text.packing.pack_units`."""
        return self.overlap_sentences

    def overlap_atoms(self, text: str) -> list[Span]:
        """The units the overlap counts: the sentences of ``text`` as packed (over-limit ones cut to fit)."""
        return fit_units(text, sentence_spans(text, split_paragraphs=True), get_counter(self.unit, self.tokenizer), self.max_chunk_size)

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        counter = get_counter(self.unit, self.tokenizer)
        units = fit_units(text, sentence_spans(text, split_paragraphs=True), counter, self.max_chunk_size)
        groups = pack_units(text, units, counter, self.max_chunk_size, self.overlap_sentences)
        return self.finalize(
            doc, [Chunk.from_spans(doc, [span], metadata={"unit": self.unit, "n_sentences": j - i}) for (i, j), span in zip(groups, group_spans(units, groups))]
        )
