"""Unicode normalisation forms: which form a string is in, and whether two strings differ
only by it.

``é`` may be stored precomposed (U+00E9, the form NFC produces) or decomposed (``e`` +
U+0301 COMBINING ACUTE ACCENT, the form NFD produces). The two are canonically equivalent:
the same text by Unicode's definition (Unicode Standard Annex #15, "Unicode Normalization
Forms"), but different code points, so different lengths and offsets. This project never
rewrites stored text (every span counts the stored code points); comparisons that should
not depend on the form fold both sides to NFC (the BM25 analyser,
:func:`harness.retrievers.bm25.bm25_tokenize`), and checks that must be exact say when a
mismatch is only one of form (:func:`normalisation_mismatch`).

NFC, not NFKC: NFKC also folds *compatibility* characters (``ﬁ`` -> ``fi``, ``²`` -> ``2``,
full-width letters), which changes what some texts say; NFC merges only strings that are
the same text.
"""

from __future__ import annotations

import unicodedata


def nfc(text: str) -> str:
    """``text`` in Normalization Form C (canonical composition); unchanged when already NFC."""
    return unicodedata.normalize("NFC", text)


def form_of(text: str) -> str:
    """The normalisation form ``text`` is stored in: ``"NFC"``, ``"NFD"``, or ``"mixed"``
    (some characters composed, some decomposed). A string both forms leave unchanged (plain
    ASCII, or no character with a decomposition) is ``"NFC"``."""
    if unicodedata.is_normalized("NFC", text):
        return "NFC"
    if unicodedata.is_normalized("NFD", text):
        return "NFD"
    return "mixed"


def normalisation_mismatch(stored: str, document: str, document_text: str | None = None) -> str | None:
    """Why an excerpt ``stored`` (labels) that differs from ``document`` (the document's
    text at its offsets) would match but for normalisation; None when form is not the cause.

    Args:
        stored: the labelled excerpt as stored.
        document: the document's text at the excerpt's offsets.
        document_text: the whole document, to tell offsets counted in another form (the
            excerpt occurs in the document only after folding both to NFC).

    Returns:
        A clause for a one-line error, naming both forms, e.g. ``"differs from the document
        only by Unicode normalisation (evidence NFC vs document NFD)"``, or None when the
        strings are equal or differ in more than their form.
    """
    if stored == document:
        return None
    if nfc(stored) == nfc(document):
        return f"differs from the document only by Unicode normalisation (evidence {form_of(stored)} vs document {form_of(document)})"
    if document_text is not None and stored not in document_text and nfc(stored) in nfc(document_text):
        return (
            f"occurs in the document only under Unicode normalisation (evidence {form_of(stored)} vs document {form_of(document_text)}), "
            "so its offsets were counted in another form"
        )
    return None
