"""Agentic chunking: a language model groups consecutive sentences into chunks.

The idea is the LLM-driven "agentic chunker" (G. Kamradt, "5 Levels of Text Splitting",
2024, after the proposition chunking of Chen et al. 2023, "Dense X Retrieval: What
Retrieval Granularity Should We Use?"): instead of a size rule or an embedding threshold, a
model reads the text and decides what belongs together. Kamradt's chunker groups
LLM-written *propositions*; rewritten text is not a span of the source, so this strategy
lets the model group the document's own *sentences* instead, and every chunk stays an exact
span.

How a document is chunked:

1. Sentences from :func:`harness.text.sentences.sentence_spans` (BlingFire, exact
   offsets, never across a blank line); a sentence over ``max_chunk_size`` is first cut at
   line breaks and word-aligned windows (:func:`harness.text.packing.fit_units`).
2. The sentences are taken in windows of ``window_sentences``. For each window with two or
   more sentences the LLM gets them numbered from 1, each with its size in ``unit``, and is
   asked for one line per chunk, ``FIRST-LAST`` (inclusive sentence numbers, e.g. ``1-3``).
3. The reply is mapped back to sentences (:func:`parse_groups`). Blank lines and Markdown
   code-fence lines are ignored and the ranges may come in any order, but a reply is
   **rejected** (counted per reason, never silently accepted) when it is ``unparseable``
   (a line that is not ``N`` or ``N-M``, or nothing at all), ``out_of_bounds`` (a number
   outside 1..n or a range whose end precedes its start), ``overlapping`` (a sentence in
   two ranges) or ``not_covering`` (a sentence in no range). An LLM error that is not a
   connection failure (HTTP 200 without a chat message) is rejected as
   ``invalid_response``. Connection failures are not hidden: they stop the run
   (:class:`harness.llm.LLMUnavailableError`, naming ``chunker.llm.base_url``).
4. A rejected window falls back to deterministic sentence packing
   (:func:`harness.text.packing.pack_units`: whole sentences packed greedily up to
   ``max_chunk_size``, as the ``sentence`` strategy without overlap), counted as a fallback.
5. An accepted group larger than ``max_chunk_size`` is split the same way (counted as
   ``agentic.oversize_groups_split``), so the size limit holds whatever the model says.

Chunks never cross a window boundary. Each chunk is one span from its first sentence's
start to its last sentence's end; together they partition the document's non-whitespace
text. Metadata: ``unit``, ``n_sentences``, ``grouped_by`` (``llm``, ``fallback``, or
``single`` for a window of one sentence, which needs no request).

Counters (:meth:`AgenticChunker.stats`, cumulative over the chunker's life): the LLM
client's (``llm.calls``, ``llm.cache_hits``, ``llm.server_requests``, ``llm.retries``, ...),
``llm.replies`` (replies judged), ``llm.rejected_replies`` and ``llm.rejected.<reason>``,
``agentic.windows``, ``agentic.llm_windows`` (windows sent to the LLM),
``agentic.fallback_windows`` and ``agentic.oversize_groups_split``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Iterable, Mapping

from harness.chunkers.base import SizedChunker, check_size
from harness.text.packing import fit_units, fits, pack_units
from harness.text.sentences import sentence_spans
from harness.text.units import SizeCounter, get_counter
from harness.types import Chunk, Document, Span

log = logging.getLogger(__name__)

#: Version of the prompt below; bump it whenever its wording changes.
PROMPT_VERSION = "agentic-v1"
#: Reasons a reply is rejected (``llm.rejected.<reason>``).
REJECT_REASONS = ("unparseable", "out_of_bounds", "overlapping", "not_covering", "invalid_response")

_SYSTEM = (
    "You split documents into chunks for a search index. The user sends the numbered sentences of one "
    "part of a document, each with its size in brackets. Group consecutive sentences that belong together "
    "(one topic, a heading with the text under it, a list with its introduction) into chunks of at most "
    "{limit} {unit} each.\n"
    "Reply with one line per chunk, in order, each line FIRST-LAST (sentence numbers, inclusive). The lines "
    "must cover every sentence from 1 to {n} exactly once. Write nothing else.\n"
    "Example reply for 6 sentences:\n1-2\n3-3\n4-6"
)
_RANGE = re.compile(r"^(\d+)(?:\s*[-\u2013]\s*(\d+))?$")
_WS = re.compile(r"\s+")


class ReplyRejected(ValueError):
    """A reply that cannot be mapped back to exact sentence spans; ``reason`` is one of
    :data:`REJECT_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_groups(reply: str, n: int) -> list[tuple[int, int]]:
    """Map a ``FIRST-LAST`` per line reply onto sentence groups.

    Args:
        reply: the model's reply text.
        n: number of sentences in the window (numbered 1..n in the prompt), >= 1.

    Returns:
        Half-open 0-based index ranges ``[(i, j), ...]`` sorted by ``i`` that partition
        ``range(n)`` (``"1-3\\n4-4"`` with ``n=4`` gives ``[(0, 3), (3, 4)]``).

    Raises:
        ReplyRejected: ``unparseable``, ``out_of_bounds``, ``overlapping`` or
            ``not_covering`` (see the module docstring), with the offending line or numbers.
    """
    ranges: list[tuple[int, int]] = []
    for raw in reply.splitlines():
        line = raw.strip()
        if not line or line.startswith("```"):
            continue
        m = _RANGE.match(line)
        if m is None:
            raise ReplyRejected("unparseable", f"line {line[:60]!r} is not FIRST-LAST")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if not 1 <= first <= last <= n:
            raise ReplyRejected("out_of_bounds", f"range {first}-{last} is not within 1-{n}")
        ranges.append((first - 1, last))
    if not ranges:
        raise ReplyRejected("unparseable", "no FIRST-LAST line in the reply")
    ranges.sort()
    expected = 0
    for i, j in ranges:
        if i < expected:
            raise ReplyRejected("overlapping", f"sentence {i + 1} is in two ranges")
        if i > expected:
            raise ReplyRejected("not_covering", f"sentence {expected + 1} is in no range")
        expected = j
    if expected != n:
        raise ReplyRejected("not_covering", f"sentences {expected + 1}-{n} are in no range")
    return ranges


class AgenticChunker(SizedChunker):
    """An LLM groups consecutive sentences into chunks; replies are verified, never trusted.

    See the module docstring for the procedure, the reply format, the rejection rules, the
    fallback and the counters.

    Args:
        llm: LLM settings (``conf/llm/default.yaml``: ``base_url``, ``model``,
            ``api_key_env``, ``temperature``, ``max_tokens``, ``seed``, ``timeout``,
            ``retries``, ``backoff``, ``backoff_max``, ``cache``); see
            :class:`harness.llm.LLMClient`.
        max_chunk_size: maximum chunk size in ``unit``, >= 1.
        unit: ``"chars"``, ``"words"`` or ``"tokens"``.
        tokenizer: ``"model"`` or ``"cl100k_base"`` (for ``unit="tokens"``).
        window_sentences: sentences per LLM request, >= 2; chunks never cross a window.
        preview_chars: each sentence is shown to the model whitespace-collapsed and cut to
            this many characters (plus an ellipsis), so prompts stay within small context
            windows; 0 shows whole sentences. Spans always come from the source text.
        cache_dir: the project cache folder for the on-disk reply cache (injected by the
            builder, not a config key); None keeps replies in memory only.

    Raises:
        ValueError: a parameter outside its range (the message names it).
        TypeError: an unknown ``chunker.llm.*`` key.
    """

    name = "agentic"
    contiguous = True
    partitions = True
    #: The builder passes the run's cache folder as ``cache_dir=`` (see harness/build.py).
    needs_cache_dir = True

    def __init__(
        self,
        llm: Mapping[str, Any] | None = None,
        max_chunk_size: int = 254,
        unit: str = "tokens",
        tokenizer: str = "model",
        window_sentences: int = 30,
        preview_chars: int = 200,
        cache_dir: str | None = None,
    ) -> None:
        from harness.llm import LLMClient, check_settings

        self._init_size(max_chunk_size, unit, tokenizer)
        check_size("window_sentences", window_sentences, minimum=2)
        check_size("preview_chars", preview_chars, minimum=0)
        settings = check_settings(llm if llm is not None else {}, "chunker.llm")
        self.llm = LLMClient(**settings, cache_dir=cache_dir, config_path="chunker.llm")
        self.window_sentences = window_sentences
        self.preview_chars = preview_chars
        self.counters: dict[str, int] = {
            "llm.replies": 0,
            "llm.rejected_replies": 0,
            **{f"llm.rejected.{r}": 0 for r in REJECT_REASONS},
            "agentic.windows": 0,
            "agentic.llm_windows": 0,
            "agentic.fallback_windows": 0,
            "agentic.oversize_groups_split": 0,
        }
        self.rejections: list[dict[str, Any]] = []

    # -- prompt ---------------------------------------------------------------------------
    def messages(self, text: str, units: list[Span], counter: SizeCounter) -> list[dict[str, str]]:
        """The chat messages asking the LLM to group ``units`` (sentences of ``text``).

        The system message states the rules and the size limit; the user message lists the
        sentences as ``[i] (size unit) sentence`` lines, i from 1.
        """
        lines = []
        for i, (s, e) in enumerate(units, start=1):
            shown = _WS.sub(" ", text[s:e]).strip()
            if self.preview_chars and len(shown) > self.preview_chars:
                shown = shown[: self.preview_chars].rstrip() + "\u2026"
            size = e - s if self.unit == "chars" else counter.count(text[s:e])
            lines.append(f"[{i}] ({size} {self.unit}) {shown}")
        system = _SYSTEM.format(limit=self.max_chunk_size, unit=self.unit, n=len(units))
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]

    # -- chunking -------------------------------------------------------------------------
    def _groups(self, doc: Document, text: str, window: list[Span], counter: SizeCounter, index: int) -> list[tuple[tuple[int, int], str]]:
        """Groups of one window as ``((i, j), grouped_by)``, i/j indices into ``window``."""
        from harness.llm import LLMRequestError, LLMResponseError

        self.counters["agentic.windows"] += 1
        if len(window) < 2:
            return [((0, len(window)), "single")] if window else []
        self.counters["agentic.llm_windows"] += 1
        try:
            reply = self.llm.chat(self.messages(text, window, counter))
            self.counters["llm.replies"] += 1
            groups = parse_groups(reply, len(window))
        except LLMRequestError as exc:
            raise LLMRequestError(f"{exc}; if the prompt exceeds the model's context, lower chunker.window_sentences or chunker.preview_chars") from None
        except (ReplyRejected, LLMResponseError) as exc:
            reason = exc.reason if isinstance(exc, ReplyRejected) else "invalid_response"
            self.counters["llm.rejected_replies"] += 1
            self.counters[f"llm.rejected.{reason}"] += 1
            self.counters["agentic.fallback_windows"] += 1
            if len(self.rejections) < 100:
                self.rejections.append({"doc_id": doc.doc_id, "window": index, "reason": reason, "detail": str(exc)[:200]})
            log.info("agentic: %s window %d: reply rejected (%s); sentence packing used", doc.doc_id, index, exc)
            return [(g, "fallback") for g in pack_units(text, window, counter, self.max_chunk_size)]
        out: list[tuple[tuple[int, int], str]] = []
        for i, j in groups:
            if fits(text, window[i][0], window[j - 1][1], counter, self.max_chunk_size):
                out.append(((i, j), "llm"))
                continue
            self.counters["agentic.oversize_groups_split"] += 1
            out += [((i + a, i + b), "llm") for a, b in pack_units(text, window[i:j], counter, self.max_chunk_size)]
        return out

    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunk one document (see the module docstring).

        Raises:
            harness.llm.LLMUnavailableError: the server did not answer (names chunker.llm.base_url).
            harness.llm.LLMRequestError: the server refused a request (e.g. a prompt longer
                than its context window: lower ``window_sentences`` or ``preview_chars``).
        """
        text = doc.text
        counter = get_counter(self.unit, self.tokenizer)
        units = fit_units(text, sentence_spans(text, split_paragraphs=True), counter, self.max_chunk_size)
        chunks: list[Chunk] = []
        for w, start in enumerate(range(0, len(units), self.window_sentences)):
            window = units[start : start + self.window_sentences]
            for (i, j), grouped_by in self._groups(doc, text, window, counter, w):
                span = (window[i][0], window[j - 1][1])
                chunks.append(Chunk.from_spans(doc, [span], metadata={"unit": self.unit, "n_sentences": j - i, "grouped_by": grouped_by}))
        return self.finalize(doc, chunks)

    def chunk_all(self, docs: Iterable[Document], progress: bool = False) -> list[Chunk]:
        """Chunk every document; warns with the rejection counts when any reply was rejected."""
        before = self.counters["llm.rejected_replies"], self.counters["agentic.llm_windows"]
        chunks = super().chunk_all(docs, progress=progress)
        rejected = self.counters["llm.rejected_replies"] - before[0]
        asked = self.counters["agentic.llm_windows"] - before[1]
        if rejected:
            reasons = ", ".join(f"{r}={self.counters[f'llm.rejected.{r}']}" for r in REJECT_REASONS if self.counters[f"llm.rejected.{r}"])
            log.warning("agentic: %d of %d LLM replies rejected (%s); those windows were split by sentence packing", rejected, asked, reasons)
        return chunks

    def stats(self) -> dict[str, float]:
        """Counters of the LLM client and of this chunker as ``{name: value}`` (floats)."""
        return {**self.llm.stats(), **{k: float(v) for k, v in self.counters.items()}}
