"""Paragraph packing: blank-line-separated paragraphs packed whole up to a size limit."""

from __future__ import annotations

from harness.chunkers.base import SizedChunker, check_count_below
from harness.text.packing import fit_units, fits, group_spans, pack_units
from harness.text.sentences import paragraph_spans, sentence_spans
from harness.text.units import get_counter
from harness.types import Chunk, Document, Span


class ParagraphChunker(SizedChunker):
    """Consecutive whole paragraphs packed into chunks of at most ``max_chunk_size`` units.

    Paragraphs are the blocks between blank lines
    (:func:`harness.text.sentences.paragraph_spans`: ``\\n\\s*\\n``, so Windows
    ``\\r\\n\\r\\n`` breaks count). Runs of paragraphs that fit are packed greedily; each
    chunk is the single span from its first paragraph's start to its last paragraph's end
    (the blank lines between them kept) and is re-measured on that exact text. A paragraph
    larger than the limit is chunked on its own: its sentences (BlingFire) are packed
    without overlap, a sentence still too large being cut at line breaks and then into
    word-aligned windows. Packing never mixes a piece of an oversized paragraph with
    another paragraph, so every chunk boundary falls on a paragraph boundary except
    inside oversized paragraphs. This is the paragraph level of LangChain's
    ``RecursiveCharacterTextSplitter`` hierarchy and of LlamaIndex's
    ``SentenceSplitter`` (paragraph separator first), made a strategy of its own.

    Overlap: within a run of fitting paragraphs, each chunk after the first starts
    ``overlap_paragraphs`` paragraphs before the end of the previous one, fewer when they
    would not fit with the next new paragraph (every chunk adds new text; see
    :func:`harness.text.packing.pack_units`). No overlap is carried across an
    oversized paragraph.

    Args:
        max_chunk_size: maximum chunk size in ``unit``, >= 1.
        overlap_paragraphs: paragraphs repeated at the start of the next chunk,
            ``0 <= overlap_paragraphs < max_chunk_size`` (an upper bound).
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` (embedding model's WordPiece) or ``"cl100k_base"``; used for
            ``unit="tokens"``.

    Raises:
        ValueError: a parameter outside its range (the message names it).
    """

    name = "paragraph"
    contiguous = True
    partitions = True

    def __init__(
        self,
        max_chunk_size: int = 254,
        overlap_paragraphs: int = 0,
        unit: str = "tokens",
        tokenizer: str = "model",
    ) -> None:
        self._init_size(max_chunk_size, unit, tokenizer)
        check_count_below("overlap_paragraphs", overlap_paragraphs, max_chunk_size, "max_chunk_size")
        self.overlap_paragraphs = overlap_paragraphs

    overlap_unit = "paragraphs"

    def overlap_limit(self) -> int:
        """``overlap_paragraphs``: consecutive chunks share at most that many whole paragraphs, fewer only
        when they do not fit with the next new paragraph, none next to an oversized paragraph (0: no
        shared character); see :meth:`overlap_atoms` and :func:`harness.text.packing.pack_units`."""
        return self.overlap_paragraphs

    def overlap_atoms(self, text: str) -> list[Span]:
        """The units the overlap counts: the paragraphs of ``text`` (:func:`harness.text.sentences.paragraph_spans`)."""
        return list(paragraph_spans(text))

    def chunk(self, doc: Document) -> list[Chunk]:
        text = doc.text
        counter = get_counter(self.unit, self.tokenizer)
        size = self.max_chunk_size
        out: list[Chunk] = []
        run: list[Span] = []

        def flush() -> None:
            groups = pack_units(text, run, counter, size, self.overlap_paragraphs)
            for (i, j), span in zip(groups, group_spans(run, groups)):
                out.append(Chunk.from_spans(doc, [span], metadata={"unit": self.unit, "n_paragraphs": j - i}))
            run.clear()

        for ps, pe in paragraph_spans(text):
            if fits(text, ps, pe, counter, size):
                run.append((ps, pe))
                continue
            flush()
            units = fit_units(text, sentence_spans(text, ps, pe), counter, size)
            groups = pack_units(text, units, counter, size, 0)
            for (i, j), span in zip(groups, group_spans(units, groups)):
                meta = {"unit": self.unit, "n_sentences": j - i, "split_paragraph": True}
                out.append(Chunk.from_spans(doc, [span], metadata=meta))
        flush()
        return self.finalize(doc, out)
