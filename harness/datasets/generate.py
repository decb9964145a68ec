"""Labelled queries for any corpus, written by an LLM and verified as exact spans.

::

    harness generate dataset=<any dataset config> n=<count> [output=<folder>] [llm.base_url=...]

For ``n`` passages sampled with ``seed`` (uniformly, without replacement, among the
sentence-packed passages of ``passage_chars`` characters or fewer that hold at least
``min_passage_chars``), the LLM (an OpenAI-compatible server, :class:`harness.llm.LLMClient`)
is asked for one question the passage answers and a word-for-word excerpt of the passage
that answers it, as a JSON object ``{"question": ..., "excerpt": ...}``. Each reply is
judged; it is **rejected** and counted by reason when it is

* ``invalid_response``: HTTP 200 without a chat message;
* ``unparseable``: not a JSON object (a Markdown code fence around it is allowed) with
  non-empty string fields ``question`` and ``excerpt``;
* ``excerpt_too_short``: the excerpt has fewer than ``min_excerpt_chars`` non-space characters;
* ``excerpt_not_found`` / ``excerpt_ambiguous``: the excerpt does not occur in the passage's
  document, or occurs more than once (:func:`harness.datasets.locate.locate`: exact, then
  whitespace-normalised; the same rule the ``excerpts`` loader applies);
* ``duplicate_question``: a near-duplicate of an accepted question: the Jaccard similarity
  of their token sets (casefolded ``\\w+`` words) is at least ``dedup_threshold``.

Output (``output``, default ``outputs/generated/<dataset name>``): a dataset in the
``excerpts`` format that ``python -m harness.run dataset=excerpts dataset.path=<output>``
loads: ``corpus/<file>`` (every document's text, UTF-8, exactly as loaded; a doc id that is
not a plain ``.txt/.md/.markdown/.py/.log`` file name is stored as a sanitised ``<name>.txt``),
``excerpts.jsonl`` (one record per accepted question: ``query_id``, ``query``,
``excerpts`` (the located document slice), ``doc_id``, ``passage`` ``[start, end]`` and
``generator`` ``{model, prompt_version}``) and ``generation.json`` (generator model,
endpoint, prompt version, sampling settings, source dataset and fingerprint, counts, the
first rejections, renamed documents). The folder is written next to ``output`` and renamed
into place only after the ``excerpts`` loader has read it back with every span equal to the
one located here. An existing ``output`` is replaced only with ``overwrite=true`` and only
when it holds a ``generation.json`` (never a folder this command did not write).

Prints counts: asked, accepted, rejected by reason. Exit code 0 when at least one question
was accepted, 1 when none was (the counts are still written), 2 when it cannot run: a
configuration or dataset error, or an LLM server that does not answer or refuses requests
(:class:`harness.llm.LLMError`; the message names ``llm.base_url``).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.params import Param, check_all

#: Version of the prompt below; bump it whenever its wording changes.
PROMPT_VERSION = "generate-v1"
#: The numeric arguments of :func:`generate`, checked in this order (``min_passage_chars <=
#: passage_chars`` between the fourth and the fifth).
GENERATE_PARAMS = (
    Param("n", "int", low=1, desc="questions asked"),
    Param("seed", "int", desc="seed of the passage draw"),
    Param("passage_chars", "int", low=1, desc="longest passage, characters"),
    Param("min_passage_chars", "int", low=0, desc="shortest passage, characters"),
    Param("min_excerpt_chars", "int", low=1, desc="shortest evidence excerpt, characters"),
    Param("dedup_threshold", "number", low=0, high=1, low_open=True, desc="token-set Jaccard at or above which a question is a near duplicate"),
)
#: Reasons a reply is rejected (``rejected.<reason>`` in the counts).
REJECT_REASONS = (
    "invalid_response",
    "unparseable",
    "excerpt_too_short",
    "excerpt_not_found",
    "excerpt_ambiguous",
    "duplicate_question",
)
#: Suffixes kept as corpus file names (read as plain text by every corpus-folder reader).
PLAIN_SUFFIXES = (".txt", ".md", ".markdown", ".py", ".log")

_SYSTEM = (
    "You write test questions for a search engine. The user sends a passage from a document. Write one "
    "question that the passage answers, and copy the shortest excerpt of the passage (one or two sentences, "
    "word for word, unchanged) that answers it. Reply with a JSON object only, in this form:\n"
    '{"question": "...", "excerpt": "..."}'
)
_TOKEN = re.compile(r"\w+")
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class Rejected(ValueError):
    """A generated question that is not used; ``reason`` is one of :data:`REJECT_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def messages_for(doc_id: str, passage: str) -> list[dict[str, str]]:
    """Chat messages asking for one question and its supporting excerpt from ``passage``."""
    return [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": f"Document: {doc_id}\n\nPassage:\n{passage}"},
    ]


def parse_reply(reply: str) -> tuple[str, str]:
    """``(question, excerpt)`` from a JSON-object reply.

    Accepts the object alone or inside a Markdown code fence. Both fields are stripped.

    Raises:
        Rejected: ``unparseable`` (not JSON, not an object, or a field missing, not a
            string, or blank).
    """
    body = reply.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise Rejected("unparseable", f"not a JSON object ({exc.msg}): {reply[:80]!r}") from None
    if not isinstance(obj, dict):
        raise Rejected("unparseable", f"JSON {type(obj).__name__}, not an object")
    out = []
    for name in ("question", "excerpt"):
        value = obj.get(name)
        if not isinstance(value, str) or not value.strip():
            raise Rejected("unparseable", f"field {name!r} must be a non-empty string, got {value!r}"[:120])
        out.append(value.strip())
    return out[0], out[1]


def question_tokens(question: str) -> frozenset[str]:
    """Token set used for near-duplicate detection: casefolded ``\\w+`` words."""
    return frozenset(t.casefold() for t in _TOKEN.findall(question))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a ∩ b| / |a ∪ b|`` in [0, 1]; 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def passages(documents, passage_chars: int, min_passage_chars: int) -> list[tuple[Any, tuple[int, int]]]:
    """Candidate passages: whole sentences packed up to ``passage_chars`` characters.

    Sentences as in the ``sentence`` strategy (BlingFire, never across a blank line);
    passages shorter than ``min_passage_chars`` characters (a lone heading) are left out.

    Returns:
        ``[(document, (start, end)), ...]`` in document order.
    """
    from harness.text.packing import fit_units, group_spans, pack_units
    from harness.text.sentences import sentence_spans
    from harness.text.units import CharCounter

    counter = CharCounter()
    out = []
    for doc in documents:
        units = fit_units(doc.text, sentence_spans(doc.text, split_paragraphs=True), counter, passage_chars)
        for s, e in group_spans(units, pack_units(doc.text, units, counter, passage_chars)):
            if e - s >= min_passage_chars:
                out.append((doc, (s, e)))
    return out


@dataclass
class Generation:
    """Result of :func:`generate`.

    Attributes:
        records: accepted questions as excerpt-JSONL records (``doc_id`` is the source id).
        counts: ``asked``, ``accepted``, ``rejected`` and ``rejected.<reason>`` for every
            reason; ``asked == accepted + rejected``.
        rejections: the first 50 rejections ``{doc_id, passage, reason, detail}``.
        n_passages: candidate passages sampled from.
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    n_passages: int = 0


def generate(
    documents,
    client,
    n: int,
    seed: int = 0,
    passage_chars: int = 1000,
    min_passage_chars: int = 200,
    min_excerpt_chars: int = 10,
    dedup_threshold: float = 0.8,
) -> Generation:
    """Ask ``client`` for one question per sampled passage and keep the verified ones.

    Args:
        documents: the corpus (:class:`harness.types.Document`).
        client: a :class:`harness.llm.LLMClient`.
        n: passages to ask about, >= 1 (fewer when the corpus has fewer passages).
        seed: seed of the passage sample (``random.Random(seed).sample``).
        passage_chars: longest passage in characters, >= 1.
        min_passage_chars: shortest passage in characters, 0 <= value <= ``passage_chars``.
        min_excerpt_chars: fewest non-space characters in an excerpt, >= 1.
        dedup_threshold: token-set Jaccard at or above which a question is a near
            duplicate of an accepted one, in (0, 1].

    Returns:
        A :class:`Generation`; records are in sample order.

    Raises:
        ValueError: a parameter outside its range (named).
        harness.llm.LLMUnavailableError: the server did not answer.
    """
    from harness.datasets.locate import NormalisedText, locate
    from harness.llm import LLMResponseError

    values = {"n": n, "seed": seed, "passage_chars": passage_chars, "min_passage_chars": min_passage_chars}
    check_all(GENERATE_PARAMS[:4], values)
    if min_passage_chars > passage_chars:
        raise ValueError(f"min_passage_chars must be <= passage_chars ({passage_chars}), got {min_passage_chars}")
    check_all(GENERATE_PARAMS[4:], {"min_excerpt_chars": min_excerpt_chars, "dedup_threshold": dedup_threshold})
    pool = passages(documents, passage_chars, min_passage_chars)
    picked = random.Random(seed).sample(pool, min(n, len(pool)))
    result = Generation(n_passages=len(pool))
    counts = {"asked": 0, "accepted": 0, "rejected": 0, **{f"rejected.{r}": 0 for r in REJECT_REASONS}}
    accepted_tokens: list[frozenset[str]] = []
    normalised: dict[str, NormalisedText] = {}
    for doc, (ps, pe) in picked:
        counts["asked"] += 1
        try:
            try:
                reply = client.chat(messages_for(doc.doc_id, doc.text[ps:pe]))
            except LLMResponseError as exc:
                raise Rejected("invalid_response", str(exc)) from None
            question, excerpt = parse_reply(reply)
            if len("".join(excerpt.split())) < min_excerpt_chars:
                raise Rejected("excerpt_too_short", f"{excerpt!r} has fewer than {min_excerpt_chars} non-space characters")
            norm = normalised.setdefault(doc.doc_id, NormalisedText(doc.text))
            found = locate(doc.text, excerpt, norm)
            preview = excerpt if len(excerpt) <= 60 else excerpt[:57] + "..."
            if not found:
                raise Rejected("excerpt_not_found", f"{preview!r} is not in {doc.doc_id}")
            if len(found) > 1:
                raise Rejected("excerpt_ambiguous", f"{preview!r} occurs {len(found)} times in {doc.doc_id}")
            tokens = question_tokens(question)
            for other in accepted_tokens:
                if jaccard(tokens, other) >= dedup_threshold:
                    raise Rejected("duplicate_question", f"{question[:80]!r} (Jaccard >= {dedup_threshold})")
        except Rejected as exc:
            counts["rejected"] += 1
            counts[f"rejected.{exc.reason}"] += 1
            if len(result.rejections) < 50:
                result.rejections.append({"doc_id": doc.doc_id, "passage": [ps, pe], "reason": exc.reason, "detail": str(exc)[:300]})
            continue
        m = found[0]
        accepted_tokens.append(tokens)
        counts["accepted"] += 1
        result.records.append(
            {
                "query_id": f"gen-{counts['accepted']:04d}",
                "query": question,
                "excerpts": [doc.text[m.start : m.end]],
                "doc_id": doc.doc_id,
                "passage": [ps, pe],
                "span": [m.start, m.end],
                "generator": {"model": client.model, "prompt_version": PROMPT_VERSION},
            }
        )
    result.counts = counts
    return result


def corpus_file_names(doc_ids: list[str]) -> dict[str, str]:
    """File name under ``corpus/`` for each doc id (doc id -> file name), all distinct.

    A doc id that is a plain file name (no path separator, not hidden, suffix in
    :data:`PLAIN_SUFFIXES`) is kept; any other becomes its characters outside
    ``[A-Za-z0-9._-]`` replaced by ``_``, leading dots removed, plus ``.txt`` (and
    ``-2``, ``-3`` ... before the suffix if that name is taken).
    """
    out: dict[str, str] = {}
    taken: set[str] = set()
    keep = [d for d in doc_ids if _plain_name(d)]
    taken.update(keep)
    for d in doc_ids:
        if _plain_name(d):
            out[d] = d
            continue
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", d).lstrip(".") or "document"
        name, k = f"{stem}.txt", 1
        while name in taken:
            k += 1
            name = f"{stem}-{k}.txt"
        taken.add(name)
        out[d] = name
    return out


def _plain_name(doc_id: str) -> bool:
    return (
        bool(doc_id)
        and "/" not in doc_id
        and "\\" not in doc_id
        and "\0" not in doc_id
        and not doc_id.startswith(".")
        and os.path.splitext(doc_id)[1].lower() in PLAIN_SUFFIXES
    )


def write_dataset(output: Path, documents, generation: Generation, info: dict[str, Any], overwrite: bool = False) -> Path:
    """Write the generated dataset to ``output`` (see the module docstring) and return it.

    The files are written to a temporary folder beside ``output``; when at least one
    question was accepted the ``excerpts`` loader reads them back and every query must
    carry exactly the evidence span located by :func:`generate`; then the folder is renamed
    to ``output``.

    Raises:
        FileExistsError: ``output`` exists and ``overwrite`` is false, or it exists but
            holds no ``generation.json`` (not written by this command).
        RuntimeError: the written dataset does not read back as generated (a bug).
    """
    output = Path(output).resolve()
    if output.exists():
        if not overwrite:
            raise FileExistsError(f"output={output} exists; choose another output or set overwrite=true")
        if not (output / "generation.json").is_file():
            raise FileExistsError(f"output={output} exists and holds no generation.json; refusing to replace a folder this command did not write")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        names = corpus_file_names([d.doc_id for d in documents])
        (tmp / "corpus").mkdir()
        for doc in documents:
            with open(tmp / "corpus" / names[doc.doc_id], "w", encoding="utf-8", newline="") as fh:
                fh.write(doc.text)
        lines = []
        for rec in generation.records:
            lines.append(json.dumps({**rec, "doc_id": names[rec["doc_id"]]}, ensure_ascii=False))
        (tmp / "excerpts.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        renamed = {name: d for d, name in names.items() if name != d}
        meta = {**info, "counts": generation.counts, "n_passages": generation.n_passages, "rejections": generation.rejections, "renamed_documents": renamed}
        (tmp / "generation.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if generation.records:
            _verify(tmp, documents, names, generation)
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output


def _verify(folder: Path, documents, names: dict[str, str], generation: Generation) -> None:
    from harness.datasets.excerpts import read_excerpts

    dataset, _ = read_excerpts(folder, name=folder.name)
    texts = {d.doc_id: d.text for d in dataset.documents}
    for doc in documents:
        if texts.get(names[doc.doc_id]) != doc.text:
            raise RuntimeError(f"generated corpus file {names[doc.doc_id]!r} does not read back as document {doc.doc_id!r}")
    got = {q.query_id: q for q in dataset.queries}
    for rec in generation.records:
        q = got.get(rec["query_id"])
        spans = [(e.doc_id, e.start, e.end) for e in q.evidence] if q else None
        if spans != [(names[rec["doc_id"]], *rec["span"])]:
            raise RuntimeError(f"generated query {rec['query_id']} reads back with evidence {spans}, expected {rec['span']}")


def report(generation: Generation, output: Path) -> str:
    """Human-readable counts: asked, accepted, rejected by reason, and where the dataset is."""
    c = generation.counts
    lines = [f"asked {c['asked']} (of {generation.n_passages} passages), accepted {c['accepted']}, rejected {c['rejected']}"]
    lines += [f"  rejected {r}: {c[f'rejected.{r}']}" for r in REJECT_REASONS if c[f"rejected.{r}"]]
    lines.append(f"written to {output}")
    if c["accepted"]:
        lines.append(f"score it: python -m harness.run dataset=excerpts dataset.path={output}")
    else:
        lines.append("no question was accepted (see rejections in generation.json)")
    return "\n".join(lines)
