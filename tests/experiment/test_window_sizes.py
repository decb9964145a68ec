"""Chunk sizes relative to the embedding model's window: chunker.chunk_size=window, window*F, window/N."""

import pytest
from conftest import compose

from harness.experiment import build


class Window:
    """The window facts of an embedding backend (what resolve_window_sizes reads)."""

    def __init__(self, max_seq_length=256, special_tokens=2, chunk_tokenizer="model", model_name="m"):
        self.max_seq_length, self.special_tokens, self.chunk_tokenizer, self.model_name = max_seq_length, special_tokens, chunk_tokenizer, model_name


@pytest.mark.parametrize(("value", "tokens"), [("window", 254), ("window*0.5", 127), ("window * 0.75", 190), ("window/4", 63), ("WINDOW/1", 254)])
def test_window_expressions_become_the_models_text_tokens(value, tokens):
    cfg = compose(["chunker=recursive", f"chunker.chunk_size={value}"])
    chunker = build.build_chunker(cfg, Window())
    assert chunker.chunk_size == tokens
    assert build.chunk_key_config(cfg, Window())["chunk_size"] == tokens


def test_another_window_gives_another_size_and_another_chunk_key():
    cfg = compose(["chunker=recursive", "chunker.chunk_size=window"])
    small, large = Window(max_seq_length=128), Window(max_seq_length=512)
    assert build.build_chunker(cfg, small).chunk_size == 126 and build.build_chunker(cfg, large).chunk_size == 510
    assert build.chunk_key_config(cfg, small) != build.chunk_key_config(cfg, large)
    api = Window(max_seq_length=8191, special_tokens=0, chunk_tokenizer="cl100k_base")  # an API counts the text only
    cfg = compose(["chunker=fixed", "chunker.chunk_size=window/8", "chunker.tokenizer=cl100k_base"])
    assert build.build_chunker(cfg, api).chunk_size == 1023


def test_nested_chunker_configs_resolve_too():
    data = {"_target_": "x", "routes": {"prose": {"_target_": "y", "max_chunk_size": "window/2", "unit": "tokens", "tokenizer": "model"}}}
    assert build.resolve_window_sizes(data, Window())["routes"]["prose"]["max_chunk_size"] == 127


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["chunker.chunk_size=windows"], r"chunker\.chunk_size='windows': expected a number, 'window'"),
        (["chunker.chunk_size=window*1.5"], r"fraction must be in \(0, 1\]"),
        (["chunker.chunk_size=window/0.5"], r"divisor must be >= 1"),
        (["chunker.chunk_size=window", "chunker.unit=chars"], r"needs chunker\.unit=tokens, got 'chars'"),
        (["chunker.chunk_size=window", "chunker.tokenizer=cl100k_base"], r"window of embedding\.model 'm' is 254 tokens.*needs chunker\.tokenizer=model"),
    ],
)
def test_unresolvable_window_sizes_are_refused_naming_the_setting(overrides, message):
    cfg = compose(["chunker=recursive", *overrides])
    with pytest.raises(ValueError, match=message):
        build.build_chunker(cfg, Window())


def test_a_model_whose_tokens_no_chunker_counts_is_refused_and_no_encoder_is_refused():
    cfg = compose(["chunker=recursive", "chunker.chunk_size=window"])
    with pytest.raises(ValueError, match=r"needs a size in chars or words"):
        build.build_chunker(cfg, Window(chunk_tokenizer=None))
    with pytest.raises(ValueError, match=r"relative to the embedding model's window: build the chunker with the run's encoder"):
        build.build_chunker(cfg)
    with pytest.raises(ValueError, match=r"declares no input window"):
        build.build_chunker(cfg, Window(max_seq_length=None))


def test_numbers_are_left_alone_and_hash_as_before():
    cfg = compose(["chunker=recursive", "chunker.chunk_size=200"])
    assert build.build_chunker(cfg, Window()).chunk_size == 200
    assert build.chunk_key_config(cfg, Window()) == build.chunk_key_config(cfg)


def test_real_backends_report_their_window():
    """chunker.chunk_size=window with the real backends: MiniLM's word pieces, the API client's cl100k tokens."""
    from harness.embeddings.model import Encoder
    from harness.embeddings.openai import OpenAIEncoder

    cfg = compose(["chunker=recursive", "chunker.chunk_size=window"])
    assert build.build_chunker(cfg, Encoder(show_progress=False)).chunk_size == 254
    api = OpenAIEncoder(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, max_input_tokens=8191)
    cfg = compose(["chunker=fixed", "chunker.chunk_size=window/8", "chunker.tokenizer=cl100k_base"])
    assert build.build_chunker(cfg, api).chunk_size == 1023


def test_a_retriever_depth_below_the_deepest_cut_off_is_refused_before_loading():
    from harness.experiment.run import build_components
    from harness.experiment.settings import metric_settings

    cfg = compose(["retriever=hybrid", "retriever.depth=5"])
    with pytest.raises(ValueError, match=r"retriever\.depth=5 is below the deepest cut-off max\(metrics\.ks\)=10"):
        build_components(cfg, metric_settings(cfg))
    cfg = compose(["retriever=hybrid", "retriever.depth=10"])
    assert build_components(cfg, metric_settings(cfg)).retriever.depth == 10
