"""Scale benchmark: phase marks and meters on a real run, target verdicts, and the docs table."""

from __future__ import annotations

import json
import re

import pytest

from harness.experiment.build import PROJECT_ROOT
from harness.experiment.phases import listening, mark
from harness.studies import bench_scale as bs


def test_phase_meter_times_and_measures_every_phase_of_a_real_evaluation(kestrel):
    from harness.chunkers.fixed import FixedChunker
    from harness.experiment.pipeline import evaluate
    from harness.experiment.settings import default_metric_settings
    from harness.retrievers.bm25 import BM25Retriever

    meter = bs.PhaseMeter()
    seen: list[str] = []
    with listening(meter), listening(seen.append):
        evaluate(kestrel, FixedChunker(chunk_size=300, chunk_overlap=0, unit="chars"), BM25Retriever(), default_metric_settings(ks=[1, 5]), progress=False)
        mark("end")
    mark("load")  # no listener any more: nothing recorded
    assert seen == ["chunk", "index", "search", "score", "diagnostics", "end"]
    assert set(meter.seconds) == {"chunk", "index", "search", "score", "diagnostics"}
    assert all(s >= 0 for s in meter.seconds.values())
    for phase, peak in meter.peak_bytes.items():  # the peak of a phase is at least what was resident when it started
        # the kernel's per-thread RSS counters are batched (up to 64 pages per thread behind),
        # so VmHWM read at the end can trail the VmRSS read at the start by a little
        assert peak >= meter.start_bytes[phase] - 4 * 2**20 and meter.start_bytes[phase] > 0


def _run(seconds: dict[str, float], n_chunks: int, peak_gb: float, **extra) -> dict:
    peak = int(peak_gb * bs.GB)
    return {
        "seconds": {p: seconds.get(p, 0.0) for p in bs.PHASES},
        "n_chunks": n_chunks,
        "peak_bytes_max": peak,
        "peak_bytes": dict.fromkeys(bs.PHASES, peak),
        **extra,
    }


def test_targets_and_extrapolation_on_a_made_up_result():
    base = {"load": 0.2, "chunk": 1.0, "index": 0.5, "search": 0.3, "score": 1.0, "diagnostics": 0.5, "log": 0.5}
    result = {
        "factors": [1, 10, 100],
        "corpus_bytes": {"1": 10**6, "10": 10**7, "100": 10**8},
        "runs": {
            "bm25": {
                "1": _run(base, 100, 1.0),
                "10": _run({**{p: 10 * v for p, v in base.items()}, "score": 12.0}, 1000, 1.5),  # score grows 12x: fails
                "100": _run({p: 100 * v for p, v in base.items()}, 10000, 2.3),
            },
            "faiss": {
                "1": _run({**base, "embed": 10.0}, 100, 1.2, chunks_per_s=20.0, model_load_s=2.0, query_embed_s=1.0),
                "10": _run({**{p: 10 * v for p, v in base.items()}, "embed": 53.0}, 1000, 1.4, chunks_per_s=20.0, model_load_s=2.0, query_embed_s=1.0),
            },
        },
    }
    result["extrapolated"] = bs.extrapolate(result)
    ex = result["extrapolated"]["100"]
    assert ex["seconds"]["embed"] == pytest.approx(2.0 + 1.0 + 10000 / 20.0)
    assert ex["seconds"]["index"] == pytest.approx(50.0) and ex["seconds"]["search"] == pytest.approx(30.0)
    non = 20 + 100 + 50 + 30 + 100 + 50 + 50
    assert ex["non_embedding_share"] == pytest.approx(non / (non + 503.0))
    result["targets"] = bs.targets(result)
    rows = {r["target"]: r for r in result["targets"]}
    assert rows["bm25 score: time 10x / 1x"]["result"] == "fail"
    assert rows["bm25 score: time 100x / 10x"]["result"] == "pass"  # 100 / 12
    assert rows["bm25 chunk: time 10x / 1x"]["measured"] == pytest.approx(10.0)
    assert rows["faiss index: time 10x / 1x"]["result"] == "pass"
    assert rows["non-embedding share of a FAISS run at 100x"]["result"] == "fail"
    memory = rows["bm25 peak memory at 100x (GB)"]
    assert memory["limit"] == pytest.approx(2 + 4e8 / bs.GB) and memory["result"] == "pass"
    text = bs.tables(result)
    assert "faiss 100x (extrapolated)" in text and "| fail (" in text


def test_parse_factors():
    assert bs.parse_factors("1,10,100") == [1, 10, 100]
    for bad in ("", "10,1", "0,1", "1,x", "1,1"):
        with pytest.raises(ValueError, match="--scale"):
            bs.parse_factors(bad)


def test_docs_table_is_rendered_from_the_committed_json():
    """docs/benchmark.md shows exactly the tables of experiments/bench/scale.json."""
    result = json.loads((PROJECT_ROOT / "experiments" / "bench" / "scale.json").read_text(encoding="utf-8"))
    docs = (PROJECT_ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- scale-tables:start -->\n(.*?)\n<!-- scale-tables:end -->", docs, re.S)
    assert block is not None, "docs/benchmark.md lacks the scale-tables markers"
    assert block.group(1).strip() == bs.tables(result).strip()
    assert {t["result"] for t in result["targets"]} <= {"pass", "fail"} and len(result["targets"]) > 0


def test_cli_refuses_a_bad_scale_before_any_work(tmp_path, capsys):
    from harness.cli import bench as cli_bench

    out = tmp_path / "scale.json"
    assert cli_bench.main(["--scale", "10,1", "--out", str(out)]) == 2
    assert "--scale expects increasing integers" in capsys.readouterr().err
    assert not out.exists()
