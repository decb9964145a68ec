"""Settings honoured, for every ``conf/chunker/*.yaml``: built with small sizes so that
generated documents take every path (separator merges, hard cuts, last chunks), each
chunking keeps every promise the chunker declares (:func:`harness.chunkers.base.check_chunks`:
exact spans, sizes in the configured unit, the overlap setting between consecutive chunks,
coverage, a minimum size, overlap in sentences / paragraphs, rows per table chunk, the time
rule of chat groups). Documents: one long word without separators, only separators, CRLF
lines, CJK without spaces, emoji (astral code points, ZWJ sequences, flags, combining marks),
mixed, pipe tables, chat logs.

Where the windows are known by hand (a text with no whitespace and no separator, in
characters) the chunks must be exactly those windows: starts ``0, step, 2 * step, ...``
with ``step = chunk_size - chunk_overlap``.
"""

from __future__ import annotations

import pytest
from conftest import PROJECT_ROOT, compose, windows
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness.chunkers.base import check_chunks
from harness.experiment import build
from harness.types import Document

CONFIGS = sorted(p.stem for p in (PROJECT_ROOT / "conf" / "chunker").glob("*.yaml"))
#: Needs an LLM server: its contract runs against local servers in tests/chunkers/test_agentic.py.
NEEDS_SERVICE = {"agentic"}
#: Embed every sentence while splitting: fewer examples.
EMBEDS = {"semantic", "cluster_semantic", "topic"}
UNITS = ("chars", "words", "tokens")
#: No shrinking phase: a failure is reported as drawn (shrinking a chunking can take minutes).
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
#: Smallest size drawn per unit: small enough that the generated documents need hard cuts.
SIZES = {"chars": (9, 24), "words": (3, 6), "tokens": (6, 14)}


#: Separators without the final "": a piece none of them splits small enough is hard-cut.
NO_ANY_POSITION = '["\\n\\n","\\n"," "]'


def overrides(name: str, unit: str, size: int, overlap: int, hard: bool = False) -> list[str]:
    """Hydra overrides that make config ``name`` small (``size`` units of ``unit``, ``overlap``
    where the strategy has an overlap setting; ``hard``: recursive splitting without the
    ``""`` separator, so long words take the hard-cut path); other settings stay as shipped."""
    c = "chunker."
    if name == "fixed":
        return [f"{c}chunk_size={size}", f"{c}chunk_overlap={overlap}", f"{c}unit={unit}"]
    if name == "recursive":
        return [f"{c}chunk_size={size}", f"{c}chunk_overlap={overlap}", f"{c}unit={unit}"] + ([f"{c}separators={NO_ANY_POSITION}"] if hard else [])
    if name == "sentence":
        return [f"{c}max_chunk_size={size}", f"{c}overlap_sentences={min(overlap, 2)}", f"{c}unit={unit}"]
    if name == "paragraph":
        return [f"{c}max_chunk_size={size}", f"{c}overlap_paragraphs={min(overlap, 2)}", f"{c}unit={unit}"]
    if name == "hierarchical":
        return [f"{c}parent_size={3 * size}", f"{c}child_size={size}", f"{c}child_overlap={overlap}", f"{c}unit={unit}"]
    if name == "table":  # few rows per chunk, so that generated tables need several groups
        return [f"{c}max_chunk_size={size}", f"{c}unit={unit}", f"{c}rows_per_chunk={1 + size % 2}"]
    if name == "timestamp":  # both modes; short windows and gaps (in minutes) for the generated logs
        mode = ["mode=window", "window_minutes=20"] if size % 2 else ["mode=session", "gap_minutes=15"]
        return [f"{c}max_chunk_size={size}", f"{c}unit={unit}"] + [c + m for m in mode]
    if name in ("code", "faq", "markdown"):
        return [f"{c}max_chunk_size={size}", f"{c}unit={unit}"]
    if name == "modality":
        t = f"{c}text_chunker."
        return [f"{t}chunk_size={size}", f"{t}chunk_overlap={overlap}", f"{t}unit={unit}"] + ([f"+{t}separators={NO_ANY_POSITION}"] if hard else [])
    if name == "adaptive":
        r = f"{c}routes."
        out = [f"{r}{route}.max_chunk_size={size}" for route in ("code", "markdown", "table", "faq", "chat")]
        out += [f"{r}{route}.unit={unit}" for route in ("code", "markdown", "table", "faq", "chat", "prose", "document.text_chunker")]
        return out + [f"{r}prose.chunk_size={size}", f"{r}document.text_chunker.chunk_size={size}"]
    if name in ("langchain", "chonkie"):  # characters of the library's own length function
        return [f"{c}kwargs.chunk_size={size}"] + ([f"{c}kwargs.chunk_overlap={overlap}"] if name == "langchain" else [])
    if name == "semantic":  # a minimum size too: small groups merged unless the merge breaks the maximum
        return [f"{c}max_chunk_size={size}", f"{c}min_chunk_size={size // 2}"]
    if name == "cluster_semantic":
        return [f"{c}max_chunk_size={size}", f"{c}piece_size={max(4, size // 3)}"]
    if name == "topic":
        return [f"{c}max_chunk_size={size}"]
    raise AssertionError(f"conf/chunker/{name}.yaml is new: give it small-size overrides here")


def units_of(name: str) -> tuple[str, ...]:
    """Units the strategy can be configured in (model-backed and library ones: one)."""
    if name in EMBEDS:
        return ("tokens",)
    if name in ("langchain", "chonkie"):
        return ("chars",)
    return UNITS


_BUILT: dict = {}


def built(name: str, unit: str, size: int, overlap: int, encoder, hard: bool = False):
    key = (name, unit, size, overlap, hard)
    if key not in _BUILT:
        cfg = compose([f"chunker={name}", *overrides(name, unit, size, overlap, hard)])
        _BUILT[key] = build.build_chunker(cfg, encoder if name in EMBEDS else None)
    return _BUILT[key]


LONG_WORD = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789"), min_size=60, max_size=200)
ONLY_SEPARATORS = st.lists(st.sampled_from(["\n\n", "\n", " ", "\t", "\r\n", "\u3000"]), min_size=1, max_size=8).map("".join)
CJK = st.text(st.sampled_from("日本語の文章中文字符한국어漢字。、"), min_size=20, max_size=120)
EMOJI = st.lists(st.sampled_from(["🚀", "👩\u200d👩\u200d👧\u200d👦", "🇯🇵", "e\u0301", "𝔘𝔫𝔦", "👍🏽", "🧑\u200d💻"]), min_size=5, max_size=40).map("".join)
WORDS = ["Status: OK", "lease renewal", "e.g.", "3.14", "naïve café", "x" * 45, "def f(x):", "    return x", "# Heading", "**Q: Why?**", "| a | b |"]
CRLF = st.lists(st.sampled_from(WORDS), min_size=2, max_size=12).map("\r\n".join)
MIXED = st.lists(
    st.one_of(st.sampled_from([*WORDS, "\n", "\n\n", " ", "\r\n", "。", "日本語の文章", "🚀👩\u200d💻", "[09:02] ana: hi"]), LONG_WORD),
    min_size=1,
    max_size=25,
).map("".join)
CELL = st.sampled_from(["1", "22", "naïve", "日本", "🚀", "x" * 30, ""])
TABLE = st.lists(st.tuples(CELL, CELL), min_size=1, max_size=8).map(lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {x} | {y} |" for x, y in rows))
#: Chat logs: minutes after 09:00, sorted, so that windows and gaps of 15-20 minutes cut them.
CHAT = st.lists(st.tuples(st.integers(0, 180), st.sampled_from(["hi", "ok " * 12, "日本語", "🚀👍🏽", "see\n  more"])), min_size=1, max_size=10).map(
    lambda msgs: "\n".join(f"[{9 + t // 60:02d}:{t % 60:02d}] u{i % 2}: {m}" for i, (t, m) in enumerate(sorted(msgs)))
)
DOCUMENTS = st.one_of(LONG_WORD, ONLY_SEPARATORS, CJK, EMOJI, CRLF, MIXED, TABLE, CHAT)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in EMBEDS else n for n in CONFIGS if n not in NEEDS_SERVICE])
def test_every_setting_holds_on_generated_documents(name, encoder):
    # sizes and overlaps from a few values, so that each drawn configuration is built once
    @settings(max_examples=3 if name in EMBEDS else 20, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, phases=PHASES)
    @given(text=DOCUMENTS, unit=st.sampled_from(units_of(name)), small=st.booleans(), overlap_frac=st.sampled_from([0.0, 0.5]), hard=st.booleans())
    def run(text, unit, small, overlap_frac, hard):
        size = SIZES[unit][0] if small else SIZES[unit][1]
        overlap = int(size * overlap_frac)
        chunker = built(name, unit, size, overlap, encoder, hard and name in ("recursive", "modality"))
        doc = Document("gen.md", text)
        chunks = chunker.chunk_all([doc])  # runs the overlap guard too
        check_chunks(chunker, doc, chunks)
        if not text.strip():
            assert chunks == []

    run()


NO_SPACE = st.one_of(LONG_WORD, CJK.filter(lambda t: "。" not in t and "、" not in t), EMOJI)


@pytest.mark.slow
@pytest.mark.parametrize("name, separators", [("fixed", None), ("recursive", None), ("recursive", '["\\n\\n","\\n"]'), ("recursive", '["\\n\\n"," ",""]')])
@settings(max_examples=15, deadline=None, phases=PHASES)
@given(text=NO_SPACE, size=st.integers(2, 30), overlap_frac=st.floats(0, 0.95))
def test_separator_free_text_gives_the_hand_worked_windows(name, separators, text, size, overlap_frac):
    """Characters without whitespace or separator: every cut is a hard cut (or the ``""``
    separator), so the chunks are exactly the windows with the configured overlap."""
    overlap = min(size - 1, int(size * overlap_frac))
    extra = [f"chunker.separators={separators}"] if separators else []
    chunker = built_with(name, size, overlap, tuple(extra))
    chunks = chunker.chunk(Document("d", text))
    assert [c.spans[0] for c in chunks] == windows(len(text), size, overlap)


_BUILT_SEP: dict = {}


def built_with(name, size, overlap, extra):
    key = (name, size, overlap, extra)
    if key not in _BUILT_SEP:
        cfg = compose([f"chunker={name}", f"chunker.chunk_size={size}", f"chunker.chunk_overlap={overlap}", "chunker.unit=chars", *extra])
        _BUILT_SEP[key] = build.build_chunker(cfg)
    return _BUILT_SEP[key]
