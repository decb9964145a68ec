"""Evidence offsets counted in another unit (red-team class: offset units).

Offsets in this project are Python ``str`` indices (code points). Label files made by
other tools often count something else, and the span then lands a few characters off:

* UTF-16 code units (JavaScript, Java, .NET string indices): every astral character (an
  emoji, a CJK extension character) before the span counts twice;
* UTF-8 bytes (byte-oriented tools, Rust, Go): every non-ASCII character counts 2-4 times;
* text with Windows newlines whose offsets were counted after reading with newline
  translation (``\\r\\n`` -> ``\\n``): every newline before the span counts once instead of twice;
* 1-based starts and inclusive ends.

The loader always refused such a span (its stored excerpt does not match), but the message
only showed the two strings, leaving the user to guess. Now the one-line error names the
unit the offsets were counted in and the span in code points that was meant. Expected spans
are computed in the tests independently (``str.index`` on the text, the wrong unit by
encoding the prefix).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.datasets.native import read_native
from harness.datasets.squad import read_squad
from harness.datasets.validate import DatasetError, check_dataset
from harness.types import Dataset, Document, Evidence, Query

ANSWER = "the answer"


def _dataset(text: str, start: int, end: int) -> Dataset:
    return Dataset("units", (Document("a.txt", text),), (Query("q1", "where?", (Evidence("a.txt", start, end, ANSWER),)),))


def _error(text: str, start: int, end: int) -> str:
    with pytest.raises(DatasetError) as err:
        check_dataset(_dataset(text, start, end))
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_utf16_offsets_after_an_emoji_name_the_unit_and_the_meant_span():
    text = "Smile \U0001f600 then the answer follows."
    s = text.index(ANSWER)  # 13 code points; UTF-16 counts the emoji twice: 14
    assert s == 13
    msg = _error(text, 14, 24)
    assert "UTF-16 code units" in msg and "[13, 23) in code points" in msg


def test_utf8_byte_offsets_name_the_unit_and_the_meant_span():
    text = "Café crème: the answer is near."  # é, è: 2 bytes each
    s = text.index(ANSWER)
    assert s == 12
    msg = _error(text, 14, 24)
    assert "UTF-8 bytes" in msg and "[12, 22) in code points" in msg


def test_offsets_counted_on_lf_newlines_in_a_crlf_file_say_so():
    text = "line one\r\nline two\r\nthe answer is here\r\n"
    assert text.index(ANSWER) == 20  # two \r before it
    msg = _error(text, 18, 28)
    assert "newlines" in msg and "\\r\\n" in msg and "[20, 30) in code points" in msg


@pytest.mark.parametrize(("start", "end", "unit"), [(8, 17, "1-based"), (7, 16, "inclusive end")])
def test_one_based_start_and_inclusive_end_say_so(start, end, unit):
    text = "Before the answer after."
    assert text.index(ANSWER) == 7
    msg = _error(text, start, end)
    assert unit in msg and "[7, 17) in code points" in msg


def test_an_unrelated_mismatch_claims_no_unit():
    text = "Nothing like it here at all, really."
    msg = _error(text, 0, 10)
    assert "does not equal the stored excerpt" in msg
    assert "counted in" not in msg and "code points" not in msg


def test_native_file_and_squad_answer_start_get_the_same_hint(tmp_path):
    text = "Smile \U0001f600 then the answer follows."
    root = tmp_path / "native"
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "a.txt").write_text(text, encoding="utf-8")
    rec = {"query_id": "q1", "query": "where?", "evidence": [{"doc_id": "a.txt", "start": 14, "end": 24, "text": ANSWER}]}
    (root / "questions.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"UTF-16 code units.*\[13, 23\) in code points"):
        read_native(root)
    squad = tmp_path / "squad.json"
    data = {
        "data": [
            {"title": "t", "paragraphs": [{"context": text, "qas": [{"id": "q1", "question": "where?", "answers": [{"text": ANSWER, "answer_start": 14}]}]}]}
        ]
    }
    squad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"UTF-16 code units.*answer_start=13 in code points"):
        read_squad(squad)


# ---------------------------------------------------------------------- property over generated texts

FILLER = st.text(alphabet=st.sampled_from(list("abc xyz.")), min_size=0, max_size=12)


def _utf16(prefix: str) -> int:
    return len(prefix.encode("utf-16-le")) // 2


def _utf8(prefix: str) -> int:
    return len(prefix.encode("utf-8"))


def _lf(prefix: str) -> int:
    return len(prefix.replace("\r\n", "\n"))


KINDS = {
    "UTF-16 code units": (["\U0001f600", "\U00020000", "\U0001d11e"], _utf16),
    "UTF-8 bytes": (["é", "ß", "€", "中"], _utf8),
    "newlines": (["\r\n"], _lf),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(KINDS)), pieces=st.lists(st.tuples(FILLER, st.integers(0, 3)), min_size=1, max_size=5), tail=FILLER)
def test_offsets_in_another_unit_are_named_with_the_meant_span(kind, pieces, tail):
    specials, count = KINDS[kind]
    prefix = "".join(f + specials[i % len(specials)] for f, i in pieces) + " "
    text = prefix + ANSWER + tail
    s = len(prefix)  # the span in code points, by construction
    ws = count(prefix)  # the same start counted in the other unit
    we = ws + (len(ANSWER.encode("utf-8")) if kind == "UTF-8 bytes" else len(ANSWER))
    if re.search(re.escape(ANSWER), text[:s]):  # never: the filler alphabet cannot spell it
        return
    msg = _error(text, ws, we)
    assert kind in msg, msg
    assert f"[{s}, {s + len(ANSWER)}) in code points" in msg, msg
