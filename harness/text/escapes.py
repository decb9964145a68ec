r"""Escape sequences in the literal-string settings of a chunker config.

On the command line a shell passes ``chunker.separators='["\n\n","\n"," ",""]'`` to Hydra
with the two characters backslash and ``n``, and Hydra's override grammar keeps them (its
quoted strings only unescape quotes); a YAML file in single quotes does the same. A
separator list of literal ``\n`` texts is never found in a document, so the chunker falls
back to its next separator and silently chunks differently. :func:`decode_literal_settings`
therefore decodes, once, in the chunker config as composed:

==========  ============================
typed       decoded to
==========  ============================
``\n``      line feed (U+000A)
``\r``      carriage return (U+000D)
``\t``      tab (U+0009)
``\\``      one backslash
==========  ============================

Any other backslash sequence in such a setting (``\s``, ``\d``, ``\x41``, a lone trailing
backslash) raises :class:`ValueError` naming the setting: these settings are literal
strings, not regexes, and keeping ``\s`` as two characters would be the same silent
mismatch. Write ``\\`` for a literal backslash (Hydra keeps ``\\`` inside a quoted
override: ``'["\\section"]'`` is the separator ``\section``).

Decoded settings, at any depth of the chunker config (library ``kwargs``, the routes of
``adaptive``, the ``text_chunker`` of ``modality``, chonkie's ``rules`` levels): the keys in
:data:`LITERAL_KEYS` when their value is a string or a list of strings --

* ``separators``: ``recursive`` (:class:`harness.chunkers.recursive.RecursiveChunker`),
  LangChain ``RecursiveCharacterTextSplitter`` and its language variants;
* ``separator``: LangChain ``CharacterTextSplitter``, ``NLTKTextSplitter``,
  ``SpacyTextSplitter`` (the string placed between sentences);
* ``delim``: chonkie ``SentenceChunker`` / ``SemanticChunker`` sentence delimiters;
* ``delimiters`` / ``delimiter``: chonkie ``FastChunker`` and ``RecursiveLevel`` delimiters.

Never decoded (regexes, where Python's :mod:`re` reads ``\n``, ``\t`` and ``\d`` itself, so
the typed spelling already means what it says and decoding ``\\`` would change the
pattern): ``timestamp_regex`` (``timestamp``), ``markers`` (``hierarchical``), chonkie's
``pattern``, and ``separator`` / ``separators`` in a mapping whose ``is_separator_regex``
is true (LangChain). Values with real newlines (every shipped YAML file) contain no
backslash and are returned unchanged, so their config hash does not change.

Decoding is not idempotent (``\\n`` -> ``\n`` -> newline): it is applied to the config as
composed, never to a decoded one. :mod:`harness.experiment.build` decodes a copy wherever it reads
the chunker config (the config hash, the chunk-cache key, the constructor arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The escapes decoded in literal-string settings: the character after the backslash -> text.
ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}

#: Keys (at any depth of a chunker config) whose string or list-of-strings value is literal text.
LITERAL_KEYS = frozenset({"separators", "separator", "delim", "delimiter", "delimiters"})

#: A mapping with this key set true holds regexes in ``separator`` / ``separators`` (LangChain).
REGEX_FLAG = "is_separator_regex"

_REGEX_FLAGGED = frozenset({"separator", "separators"})


def decode_escapes(text: str, where: str) -> str:
    r"""``text`` with ``\n``, ``\r``, ``\t`` and ``\\`` decoded (see :data:`ESCAPES`).

    Args:
        text: a literal string as typed (code points; a backslash starts an escape).
        where: the setting's dotted name for error messages, e.g. ``"chunker.separators[1]"``.

    Returns:
        The decoded string (``text`` itself when it holds no backslash).

    Raises:
        ValueError: a backslash followed by another character, or a lone trailing
            backslash; the message names ``where``, the sequence and the spelling to use.
    """
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if not nxt:
            raise ValueError(
                f"{where}: ends in a lone backslash; only \\n \\r \\t and \\\\ are decoded in this literal-string setting, write \\\\ for a backslash"
            )
        if nxt not in ESCAPES:
            raise ValueError(
                f"{where}: unknown escape '\\{nxt}' at character {i}; this setting is a literal string, "
                f"not a regex, and only \\n \\r \\t and \\\\ are decoded: write '\\\\{nxt}' for a "
                f"backslash followed by '{nxt}'"
            )
        out.append(ESCAPES[nxt])
        i += 2
    return "".join(out)


def _decode_value(value: Any, where: str) -> Any:
    if isinstance(value, str):
        return decode_escapes(value, where)
    if isinstance(value, (list, tuple)):
        return [decode_escapes(v, f"{where}[{i}]") if isinstance(v, str) else v for i, v in enumerate(value)]
    return value


def decode_literal_settings(node: Any, where: str = "chunker") -> Any:
    r"""A copy of a plain config tree with the escapes of its literal-string settings decoded.

    Args:
        node: a resolved chunker config as plain ``dict`` / ``list`` / scalars
            (``OmegaConf.to_container(cfg.chunker, resolve=True)``).
        where: the dotted name of ``node`` for error messages (``"chunker"``).

    Returns:
        A new tree of dicts and lists (scalars shared) in which every setting named in
        :data:`LITERAL_KEYS` -- except regex-flagged ones, see the module docstring -- has
        its escapes decoded; equal to ``node`` when no such setting holds a backslash.

    Raises:
        ValueError: an unknown escape in a literal-string setting (see :func:`decode_escapes`).
    """
    if isinstance(node, Mapping):
        regex = bool(node.get(REGEX_FLAG))
        out = {}
        for key, value in node.items():
            path = f"{where}.{key}"
            if key in LITERAL_KEYS and not (regex and key in _REGEX_FLAGGED):
                out[key] = _decode_value(value, path)
            else:
                out[key] = decode_literal_settings(value, path)
        return out
    if isinstance(node, (list, tuple)):
        return [decode_literal_settings(v, f"{where}[{i}]") for i, v in enumerate(node)]
    return node
