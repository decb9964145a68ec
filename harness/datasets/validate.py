"""Span checks shared by every loader: evidence in range and equal to the stored excerpt."""

from __future__ import annotations

import difflib
import re
import warnings
from typing import Any, Collection, Mapping

from harness.params import is_int
from harness.text.normalisation import normalisation_mismatch
from harness.types import Dataset


class DatasetError(ValueError):
    """A dataset file or record is invalid; the message names the dataset, file, query or span."""


def _shown(value: Any) -> str:
    """``float 6.7``, ``str '6'``, ``NoneType None``: a value with its JSON-decoded type."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def check_fields(record: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """Refuse a misspelt field of ``record``; warn once about any other field its format
    does not define.

    A misspelt field is otherwise ignored, and whatever it meant silently takes its default
    (a misspelt ``text`` switches the excerpt check off), so a field close to a known name
    (``txt``, ``docid``, ``Start``, ``query_idd``) is refused. Any other extra field
    (``source``, ``title``) is ignored with one warning per file and field name: it cannot
    change a number. Free-form facts belong under a ``metadata`` field where a format allows one.

    Args:
        record: one decoded JSON object.
        known: the field names the format defines.
        where: the record's place, e.g. ``"questions.jsonl:3"`` or ``"questions.jsonl:3: evidence[0]"``.

    Raises:
        DatasetError: ``"<where>: unknown field 'txt'; did you mean 'text'? (known: ...)"``
            for the first field close to a known name (difflib ratio >= 0.6, or equal to one
            up to case and ``-``/``_``).
    """
    for key in record:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            if not close:
                close = [k for k in sorted(known) if k.casefold() == str(key).casefold().replace("-", "_")][:1]
            if close:
                raise DatasetError(f"{where}: unknown field {key!r}; did you mean {close[0]!r}? (known: {', '.join(sorted(known))})")
            place = _FILE_OF.sub("", where.split(": ")[0])
            if (place, key) not in _EXTRA_FIELDS_WARNED:
                _EXTRA_FIELDS_WARNED.add((place, key))
                warnings.warn(
                    f"{where}: field {key!r} is not part of the format and is ignored (known: {', '.join(sorted(known))}; "
                    "free-form facts go under 'metadata'); warned once per file",
                    stacklevel=2,
                )


#: ``(file, field)`` pairs already warned about by :func:`check_fields` in this process.
_EXTRA_FIELDS_WARNED: set[tuple[str, str]] = set()
_FILE_OF = re.compile(r":\d+$")


def integer_field(record: Mapping[str, Any], key: str, where: str, unit: str = "code points") -> int:
    """``record[key]`` when it is a JSON integer, else a one-line refusal.

    Never coerces: ``6.7`` (or ``6.0``), ``true`` and ``"6"`` are refused rather than read
    as 6, 1 and 6, because a silently moved offset moves a span without any error.

    Raises:
        DatasetError: ``"<where>.<key> must be an integer (<unit>), got float 6.7"``; also
            when ``key`` is absent.
    """
    if key not in record:
        raise DatasetError(f"{where}: missing field {key!r} (an integer, {unit})")
    value = record[key]
    if not is_int(value):
        raise DatasetError(f"{where}.{key} must be an integer ({unit}), got {_shown(value)}")
    return value


def string_field(record: Mapping[str, Any], key: str, where: str, *, allow_int: bool = False) -> str:
    """``record[key]`` as a non-empty string (an integer id becomes its decimal string when
    ``allow_int``), else a one-line refusal naming ``where`` and the field.

    Raises:
        DatasetError: ``"<where>: field 'query' must be a string, got int 123"``.
    """
    value = record.get(key)
    if isinstance(value, str) and value.strip():
        return value
    if allow_int and is_int(value):
        return str(value)
    kind = "a non-empty string or an integer" if allow_int else "a string" if not isinstance(value, str) else "a non-empty string"
    raise DatasetError(f"{where}: field {key!r} must be {kind}, got {_shown(value)}")


def _utf16_units(text: str, i: int) -> int:
    return 2 if ord(text[i]) > 0xFFFF else 1


def _utf8_bytes(text: str, i: int) -> int:
    return len(text[i].encode("utf-8", "surrogatepass"))


def _lf_newlines(text: str, i: int) -> int:
    return 0 if text[i] == "\r" and text[i + 1 : i + 2] == "\n" else 1


#: Units label files are often counted in, in the order they are tried: name (as the error
#: says it) -> width of ``text[i]`` in that unit.
OFFSET_UNITS = {
    "counted in UTF-16 code units (an astral character such as an emoji counts twice there)": _utf16_units,
    "counted in UTF-8 bytes (a non-ASCII character counts 2-4 times there)": _utf8_bytes,
    "counted with newlines read as one character (\\r\\n as \\n, the file read with newline translation)": _lf_newlines,
}


def _code_point(text: str, offset: int, width) -> int | None:
    """The code-point index at which ``offset`` units of ``width`` have been counted, or None."""
    counted = 0
    for i in range(len(text)):
        if counted == offset:
            return i
        if counted > offset:
            return None
        counted += width(text, i)
    return len(text) if counted == offset else None


def offset_unit_hint(text: str, start: int, end: int | None, excerpt: str) -> tuple[str, int, int] | None:
    """Why ``text[start:end] != excerpt`` when the offsets were counted in another unit.

    Tries, in order, offsets counted in UTF-16 code units, in UTF-8 bytes, after reading
    ``\\r\\n`` as ``\\n`` (:data:`OFFSET_UNITS`), a 1-based start and an inclusive end; the
    first under which the span holds exactly ``excerpt`` is returned. Only called on an
    error path (linear in the text).

    Args:
        text: the document text (code points).
        start, end: the offsets as given; ``end`` None when only a start is given (SQuAD's
            ``answer_start``: the span is then ``len(excerpt)`` code points from it).
        excerpt: the stored excerpt they should select.

    Returns:
        ``(how the offsets were counted, start, end in code points)``, or None when no unit
        explains the mismatch.
    """
    if not excerpt or start < 0:
        return None
    for name, width in OFFSET_UNITS.items():
        s = _code_point(text, start, width)
        e = None if s is None else s + len(excerpt) if end is None else _code_point(text, end, width)
        if s is not None and e is not None and s != start and text[s:e] == excerpt:
            return name, s, e
    if start >= 1 and text[start - 1 : start - 1 + len(excerpt) if end is None else end] == excerpt:
        return "1-based (the start counts from 1)", start - 1, start - 1 + len(excerpt) if end is None else end
    if end is not None and text[start : end + 1] == excerpt:
        return "an inclusive end (the end is the last character, not one past it)", start, end + 1
    return None


def _hint(text: str, start: int, end: int, excerpt: str) -> str:
    found = offset_unit_hint(text, start, end, excerpt)
    if found is None:
        return ""
    how, s, e = found
    return f"; the offsets look {how}: the excerpt is at [{s}, {e}) in code points (Python str indices)"


def _warn_duplicate_texts(dataset: Dataset) -> int:
    """Warn once when documents repeat another's text under a different id; return how many.

    Both copies score alike, the tie rule ranks one first, and evidence labelled in the
    other is then missed for a reason unrelated to the chunking. Blank documents are not
    counted. The count is noted as ``info["duplicate_texts"]`` of the dataset's load report
    (when it has one).
    """
    first: dict[str, str] = {}
    repeats: list[tuple[str, str]] = []
    for doc in dataset.documents:
        if not doc.text.strip():
            continue
        earlier = first.setdefault(doc.text, doc.doc_id)
        if earlier != doc.doc_id:
            repeats.append((doc.doc_id, earlier))
    if repeats:
        report = getattr(dataset, "load_report", None)
        if report is not None:
            report.info["duplicate_texts"] = len(repeats)
        n = len(repeats)
        warnings.warn(
            f"dataset {dataset.name!r}: {n} document{' repeats' if n == 1 else 's repeat'} the text of another "
            f"(first: {repeats[0][0]!r} = {repeats[0][1]!r}); both copies score alike, so evidence labelled in one is "
            "missed whenever the tie rule ranks the other first: remove the copies or label both",
            UserWarning,
            stacklevel=3,
        )
    return len(repeats)


def check_dataset(dataset: Dataset) -> None:
    """Verify every document id is unique and every evidence span is valid.

    Checks that ids and texts are strings (a number where a string belongs is refused in
    one line, not met later as an ``AttributeError``), and, for each query and each evidence span: the document exists, ``0 <= start <
    end <= len(text)``, and ``text[start:end]`` equals the stored excerpt (when one is
    stored; an excerpt that differs only by Unicode normalisation, NFC vs NFD, is refused
    with a message that says so and names both forms; offsets counted in another unit,
    UTF-16 code units, UTF-8 bytes, ``\\r\\n`` read as one character, a 1-based start or an
    inclusive end, are refused naming the unit and the span meant, see :func:`offset_unit_hint`). Also rejects an empty corpus, an empty query list, duplicate query ids and
    queries without evidence (loaders exclude and count those before calling this, see
    :data:`harness.datasets.report.QUERIES_WITHOUT_EVIDENCE`; a dataset built in code
    must not hold any). Warns (once) when documents repeat another's text under another id,
    noting the count as ``load_report.info["duplicate_texts"]``.

    Raises:
        DatasetError: on the first problem, naming the dataset, query id, document and span.
    """
    name = dataset.name
    if not dataset.documents:
        raise DatasetError(f"dataset {name!r}: the corpus has no documents")
    if not dataset.queries:
        report = getattr(dataset, "load_report", None)
        excluded = report.count("queries_without_evidence") if report is not None else 0
        why = f" ({excluded} queries without evidence were excluded)" if excluded else ""
        raise DatasetError(f"dataset {name!r}: no labelled queries{why}")
    docs: dict[str, str] = {}
    for doc in dataset.documents:
        if not isinstance(doc.doc_id, str) or not isinstance(doc.text, str):
            raise DatasetError(f"dataset {name!r}: document {doc.doc_id!r}: doc_id and text must be strings, got {_shown(doc.text)} as text")
        if doc.doc_id in docs:
            raise DatasetError(f"dataset {name!r}: duplicate doc_id {doc.doc_id!r}")
        docs[doc.doc_id] = doc.text
    _warn_duplicate_texts(dataset)
    seen: set[str] = set()
    for q in dataset.queries:
        if not isinstance(q.query_id, str) or not q.query_id:
            raise DatasetError(f"dataset {name!r}: query id must be a non-empty string, got {_shown(q.query_id)}")
        if not isinstance(q.text, str):
            raise DatasetError(f"dataset {name!r}, query {q.query_id!r}: query text must be a string, got {_shown(q.text)}")
        if q.query_id in seen:
            raise DatasetError(f"dataset {name!r}: duplicate query_id {q.query_id!r}")
        seen.add(q.query_id)
        if not q.text.strip():
            raise DatasetError(f"dataset {name!r}, query {q.query_id!r}: empty query text")
        if not q.evidence:
            raise DatasetError(f"dataset {name!r}, query {q.query_id!r}: no evidence spans")
        for i, ev in enumerate(q.evidence):
            where = f"dataset {name!r}, query {q.query_id!r}, evidence #{i} [{ev.start}, {ev.end}) in {ev.doc_id!r}"
            if not isinstance(ev.text, str):
                raise DatasetError(f"{where}: the stored excerpt must be a string, got {_shown(ev.text)}")
            text = docs.get(ev.doc_id)
            if text is None:
                raise DatasetError(f"{where}: unknown doc_id (known: {sorted(docs)[:5]}...)")
            if ev.end > len(text):
                raise DatasetError(f"{where}: span ends beyond the document (length {len(text)}){_hint(text, ev.start, ev.end, ev.text)}")
            if ev.text and text[ev.start : ev.end] != ev.text:
                found = text[ev.start : ev.end]
                form = normalisation_mismatch(ev.text, found, text)
                if form is not None:
                    raise DatasetError(
                        f"{where}: the stored excerpt {ev.text[:60]!r} {form}; normalise the corpus and the labels to one form "
                        "(e.g. unicodedata.normalize('NFC', ...)) and count the offsets in it"
                    )
                raise DatasetError(
                    f"{where}: document text {found[:60]!r} does not equal the stored excerpt {ev.text[:60]!r}{_hint(text, ev.start, ev.end, ev.text)}"
                )
