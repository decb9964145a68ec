"""``harness bench --sweep-cost``: what a whole sweep costs, side by side with what it replaces.

::

    harness bench --sweep-cost [--dataset chroma_general|FOLDER] [--sweep-parts reference,floor] [--out FILE] [--tiny]

Every measurement is the wall-clock time of one fresh process (interpreter start, imports,
model load and everything else included), started one after another in one sitting, so
that all see the same background load:

* **reference**: the eleven configurations of Chroma's evaluation
  (:data:`harness.studies.reproduce.CHROMA_CONFIGURATIONS`: fixed and recursive 800/400,
  400/200, 400/0, 200/0 cl100k_base tokens, cluster 200 and 400, Kamradt 300; all-MiniLM-L6-v2,
  FAISS, top 5, both metric conventions) as **one** Hydra multirun (``harness run -m
  experiment=...`` over one experiment file per configuration, written into a search path of
  the work folder), cold: an empty cache folder and a new tracking store. Against it, the
  reference-style pipeline (:mod:`harness.studies.reference_style` ``pipeline --chunker``)
  once per configuration, each its own process, as a user of the reference evaluates eleven
  configurations. None of the eleven needs an LLM or the network (the reference's LLM
  chunker is not among them: :mod:`harness.studies.reproduce`). Ratio: multirun seconds /
  the sum of the eleven reference-style seconds; target <= 0.5.
* **floor**: a 12-job sweep, fixed cl100k_base windows of 200, 400 and 800 tokens x overlap
  0 and 100 x retriever ``faiss`` and ``hybrid`` (BM25 + FAISS over the same vectors), as one
  cold multirun. Against it, the encoding floor of its distinct truncated texts
  (:mod:`harness.studies.reference_style` ``floor``: load the model, encode the texts, nothing
  else): one chunk text per distinct model input (the token ids all-MiniLM-L6-v2 receives
  after truncation to its 256-word-piece window, as
  :meth:`harness.embeddings.model.Encoder._input_keys` computes them) over the six chunk sets,
  and the distinct questions, at the precision ``embedding.precision=auto`` resolves to here.
  Ratio: multirun seconds / floor seconds; target <= 1.2.

The multiruns' own counters (``embedding.texts_embedded``, ``cache_hits``, ``texts_shared``,
summed over their jobs) are reported next to the ratios, with the CPU model, its AMX
support and the machine's load average at the start and the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Sequence

from harness.params import Param

#: Parts of the benchmark.
SWEEP_PARTS = ("reference", "floor")
#: Ratio limits (the issue's targets).
LIMITS = {"reference": 0.5, "floor": 1.2}
#: The floor sweep's grid (cl100k_base tokens).
FLOOR_GRID = {"chunker.chunk_size": [200, 400, 800], "chunker.chunk_overlap": [0, 100], "retriever": ["faiss", "hybrid"]}
#: Settings of every job of the floor sweep besides the grid.
FLOOR_CHUNKER = ("chunker=fixed", "chunker.tokenizer=cl100k_base")


def reference_style_args(name: str) -> list[str]:
    """``reference_style.py pipeline`` arguments of one reference configuration (``fixed 800/400``,
    ``cluster 200``, ``kamradt 300``, ...).

    Raises:
        ValueError: not a configuration name of :data:`harness.studies.reproduce.CHROMA_CONFIGURATIONS`.
    """
    from harness.studies.reproduce import CHROMA_CONFIGURATIONS

    if name not in CHROMA_CONFIGURATIONS:
        raise ValueError(f"unknown reference configuration {name!r} (known: {', '.join(CHROMA_CONFIGURATIONS)})")
    kind, _, size = name.partition(" ")
    size, _, overlap = size.partition("/")
    return ["--chunker", kind, "--size", size, "--overlap", overlap or "0"]


def experiment_yaml(overrides: Sequence[str]) -> str:
    """An experiment file (``# @package _global_``) setting what ``overrides`` set: a group
    choice (``chunker=fixed``) becomes a defaults override, a dotted key a nested value
    (values parsed by Hydra's own override grammar, so the file means what the command line
    would).

    Raises:
        ValueError: an override that is not ``key=value``.
    """
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser

    defaults: list[dict] = []
    values: dict = {}
    for parsed in OverridesParser.create().parse_overrides(list(overrides)):
        key, value = parsed.key_or_group, parsed.value()
        if "." not in key:
            defaults.append({f"override /{key}": value})
            continue
        node = values
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    body = {"defaults": [*defaults, "_self_"], **values}
    return "# @package _global_\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def _experiments(folder: Path, configurations: dict[str, Sequence[str]]) -> dict[str, str]:
    """Write one experiment file per configuration under ``folder/experiment``; returns
    ``{configuration name: experiment name}``."""
    (folder / "experiment").mkdir(parents=True, exist_ok=True)
    names = {}
    for name, overrides in configurations.items():
        slug = "ref_" + "".join(c if c.isalnum() else "_" for c in name)
        (folder / "experiment" / f"{slug}.yaml").write_text(experiment_yaml([*overrides, f"tracking.run_name={slug}"]), encoding="utf-8")
        names[name] = slug
    return names


def _store(work: Path, tag: str) -> tuple[str, Path]:
    """A new tracking URI and an empty cache folder for one cold measurement."""
    from harness.tracking.runs import prepare_store

    folder = work / tag
    folder.mkdir(parents=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    prepare_store(uri)  # created and migrated before timing, as after a first use
    return uri, folder


def _common(uri: str, folder: Path, experiment: str) -> list[str]:
    return [
        f"tracking.uri={uri}",
        f"tracking.experiment={experiment}",
        "tracking.purpose=bench",
        f"paths.cache_dir={folder / 'cache'}",
        f"cache.dir={folder / 'cache'}",
        f"hydra.sweep.dir={folder / 'sweep'}",
        "embedding.show_progress=false",
    ]


def sweep_counters(uri: str, experiment: str) -> dict:
    """``embedding.*`` counters and recall@5 of the FINISHED jobs of ``experiment``, summed
    (counters) or by run name (recall), with the job count."""
    from harness.tracking.runs import search_runs, with_all_metrics

    found = search_runs(uri, experiment, "attributes.status = 'FINISHED'")
    runs = [r for r in (with_all_metrics(uri, r) for r in found) if "embedding.texts_embedded" in r.metrics]
    out = {"jobs": len(runs)}
    for key in ("embedding.texts_embedded", "embedding.cache_hits", "embedding.texts_shared"):
        out[key.split(".", 1)[1]] = int(sum(r.metrics.get(key, 0.0) for r in runs))
    out["recall@5"] = {r.name: r.metrics.get("recall_at_5") for r in runs}
    phases = sorted({k for r in runs for k in r.metrics if k.startswith("time.") and k.endswith("_s")})
    out["phase_s"] = {k[len("time.") : -2]: round(sum(r.metrics.get(k, 0.0) for r in runs), 2) for k in phases}  # summed over jobs
    return out


def reference_part(folder: Path, work: Path, only: Sequence[str] | None = None) -> dict:
    """The eleven configurations as one cold multirun vs the reference-style pipeline once each (see the module docstring)."""
    from harness.studies.bench import _log, _subprocess
    from harness.studies.bench_reference import SCRIPT
    from harness.studies.reproduce import CHROMA_CONFIGURATIONS, base_overrides

    configurations = {n: o for n, o in CHROMA_CONFIGURATIONS.items() if not only or n in only}
    search = work / "conf-search"
    names = _experiments(search, configurations)
    uri, store = _store(work, "reference-sweep")
    args = ["-m", *base_overrides(folder), *_common(uri, store, "bench-sweep-reference"), f"hydra.searchpath=[file://{search}]"]
    args.append("experiment=" + ",".join(names.values()))
    _log(f"sweep-cost: the {len(configurations)} reference configurations as one cold multirun")
    sweep_s = _subprocess(["-m", "harness.run", *args], work)[0]
    reference = {}
    for name in configurations:
        _log(f"sweep-cost: reference-style pipeline, {name}")
        seconds, stdout = _subprocess(["-P", str(SCRIPT), "pipeline", str(folder), "--k", "5", *reference_style_args(name)], work)
        reference[name] = {"seconds": seconds, **json.loads(stdout.strip().splitlines()[-1])}
    total = sum(r["seconds"] for r in reference.values())
    return {
        "configurations": list(configurations),
        "run_names": names,
        "sweep_s": sweep_s,
        "reference_s": {n: r["seconds"] for n, r in reference.items()},
        "reference_sum_s": total,
        "reference_recall@5": {n: r["recall"] for n, r in reference.items()},
        "reference_unlocated": {n: r["n_unlocated"] for n, r in reference.items()},
        "ratio": sweep_s / total,
        "limit": LIMITS["reference"],
        "counters": sweep_counters(uri, "bench-sweep-reference"),
    }


def distinct_inputs(base: Sequence[str], grid: dict[str, list]) -> dict[str, list[str]]:
    """The texts of the floor: one chunk text per distinct model input over the chunk sets
    of ``grid`` (its chunker settings; the retriever does not change a chunk), and the
    distinct questions (prompted as the run prompts them)."""
    from itertools import product

    from harness.experiment import build
    from harness.experiment.config import compose

    chunk_keys = [k for k in grid if k.startswith("chunker.")]
    cfg = None
    texts: dict[str, None] = {}
    for values in product(*(grid[k] for k in chunk_keys)):
        cfg = compose([*base, *FLOOR_CHUNKER, *(f"{k}={v}" for k, v in zip(chunk_keys, values))])
        dataset = build.build_dataset(cfg)
        for chunk in build.build_chunker(cfg).chunk_all(dataset.documents, progress=False):
            texts.setdefault(chunk.text)
    encoder = build.build_encoder(compose([*base, "cache.enabled=false"]))
    chunks = encoder.prompted(list(texts), "document")
    keys = encoder._input_keys(chunks)
    chunk_texts = list({k: t for k, t in reversed(list(zip(keys, chunks)))}.values()) if keys is not None else chunks
    questions = list(dict.fromkeys(encoder.prompted([q.text for q in dataset.queries], "query")))
    return {"chunks": chunk_texts, "questions": questions, "n_chunk_texts": len(chunks)}


def floor_part(folder: Path, work: Path, grid: dict[str, list] | None = None) -> dict:
    """The 12-job sweep, cold, vs the encoding floor of its distinct truncated texts (see the module docstring)."""
    from itertools import product

    from harness.studies.bench import _log, _subprocess
    from harness.studies.bench_reference import SCRIPT, auto_precision

    grid = dict(FLOOR_GRID if grid is None else grid)
    data = ["dataset=chroma_general", f"dataset.path={folder}", f"dataset.name={folder.name}", "dataset.download=false", "embedding=minilm"]
    precision = auto_precision()["precision"]
    texts = distinct_inputs([*data, "embedding.show_progress=false"], grid)
    texts_file = work / "floor-texts.json"
    texts_file.write_text(json.dumps({"chunks": texts["chunks"], "questions": texts["questions"]}), encoding="utf-8")
    uri, store = _store(work, "floor-sweep")
    jobs = len(list(product(*grid.values())))
    args = ["-m", *data, *FLOOR_CHUNKER, *_common(uri, store, "bench-sweep-floor")]
    args += [f"{k}={','.join(str(v) for v in values)}" for k, values in grid.items()]
    _log(f"sweep-cost: the {jobs}-job chunk-size x overlap x retriever multirun, cold")
    sweep_s = _subprocess(["-m", "harness.run", *args], work)[0]
    _log(f"sweep-cost: encoding floor of {len(texts['chunks'])} distinct inputs and {len(texts['questions'])} questions at {precision}")
    floor_s, floor = _subprocess(["-P", str(SCRIPT), "floor", str(texts_file), "--precision", precision], work)
    return {
        "grid": grid,
        "jobs": jobs,
        "sweep_s": sweep_s,
        "floor_s": floor_s,
        "floor": json.loads(floor.strip().splitlines()[-1]),
        "precision": precision,
        "chunk_texts": texts["n_chunk_texts"],
        "distinct_inputs": len(texts["chunks"]),
        "questions": len(texts["questions"]),
        "ratio": sweep_s / floor_s,
        "limit": LIMITS["floor"],
        "counters": sweep_counters(uri, "bench-sweep-floor"),
    }


def machine() -> dict:
    """The CPU model (read at run time), its AMX support, cores and the load average."""
    from harness.runtime import cpu_model, fast_bf16_cpu

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"cpu": cpu_model(), "amx": fast_bf16_cpu(), "cpus": os.cpu_count(), "python": platform.python_version(), "load_1m": round(load[0], 2)}


def run_sweep_cost(dataset: str = "chroma_general", parts: Sequence[str] = SWEEP_PARTS, tiny: bool = False, work: str | os.PathLike | None = None) -> dict:
    """Run the parts of the benchmark on ``dataset`` and return the result (JSON-ready).

    Args:
        dataset: ``chroma_general`` or a chroma-format folder (questions.csv and corpora/).
        parts: a subset of :data:`SWEEP_PARTS`.
        tiny: smoke-test sizes: two reference configurations (fixed 400/0, recursive 400/0)
            and a 2-job floor sweep (400 tokens, overlap 0, faiss and hybrid).
        work: folder for stores, caches and texts (default: a temporary folder, deleted afterwards).

    Raises:
        ValueError: an unknown part or a folder that is not chroma-format (before anything runs).
        RuntimeError: a process failed (its output is saved under the work folder).
    """
    from harness.studies.bench_reference import dataset_folder

    if not parts:
        raise ValueError(f"--sweep-parts: expected a comma-separated subset of {list(SWEEP_PARTS)}, got nothing")
    for part in parts:
        Param("--sweep-parts", "choice", choices=SWEEP_PARTS).check(part)
    folder = dataset_folder(dataset)
    if work is not None:
        Path(work).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="harness-bench-sweep-") if work is None else contextlib.nullcontext(str(work)) as tmp:
        work_dir = Path(tmp)
        result: dict = {
            "dataset": folder.name,
            "mode": "tiny" if tiny else "full",
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine(),
        }
        if "reference" in parts:
            result["reference"] = reference_part(folder, work_dir, ["fixed 400/0", "recursive 400/0"] if tiny else None)
        if "floor" in parts:
            grid = {"chunker.chunk_size": [400], "chunker.chunk_overlap": [0], "retriever": ["faiss", "hybrid"]} if tiny else None
            result["floor"] = floor_part(folder, work_dir, grid)
        result["machine_end"] = machine()
    result["verdicts"] = verdicts(result)
    return result


#: Markers of the generated block in docs/benchmark.md, and the committed result it renders.
MARKERS = (
    "<!-- sweep-cost:start (written by harness bench --sweep-cost --from-json experiments/bench/sweep_cost.json --update-docs) -->",
    "<!-- sweep-cost:end -->",
)
COMMITTED_JSON = Path("experiments") / "bench" / "sweep_cost.json"


def combine(results: Sequence[dict]) -> dict:
    """One result from the results of separate ``--sweep-parts`` runs (each part from the last
    result that has it; the machine of the first, the end machine of the last; verdicts
    recomputed).

    Raises:
        ValueError: no results, or results of different datasets.
    """
    if not results:
        raise ValueError("--from-json: no result to combine")
    if len({r["dataset"] for r in results}) != 1:
        raise ValueError(f"--from-json: results of different datasets {sorted({r['dataset'] for r in results})}")
    out = {k: v for k, v in results[0].items() if k not in SWEEP_PARTS}
    out["machine_end"] = results[-1].get("machine_end", results[-1]["machine"])
    out["started"] = results[0]["started"]
    for r in results:
        out.update({p: r[p] for p in SWEEP_PARTS if p in r})
    out["verdicts"] = verdicts(out)
    return out


def load(paths: Sequence[str | os.PathLike]) -> dict:
    """The combined result of JSON files written by ``--sweep-cost --out FILE``.

    Raises:
        ValueError: a file that cannot be read or holds no measured part (names the file).
    """
    results = []
    for path in paths:
        try:
            result = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--from-json {path}: cannot read a benchmark JSON ({exc})") from None
        if not isinstance(result, dict) or not any(p in result for p in SWEEP_PARTS) or "machine" not in result:
            raise ValueError(f"--from-json {path}: no 'reference' or 'floor' part; expected the output of harness bench --sweep-cost --out FILE")
        results.append(result)
    return combine(results)


def update_docs(result: dict, root: str | os.PathLike | None = None) -> Path:
    """Write :func:`tables` of ``result`` into ``docs/benchmark.md`` between :data:`MARKERS`; returns the file.

    Raises:
        ValueError: the file has no marker block.
    """
    from harness.experiment.build import PROJECT_ROOT

    path = Path(root or PROJECT_ROOT) / "docs" / "benchmark.md"
    text = path.read_text(encoding="utf-8")
    from harness.studies.bench import replace_marked

    path.write_text(replace_marked(text, MARKERS, tables(result), str(path)), encoding="utf-8")
    return path


def generated_block(text: str) -> str | None:
    """The text between :data:`MARKERS` in ``text`` (without the newlines next to them), or None."""
    start, end = MARKERS
    i, j = text.find(start), text.find(end)
    return None if i < 0 or j < i else text[i + len(start) : j].strip("\n")


def verdicts(result: dict) -> dict[str, str]:
    """PASS or FAIL per measured part (ratio <= its limit)."""
    return {part: ("PASS" if result[part]["ratio"] <= LIMITS[part] else "FAIL") for part in SWEEP_PARTS if part in result}


def tables(result: dict) -> str:
    """Markdown of a result: the ratios with their verdicts, then the seconds and counters."""
    m, end = result["machine"], result.get("machine_end", result["machine"])
    lines = [
        f"{result['dataset']}, {result['mode']} mode, started {result['started']}; CPU {m['cpu']} ({m['cpus']} CPUs, AMX: {'yes' if m['amx'] else 'no'}), "
        f"load average {m['load_1m']} at the start, {end['load_1m']} at the end.",
        "",
        "| ratio | value | target | verdict |",
        "|---|---:|---:|---|",
    ]
    ref, flo = result.get("reference"), result.get("floor")
    if ref:
        lines.append(
            f"| {len(ref['configurations'])} reference configurations as one cold multirun / the reference-style pipeline once per configuration "
            f"| {ref['ratio']:.3f} | ≤ {ref['limit']:g} | {result['verdicts']['reference']} |"
        )
    if flo:
        lines.append(
            f"| {flo['jobs']}-job chunk-size × overlap × retriever multirun / encoding floor of its distinct truncated texts "
            f"| {flo['ratio']:.3f} | ≤ {flo['limit']:g} | {result['verdicts']['floor']} |"
        )
    if ref:
        c = ref["counters"]
        lines += [
            "",
            f"Reference: multirun {ref['sweep_s']:.1f} s against {ref['reference_sum_s']:.1f} s for the reference-style processes "
            f"({c['jobs']} jobs; {c['texts_embedded']} texts embedded, {c['cache_hits']} from the cache, {c['texts_shared']} shared by truncated input).",
            "",
            "| configuration | reference-style s | reference-style recall@5 | unlocated chunks | harness recall@5 |",
            "|---|---:|---:|---:|---:|",
        ]
        ours = c.get("recall@5", {})
        for name in ref["configurations"]:
            mine = ours.get(ref["run_names"][name])
            shown = "—" if mine is None else f"{mine:.4f}"
            lines.append(f"| {name} | {ref['reference_s'][name]:.1f} | {ref['reference_recall@5'][name]:.4f} | {ref['reference_unlocated'][name]} | {shown} |")
    if flo:
        c = flo["counters"]
        f = flo["floor"]
        lines += [
            "",
            f"Floor: multirun {flo['sweep_s']:.1f} s against {flo['floor_s']:.1f} s for the floor process ({flo['precision']}; encoding itself "
            f"{f['encode_chunks_s'] + f['encode_queries_s']:.1f} s, model load {f['load_s']:.1f} s, imports {f['import_s']:.1f} s). "
            f"{flo['chunk_texts']} distinct chunk texts over the chunk sets, {flo['distinct_inputs']} distinct model inputs, {flo['questions']} questions; "
            f"the {c['jobs']} jobs embedded {c['texts_embedded']} texts, read {c['cache_hits']} from the cache and shared {c['texts_shared']} by truncated input.",
        ]
    for label, part in (("reference", ref), ("floor", flo)):
        if part and part["counters"].get("phase_s"):
            lines += [
                "",
                f"Logged phases of the {label} multirun's jobs, seconds summed over jobs: "
                + ", ".join(f"{k} {v:.1f}" for k, v in part["counters"]["phase_s"].items())
                + ".",
            ]
    return "\n".join(lines)
