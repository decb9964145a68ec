"""The encoding-floor table in docs/benchmark.md is the rendering of the committed JSON; the
pre-truncation it measures keeps the model's word pieces (tokenizer only, no model)."""

import importlib.util
import json
import random

import pytest
from conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "experiments" / "encode_floor.py"
RESULT = PROJECT_ROOT / "experiments" / "encode_floor_chroma_general.json"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("encode_floor_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_table_is_the_rendering_of_the_committed_json(script):
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    docs = (PROJECT_ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    start, end = script.DOCS_MARKERS
    assert docs.count(start) == 1 and docs.count(end) == 1, "docs/benchmark.md lost its encode-floor table markers"
    assert docs.split(start, 1)[1].split(end, 1)[0].strip("\n") == script.render_markdown(data)
    assert data["batching_one_thread"]["current"]["bitwise_equal"] and data["batching_one_thread"]["current"]["cpu_ratio"] == 1.0


def test_pre_truncated_text_keeps_the_word_pieces_the_model_reads(script):
    from harness.embeddings.model import default_model_path
    from harness.text.units import raw_tokenizer

    tok = raw_tokenizer(default_model_path() / "tokenizer.json")
    rng = random.Random(0)
    words = ["unbelievably", "tokenisation", "the", "a", "Kestrel's", "(see", "§4.2)", "naïve", "co-operate", "12,345", "東京", "résumé", "x"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 160))) for _ in range(24)]
    limit = 64
    cut = script.pre_truncate(tok, texts, limit)
    for full, short in zip(texts, cut):
        a = tok.encode(full, add_special_tokens=False).ids
        b = tok.encode(short, add_special_tokens=False).ids
        assert full.startswith(short) and len(short) <= len(full)
        assert b[: limit - 2] == a[: limit - 2]  # what the model keeps is unchanged
        assert len(b) >= min(len(a), limit - 2)
    assert sum(len(s) < len(f) for f, s in zip(texts, cut)) > 12  # most were cut
