"""``harness bench --sweep-cost``: the experiment files mean what the reference's overrides
mean (composed by Hydra both ways), the reference-style semantic chunkers keep every piece
in order within their limits (real tiktoken, real MiniLM), the floor's texts are one per
model input, and the verdict/table logic."""

from __future__ import annotations

import pytest
from conftest import compose

from harness.experiment.errors import sweep_option_error
from harness.studies import bench_sweep, reference_style
from harness.studies.reproduce import CHROMA_CONFIGURATIONS


@pytest.mark.slow
def test_each_experiment_file_composes_to_its_configuration(tmp_path):
    names = bench_sweep._experiments(tmp_path, CHROMA_CONFIGURATIONS)
    assert len(names) == 11 and len(set(names.values())) == 11
    for name, overrides in CHROMA_CONFIGURATIONS.items():
        direct = compose(list(overrides))
        via_file = compose([f"hydra.searchpath=[file://{tmp_path}]", f"experiment={names[name]}"])
        assert dict(via_file.chunker) == dict(direct.chunker), name
        assert via_file.tracking.run_name == names[name]


def test_a_search_path_option_is_known_to_the_sweep_check(tmp_path):
    names = bench_sweep._experiments(tmp_path, {"fixed 400/0": CHROMA_CONFIGURATIONS["fixed 400/0"]})
    conf = bench_sweep.Path(bench_sweep.__file__).parents[2] / "conf"
    argv = [f"hydra.searchpath=[file://{tmp_path}]", f"experiment={names['fixed 400/0']},chunk_size_sweep"]
    assert sweep_option_error(argv, conf) is None
    wrong = sweep_option_error([argv[0], "experiment=ref_fixed_400_9"], conf)
    assert wrong.startswith("experiment=ref_fixed_400_9: no such option; did you mean experiment=ref_fixed_400_0?")
    assert "ref_fixed_400_9" in sweep_option_error(["experiment=ref_fixed_400_9"], conf)  # not searched without the override


def test_reference_style_arguments_of_every_configuration():
    args = {name: bench_sweep.reference_style_args(name) for name in CHROMA_CONFIGURATIONS}
    assert args["fixed 800/400"] == ["--chunker", "fixed", "--size", "800", "--overlap", "400"]
    assert args["recursive 200/0"] == ["--chunker", "recursive", "--size", "200", "--overlap", "0"]
    assert args["cluster 400"] == ["--chunker", "cluster", "--size", "400", "--overlap", "0"]
    assert args["kamradt 300"] == ["--chunker", "kamradt", "--size", "300", "--overlap", "0"]
    assert {a[1] for a in args.values()} == set(reference_style.CHUNKERS)
    with pytest.raises(ValueError, match="unknown reference configuration 'fixed 300/0'"):
        bench_sweep.reference_style_args("fixed 300/0")


TEXT = " ".join(
    f"{w.capitalize()} harbour ledgers list copper, lanterns and marble for the {i}th season." + ("\n\n" if i % 4 == 3 else "")
    for i, w in enumerate(["river", "glacier", "meadow", "violin", "tunnel", "falcon", "orchard", "pepper"] * 5)
)


@pytest.fixture(scope="module")
def encoding():
    import tiktoken

    return tiktoken.get_encoding(reference_style.ENCODING)


@pytest.mark.slow
def test_the_semantic_reference_chunkers_keep_every_piece_in_order(encoder, encoding):
    pieces = reference_style.recursive_split(TEXT, encoding, reference_style.PIECE)
    assert len(pieces) > 8 and all(len(encoding.encode(p)) <= reference_style.PIECE for p in pieces)
    cluster = reference_style.cluster_split(TEXT, encoding, encoder.model, 200)
    kamradt = reference_style.kamradt_split(TEXT, encoding, encoder.model, 120)
    for chunks in (cluster, kamradt):
        assert " ".join(chunks) == " ".join(pieces)  # every piece once, in order, joined with a space
    assert max(_pieces_per_chunk(cluster, pieces)) <= 200 // reference_style.PIECE
    assert 1 < len(kamradt) < len(pieces)


def _pieces_per_chunk(chunks, pieces):
    """How many consecutive pieces each chunk joins."""
    out, i = [], 0
    for chunk in chunks:
        n = next(n for n in range(1, len(pieces) - i + 1) if " ".join(pieces[i : i + n]) == chunk)
        out.append(n)
        i += n
    assert i == len(pieces)
    return out


def test_the_floor_has_one_text_per_model_input(tmp_path):
    base = ["dataset=kestrel_kb", f"cache.dir={tmp_path}"]
    grid = {"chunker.chunk_size": [400, 800], "chunker.chunk_overlap": [0]}
    texts = bench_sweep.distinct_inputs(base, grid)
    assert len(texts["questions"]) == 191
    assert len(texts["chunks"]) < texts["n_chunk_texts"]  # every 800-window starts where a 400-window does, both over the window
    from harness.embeddings.model import Encoder

    keys = Encoder(show_progress=False)._input_keys(texts["chunks"])
    assert len(set(keys)) == len(keys)


def _result(reference_ratio, floor_ratio):
    counters = {"jobs": 2, "texts_embedded": 10, "cache_hits": 4, "texts_shared": 3, "recall@5": {"ref_fixed_400_0": 0.8}}
    return {
        "dataset": "tiny",
        "mode": "tiny",
        "started": "2026-12-04 20:00 UTC",
        "machine": {"cpu": "Some CPU", "amx": False, "cpus": 2, "python": "3.11", "load_1m": 1.0},
        "reference": {
            "configurations": ["fixed 400/0"],
            "run_names": {"fixed 400/0": "ref_fixed_400_0"},
            "sweep_s": 10.0 * reference_ratio,
            "reference_s": {"fixed 400/0": 10.0},
            "reference_sum_s": 10.0,
            "reference_recall@5": {"fixed 400/0": 0.81},
            "reference_unlocated": {"fixed 400/0": 0},
            "ratio": reference_ratio,
            "limit": 0.5,
            "counters": counters,
        },
        "floor": {
            "grid": {},
            "jobs": 2,
            "sweep_s": 20.0 * floor_ratio,
            "floor_s": 20.0,
            "floor": {"encode_chunks_s": 5.0, "encode_queries_s": 1.0, "load_s": 0.5, "import_s": 6.0},
            "precision": "fp32",
            "chunk_texts": 12,
            "distinct_inputs": 9,
            "questions": 5,
            "ratio": floor_ratio,
            "limit": 1.2,
            "counters": counters,
        },
    }


def test_verdicts_and_tables():
    result = _result(0.4, 1.3)
    assert bench_sweep.verdicts(result) == {"reference": "PASS", "floor": "FAIL"}
    result["verdicts"] = bench_sweep.verdicts(result)
    text = bench_sweep.tables(result)
    assert "CPU Some CPU (2 CPUs, AMX: no)" in text
    assert "| 0.400 | ≤ 0.5 | PASS |" in text and "| 1.300 | ≤ 1.2 | FAIL |" in text
    assert "| fixed 400/0 | 10.0 | 0.8100 | 0 | 0.8000 |" in text
    assert bench_sweep.verdicts(_result(0.5, 1.2)) == {"reference": "PASS", "floor": "PASS"}  # the limits are inclusive


def test_bad_parts_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"--sweep-parts must be one of .*got 'flor'.*did you mean 'floor'"):
        bench_sweep.run_sweep_cost(parts=["flor"])
    with pytest.raises(ValueError, match="--sweep-parts: expected a comma-separated subset"):
        bench_sweep.run_sweep_cost(parts=[])


def test_parts_run_apart_combine_and_render_into_the_docs(tmp_path):
    ref, flo = _result(0.4, 1.3), _result(0.4, 1.3)
    del ref["floor"], flo["reference"]
    flo["machine"] = dict(flo["machine"], load_1m=3.0)
    paths = []
    for name, part in (("ref", ref), ("floor", flo)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(bench_sweep.json.dumps(part), encoding="utf-8")
    combined = bench_sweep.load(paths)
    assert combined["verdicts"] == {"reference": "PASS", "floor": "FAIL"} and combined["machine_end"]["load_1m"] == 3.0
    docs = tmp_path / "docs" / "benchmark.md"
    docs.parent.mkdir()
    docs.write_text("before\n" + "\n".join(bench_sweep.MARKERS) + "\nafter\n", encoding="utf-8")
    bench_sweep.update_docs(combined, tmp_path)
    text = docs.read_text(encoding="utf-8")
    assert bench_sweep.generated_block(text) == bench_sweep.tables(combined) and text.startswith("before\n") and text.endswith("after\n")
    with pytest.raises(ValueError, match="no 'reference' or 'floor' part"):
        bench_sweep.load([_write(tmp_path / "x.json", {"machine": {}})])


def _write(path, data):
    path.write_text(bench_sweep.json.dumps(data), encoding="utf-8")
    return path


def test_the_docs_block_is_the_committed_json():
    from conftest import PROJECT_ROOT

    committed = PROJECT_ROOT / bench_sweep.COMMITTED_JSON
    block = bench_sweep.generated_block((PROJECT_ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8"))
    assert block == bench_sweep.tables(bench_sweep.load([committed]))
