"""Chroma's metric conventions (``metrics.convention=chroma``): recall, precision, IoU and PrecisionΩ as chunking_evaluation computes them, logged beside ours.

Source: the ``chunking_evaluation`` package that accompanies Smith & Troynikov, "Evaluating
Chunking Strategies for Retrieval" (Chroma technical report, 2024). The definitions below
reproduce its arithmetic on character ranges; the code is this project's own. They are
computed *in addition to* this project's ``recall@k``, ``precision@k``, ``iou@k`` and
``precision_omega`` (:mod:`harness.evaluation.metrics.ranking`,
:func:`harness.evaluation.metrics.ir.precision_omega`), never instead of them, so numbers
can be set beside the published tables.

Ranges are ``(start, end)`` pairs of character offsets (Unicode code points). A query's
*references* are its evidence spans; a chunk is a document id and its ranges. Helpers:

* ``intersect(a, b) = (max(a.start, b.start), min(a.end, b.end))`` when ``lo <= hi``,
  else None. Closed: ranges that only touch intersect in a zero-length range, and that
  still counts as an intersection.
* ``union_ranges``: sort by start, merge a range into the last one when ``start <= last.end``.
* ``sum_of_ranges``: ``Σ (end - start)``.
* ``difference(ranges, t)``: removes ``t`` from each range (a range ``t`` lies strictly
  inside is split in two; one that only touches ``t`` is kept whole).

Retrieval metrics at cut-off ``k`` (``top`` = the first ``k`` returned units of the query,
in rank order, from the whole pooled index; fewer when fewer were returned):

* ``N_k`` = ``sum_of_ranges`` of the union of ``intersect(c, r)`` over every range ``c`` of a
  top-k unit and every reference ``r`` *of the same document* (units of other documents
  add nothing here);
* ``unused_k`` = the references with every such intersection removed (``difference``);
* ``chroma_recall@k = N_k / Σ_r |r|`` -- the references' lengths *summed* (overlapping
  references count twice);
* ``chroma_precision@k = N_k / Σ_{c in top} |c|`` -- the lengths of *all* top-k units
  summed: units of other documents count, overlapping or repeated units count twice;
* ``chroma_iou@k = N_k / (Σ_{c in top} |c| + sum_of_ranges(unused_k))``.

PrecisionΩ (no ``k``; depends on the chunking only), over every unit of the query's
document: ``chroma_precision_omega = N_Ω / sum_of_ranges(union_ranges(D ∪ unused_Ω))``,
``N_Ω`` as above over all those units, ``D`` the ranges of the units with at least one
intersection with a reference, ``unused_Ω`` the references minus every intersection.

How they differ from ours (``E`` the evidence, ``R_k`` the union of the top-k spans):

* denominators: ours are unions (``|R_k|``, ``|E|``, ``|E ∪ R_k|``), so an overlapping or
  repeated chunk is counted once; Chroma sums the chunk lengths (precision, IoU) and the
  reference lengths (recall), so overlapping chunk windows lower precision and IoU, and
  overlapping references lower recall below 1 even when all evidence is retrieved;
* intervals: ours are half-open, so a chunk that ends where the evidence starts does not
  overlap it; Chroma's are closed, so such a chunk intersects (in zero characters) -- it
  adds nothing to the numerator but enters ``D`` in PrecisionΩ;
* other documents: both conventions count a returned unit of another document in the
  precision and IoU denominators (it was retrieved, and it is no evidence for this
  question) and neither lets it into the numerator; there the two differ only through the
  summed-versus-union rule above.

Extensions of this project (Chroma's chunks are single ranges in one corpus per question):
a unit with several spans (non-contiguous strategies) contributes each span as one range,
and its length is the sum of its span lengths; a query whose evidence lies in several
documents matches each reference only with units of that reference's document, and the
sums run over all of its documents (one document: exactly Chroma's definition). For
small-to-big strategies the units are those our metrics score: the expanded ranked list
for the ``@k`` metrics, the returnable units for PrecisionΩ. Every division by zero gives
0.0.
"""

from __future__ import annotations

import difflib
from typing import Iterable, Mapping, Sequence

from harness.types import Chunk, Query

Range = tuple[int, int]

#: Allowed values of ``metrics.convention``: ``harness`` (ours only) or ``chroma`` (ours and Chroma's).
CONVENTIONS: tuple[str, ...] = ("harness", "chroma")

#: The ``source`` of the ``chroma_*`` registry families.
SOURCE = "chunking_evaluation (Smith & Troynikov, Chroma 2024) conventions"


def check_convention(value: object) -> None:
    """Validate ``metrics.convention``.

    Raises:
        ValueError: ``value`` is not one of :data:`CONVENTIONS`; one line naming
            ``metrics.convention``, the allowed values and the closest one when there is one.
    """
    if value not in CONVENTIONS:
        close = difflib.get_close_matches(str(value), CONVENTIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"metrics.convention must be one of {list(CONVENTIONS)}, got {value!r}{hint}")


def intersect(a: Range, b: Range) -> Range | None:
    """Closed intersection of two character ranges.

    Returns:
        ``(max(a[0], b[0]), min(a[1], b[1]))`` when ``lo <= hi`` -- a zero-length range
        when ``a`` and ``b`` only touch -- else None.
    """
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def union_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Merge character ranges: sorted by start, a range joins the previous one when
    ``start <= previous end`` (touching ranges merge; zero-length ranges are kept)."""
    out: list[list[int]] = []
    for s, e in sorted(ranges, key=lambda r: r[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def sum_of_ranges(ranges: Iterable[Range]) -> int:
    """Total length ``Σ (end - start)`` in characters (overlapping ranges count twice)."""
    return sum(e - s for s, e in ranges)


def difference(ranges: Sequence[Range], t: Range) -> list[Range]:
    """Each range of ``ranges`` with the closed range ``t`` removed.

    A range entirely before or after ``t`` (``end < t.start`` or ``start > t.end``) is kept;
    one that strictly contains ``t`` on both sides is split into ``(start, t.start)`` and
    ``(t.end, end)``; one that sticks out on one side keeps that side; one inside ``t`` is
    dropped. A range that only touches ``t`` keeps all its characters.
    """
    out: list[Range] = []
    ts, te = t
    for s, e in ranges:
        if e < ts or s > te:
            out.append((s, e))
        elif s < ts and e > te:
            out += [(s, ts), (te, e)]
        elif s < ts:
            out.append((s, ts))
        elif e > te:
            out.append((te, e))
    return out


def _references(query: Query) -> dict[str, list[Range]]:
    refs: dict[str, list[Range]] = {}
    for ev in query.evidence:
        refs.setdefault(ev.doc_id, []).append((ev.start, ev.end))
    return refs


def _match(chunk: Chunk, refs: list[Range], unused: list[Range], numerator: list[Range]) -> tuple[bool, list[Range], list[Range]]:
    """Intersect every span of ``chunk`` with every reference of its document; returns
    (any intersection, unused references, numerator ranges)."""
    hit = False
    for span in chunk.spans:
        for r in refs:
            i = intersect(span, r)
            if i is not None:
                hit = True
                unused = difference(unused, i)
                numerator = union_ranges([*numerator, i])
    return hit, unused, numerator


def retrieval_metrics(query: Query, ranked_chunks: Sequence[Chunk], ks: Sequence[int]) -> dict[str, float]:
    """Chroma's ``chroma_recall@k``, ``chroma_precision@k`` and ``chroma_iou@k`` of one query.

    Args:
        query: the labelled query; its evidence spans are the references (character ranges,
            half-open in our data, read as closed here as Chroma does).
        ranked_chunks: the returned units, best first (after ``chunker.expand``), from the
            whole pooled index; units of other documents count in the denominators.
        ks: cut-offs, each >= 1; fewer than ``k`` units: all of them are used.

    Returns:
        ``{"chroma_recall@5": ..., "chroma_precision@5": ..., "chroma_iou@5": ...}`` for each
        ``k``, each in [0, 1]; a zero denominator (nothing retrieved, no evidence) gives 0.0.
        Lengths are in characters; a unit's length is the sum of its span lengths.

    Source: chunking_evaluation (Smith & Troynikov, Chroma 2024); the formulas and the
    differences from ours are in the module docstring.
    """
    refs = _references(query)
    recall_denominator = sum(sum_of_ranges(r) for r in refs.values())
    out: dict[str, float] = {}
    for k in ks:
        top = ranked_chunks[:k]
        unused = {d: list(r) for d, r in refs.items()}
        numerator_sets: dict[str, list[Range]] = {d: [] for d in refs}
        for c in top:
            if c.doc_id not in refs:  # another document: no numerator, but its length counts below
                continue
            _, unused[c.doc_id], numerator_sets[c.doc_id] = _match(c, refs[c.doc_id], unused[c.doc_id], numerator_sets[c.doc_id])
        numerator = sum(sum_of_ranges(n) for n in numerator_sets.values())
        precision_denominator = sum(c.n_chars for c in top)
        iou_denominator = precision_denominator + sum(sum_of_ranges(u) for u in unused.values())
        out[f"chroma_recall@{k}"] = numerator / recall_denominator if recall_denominator else 0.0
        out[f"chroma_precision@{k}"] = numerator / precision_denominator if precision_denominator else 0.0
        out[f"chroma_iou@{k}"] = numerator / iou_denominator if iou_denominator else 0.0
    return out


def units_by_document(units: Iterable[Chunk]) -> dict[str, list[Chunk]]:
    """Units grouped by document id, duplicates (same ``chunk_id``) kept once, in first order;
    the argument :func:`precision_omega` expects."""
    out: dict[str, dict[str, Chunk]] = {}
    for u in units:
        out.setdefault(u.doc_id, {}).setdefault(u.chunk_id, u)
    return {d: list(cs.values()) for d, cs in out.items()}


def precision_omega(query: Query, units: Mapping[str, Sequence[Chunk]]) -> float:
    """Chroma's ``chroma_precision_omega`` of one query: ``N_Ω / |union(D ∪ unused)|``.

    Every unit of the query's evidence document(s) is matched with every reference (closed
    intervals, so a unit that only touches a reference is in ``D``). ``D`` holds all the
    spans of each unit with at least one intersection (the unit a retriever would return);
    ``unused`` is what of the references no unit intersects.

    Args:
        query: the labelled query (references = its evidence spans).
        units: the returnable units per document (:func:`units_by_document`): the chunks of
            a plain strategy, the parents or windows of small-to-big ones.

    Returns:
        A value in [0, 1] (characters over characters); 0.0 when the denominator is 0 (a
        query without evidence).

    Source: chunking_evaluation (Smith & Troynikov, Chroma 2024), PrecisionΩ; see the
    module docstring for the differences from :func:`harness.evaluation.metrics.ir.precision_omega`.
    """
    numerator = denominator = 0
    for doc_id, refs in _references(query).items():
        unused, numerator_sets, denom_chunks = list(refs), [], []
        lo, hi = min(s for s, _ in refs), max(e for _, e in refs)
        for c in units.get(doc_id, ()):
            if c.end < lo or c.start > hi:  # cannot intersect any reference (closed ranges)
                continue
            hit, unused, numerator_sets = _match(c, refs, unused, numerator_sets)
            if hit:
                denom_chunks = union_ranges([*denom_chunks, *c.spans])
        numerator += sum_of_ranges(numerator_sets)
        denominator += sum_of_ranges(union_ranges([*denom_chunks, *unused]))
    return numerator / denominator if denominator else 0.0
