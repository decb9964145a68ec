"""Release gate: ``harness check`` re-runs the candidate settings and tests them against a baseline.

::

    harness check [--gate experiments/gate/kestrel_kb.yaml] [--update-baseline] [hydra overrides ...]

The **gate file** (YAML, see ``experiments/gate/kestrel_kb.yaml``) holds the candidate
settings as Hydra overrides, the path of the committed **baseline** (relative to the gate
file), the guarded metrics with their non-inferiority margins, the one-sided significance
level ``alpha``, the number of bootstrap / sign-flip ``resamples`` and the ``seed``.
Command-line overrides are applied after the gate file's (``chunker.chunk_size=16``,
``tracking.uri=sqlite:///tmp/x/mlflow.db``); ``resume=false`` is always forced so that the
candidate is really run and its per-query results are in hand.

Check (default): validate the gate file, the baseline file and the composed config, load
the dataset and refuse when its fingerprint, its query ids or the metric definitions
(the ``metrics`` config group, ``objective`` aside) differ from the baseline's; then run
the candidate with :func:`harness.experiment.run.execute` (one MLflow run in the configured store),
align the per-query values with the baseline by query id and, for every guarded metric,
run :func:`harness.evaluation.stats.non_inferiority`: ``d_i = candidate_i - baseline_i``, mean
difference, ``1 - 2 alpha`` percentile-bootstrap CI, and the one-sided sign-flip p-value of
``H0: mean(d) <= -margin``. A metric passes when ``p <= alpha``. The report is a markdown
table plus the queries that **flipped from hit to miss**: a query is a *hit* for a metric
when its value is > 0 (some evidence character retrieved in the top k for ``recall@k``; a
relevant chunk in the top k for ``mrr@k`` and ``context_precision@k``) and a flip is a
query that is a hit in the baseline and scores exactly 0 in the candidate. The run is tagged
``gate=pass|fail``, ``gate.role=candidate``, ``gate.file``, ``gate.baseline``,
``gate.baseline_run_id``, ``gate.failed`` and ``gate.<metric>=pass|fail``; the numbers are
logged as metrics ``gate.<metric>.diff|ci_low|ci_high|p`` (``@`` written ``_at_``) and the
report as the artifact ``gate_report.md``.

``--update-baseline`` runs the same settings and (re)writes the baseline file: per-query
values of the guarded metrics with provenance (dataset name and fingerprint, query ids and
texts, config hash, overrides, source run id and experiment, package versions, UTC date).
It prints the old and new means and every provenance field that changed; the check itself
never writes the baseline.

Exit codes: 0 every guarded metric passes (or the baseline was written); 1 at least one
guarded metric fails; 2 the gate could not be evaluated: bad gate file or field, missing or
malformed baseline, bad override or parameter, different dataset, query set or metric
definitions, or a run that raised. Errors found before the run (all but the last) cost no
embedding or indexing.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.evaluation.compare import query_set_difference
from harness.evaluation.stats import query_mean
from harness.experiment.build import PROJECT_ROOT
from harness.params import Param

#: Gate file used when ``--gate`` is not given.
DEFAULT_GATE = PROJECT_ROOT / "experiments" / "gate" / "kestrel_kb.yaml"
#: ``format`` field of baseline files written by this version.
BASELINE_FORMAT = "harness-gate-baseline/1"
#: Keys a gate file may hold (any other key is an error: a typo must not be ignored).
GATE_KEYS = ("description", "overrides", "baseline", "metrics", "alpha", "resamples", "seed")
#: Metric-config keys that do not change a guarded metric's per-query values.
_METRICS_KEYS_IGNORED = ("objective", "convention")  # convention=chroma only adds chroma_* metrics: ours are the same

#: Exit codes.
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class GateError(Exception):
    """The gate cannot be evaluated (bad gate file, baseline, override, dataset): exit code 2."""


# ---------------------------------------------------------------------- gate file


@dataclass(frozen=True)
class Gate:
    """A parsed, validated gate file.

    Attributes:
        path: the gate file.
        overrides: Hydra overrides composing the candidate (on top of ``conf/config.yaml``).
        baseline: absolute path of the baseline JSON file.
        margins: guarded metric name -> non-inferiority margin (>= 0, metric units), in file order.
        alpha: one-sided significance level, in (0, 0.5).
        resamples: bootstrap resamples and random sign patterns, >= 1.
        seed: seed of the resampling, >= 0.
        description: free text shown in the report.
    """

    path: Path
    overrides: tuple[str, ...]
    baseline: Path
    margins: dict[str, float]
    alpha: float
    resamples: int
    seed: int
    description: str = ""


def load_gate(path: str | Path) -> Gate:
    """Read and validate a gate file.

    Fields: ``overrides`` (list of Hydra override strings, optional), ``baseline``
    (path of the baseline JSON, relative to the gate file; required), ``metrics``
    (non-empty mapping metric name -> margin, a number >= 0; required; names are
    validated against the metric registry), ``alpha`` (in (0, 0.5), default 0.05),
    ``resamples`` (integer >= 1, default 10000), ``seed`` (integer >= 0, default 0),
    ``description`` (text, optional).

    Raises:
        GateError: the file is missing or not a YAML mapping, has an unknown key, or a
            field has the wrong type or range; the message names the file and the field.
    """
    import yaml

    from harness.evaluation.metrics import parse_name

    path = Path(path)
    if not path.is_file():
        raise GateError(f"gate file {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GateError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise GateError(f"{path}: a gate file must be a YAML mapping with keys {list(GATE_KEYS)}")
    where = lambda key: f"{path}: field {key!r}"  # noqa: E731
    unknown = sorted(set(map(str, data)) - set(GATE_KEYS))
    if unknown:
        raise GateError(f"{path}: unknown field(s) {unknown}; allowed: {list(GATE_KEYS)}")

    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and o.strip() for o in overrides):
        raise GateError(f"{where('overrides')} must be a list of Hydra override strings such as 'chunker=recursive', got {overrides!r}")

    baseline = data.get("baseline")
    if not isinstance(baseline, str) or not baseline.strip():
        raise GateError(f"{where('baseline')} must be the path of the baseline JSON file (relative to the gate file), got {baseline!r}")

    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise GateError(f"{where('metrics')} must be a non-empty mapping of metric name to margin, e.g. {{'recall@5': 0.02}}, got {metrics!r}")
    margins: dict[str, float] = {}
    for name, margin in metrics.items():
        try:
            parse_name(str(name))
        except ValueError as exc:
            raise GateError(f"{where(f'metrics.{name}')}: {exc}") from exc
        need = "a number >= 0 in the metric's units (e.g. 0.02)"
        Param(where(f"metrics.{name}"), "number", low=0, need=need, error=GateError, message="{name}: the margin must be {need}, got {value!r}").check(margin)
        margins[str(name)] = float(margin)

    alpha = data.get("alpha", 0.05)
    Param(where("alpha"), "number", low=0, high=0.5, low_open=True, high_open=True, noun="a one-sided significance level", error=GateError).check(alpha)
    resamples = data.get("resamples", 10000)
    Param(where("resamples"), "int", low=1, error=GateError).check(resamples)
    seed = data.get("seed", 0)
    Param(where("seed"), "int", low=0, error=GateError).check(seed)
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise GateError(f"{where('description')} must be text, got {description!r}")
    return Gate(
        path=path,
        overrides=tuple(o.strip() for o in overrides),
        baseline=(path.parent / baseline).resolve(),
        margins=margins,
        alpha=float(alpha),
        resamples=int(resamples),
        seed=int(seed),
        description=description.strip(),
    )


# ---------------------------------------------------------------------- baseline file


@dataclass(frozen=True)
class Baseline:
    """A parsed baseline file.

    Attributes:
        path: the file.
        data: its JSON content (provenance fields as written by :func:`baseline_payload`).
        per_query: one row per query: ``query_id``, ``query`` and one column per stored metric.
    """

    path: Path
    data: dict
    per_query: pd.DataFrame

    @property
    def fingerprint(self) -> str:
        return str(self.data["dataset_fingerprint"])

    @property
    def metrics(self) -> list[str]:
        return list(self.data["metrics"])


def load_baseline(path: str | Path, required_metrics: Sequence[str] = ()) -> Baseline:
    """Read and validate a baseline file written by ``--update-baseline``.

    Raises:
        GateError: the file is missing (the message says how to create it), is not JSON,
            has another ``format``, lacks a provenance field, has no or duplicate query
            ids, a non-finite or missing per-query value, or lacks a metric named in
            ``required_metrics`` (the gate guards a metric the baseline did not record).
    """
    path = Path(path)
    if not path.is_file():
        raise GateError(f"baseline file {path} not found; create it from the current settings with `harness check --update-baseline` (and commit it)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GateError(f"baseline {path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise GateError(f"baseline {path}: field 'format' must be {BASELINE_FORMAT!r}, got {got!r}")
    for key in ("dataset", "dataset_fingerprint", "metrics", "queries", "metrics_config"):
        if key not in data:
            raise GateError(f"baseline {path}: field {key!r} is missing")
    if not isinstance(data["metrics"], list) or not data["metrics"]:
        raise GateError(f"baseline {path}: field 'metrics' must be a non-empty list of metric names")
    missing = [m for m in required_metrics if m not in data["metrics"]]
    if missing:
        raise GateError(
            f"baseline {path} has no per-query values for guarded metric(s) {missing} (it holds {data['metrics']}); rewrite it with --update-baseline"
        )
    rows = data["queries"]
    if not isinstance(rows, list) or not rows:
        raise GateError(f"baseline {path}: field 'queries' must be a non-empty list of per-query records")
    table = pd.DataFrame(rows)
    for col in ("query_id", *data["metrics"]):
        if col not in table.columns or table[col].isna().any():
            raise GateError(f"baseline {path}: every record in 'queries' needs a value for {col!r}")
    table["query_id"] = table["query_id"].astype(str)
    dup = table["query_id"][table["query_id"].duplicated()]
    if len(dup):
        raise GateError(f"baseline {path}: query ids repeated in 'queries': {sorted(set(dup))[:5]}")
    for m in data["metrics"]:
        values = pd.to_numeric(table[m], errors="coerce")
        if values.isna().any() or not values.map(math.isfinite).all():
            raise GateError(f"baseline {path}: metric {m!r} has missing or non-finite per-query values")
        table[m] = values.astype(float)
    if "query" not in table.columns:
        table["query"] = ""
    return Baseline(path, data, table)


def baseline_payload(gate: Gate, cli_overrides: Sequence[str], cfg, dataset, run_id: str, experiment: str, per_query: pd.DataFrame) -> dict:
    """The JSON content of a new baseline: provenance plus per-query values of the guarded metrics."""
    from harness.experiment import build
    from harness.experiment.run import package_versions

    metrics = list(gate.margins)
    table = per_query[["query_id", "query", *metrics]]
    return {
        "format": BASELINE_FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "gate_file": _display_path(gate.path),
        "source_run_id": run_id,
        "experiment": experiment,
        "overrides": result_overrides([*gate.overrides, *cli_overrides]),
        "config_hash": build.config_hash(cfg),
        "config": {key: build.to_container(cfg[key]) for key in ("chunker", "embedding", "retriever")},
        "embedding_precision": embedding_precision(cfg),
        "metrics_config": _metrics_config(cfg),
        "dataset": dataset.name,
        "dataset_fingerprint": dataset.fingerprint(),
        "n_queries": len(table),
        "package_versions": package_versions(),
        "python": sys.version.split()[0],
        "metrics": metrics,
        "means": {m: query_mean(table[m], m)[0] for m in metrics},
        "queries": [{"query_id": str(r["query_id"]), "query": str(r["query"]), **{m: float(r[m]) for m in metrics}} for r in table.to_dict(orient="records")],
    }


def embedding_precision(cfg) -> str | None:
    """The precision the candidate's embedding model runs at here (``fp32``, ``bf16`` or ``int8``,
    ``embedding.precision`` resolved by :func:`harness.runtime.resolve_precision`); None for
    a backend without the setting (``static``, ``openai``)."""
    from harness.runtime import PRECISIONS, resolve_precision

    precision = cfg.embedding.get("precision") if "embedding" in cfg and cfg.embedding is not None else None
    if precision not in PRECISIONS:
        return None
    return resolve_precision(precision, str(cfg.embedding.get("device", "cpu")))


def baseline_precision(baseline: "Baseline") -> str | None:
    """The embedding precision the baseline was recorded at: its ``embedding_precision``;
    ``fp32`` for a sentence-transformers baseline written before the setting existed."""
    if "embedding_precision" in baseline.data:
        return baseline.data["embedding_precision"]
    target = ((baseline.data.get("config") or {}).get("embedding") or {}).get("_target_")
    return "fp32" if target == "harness.embeddings.model.Encoder" else None


def precision_line(baseline: "Baseline", candidate: str | None) -> str:
    """One report line stating both precisions, with a warning when they differ."""
    recorded = baseline_precision(baseline)
    line = f"embedding precision: baseline {recorded or 'n/a'}, candidate {candidate or 'n/a'}"
    if recorded != candidate:
        line += (
            " (differs: bf16 moves vectors by cosine ~1e-4, int8 by several hundredths, so per-query values may differ from precision alone; "
            "pin embedding.precision in the gate's overrides)"
        )
    return line


def result_overrides(overrides: Sequence[str]) -> list[str]:
    """Overrides that can change results: those of ``tracking``, ``cache``, ``paths`` and
    ``embedding.show_progress`` are dropped (they hold machine paths and are not part of
    the config hash)."""
    skip = ("tracking", "cache", "paths", "embedding.show_progress")
    out = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if not any(key == s or key.startswith(s + ".") for s in skip):
            out.append(o)
    return out


def write_baseline(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON atomically (temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644  # mkstemp's 0600 would stick
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".part", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def describe_changes(old: Baseline | None, new: dict) -> str:
    """What a baseline update changes: old vs new mean per metric, then changed provenance fields."""
    lines = []
    if old is None:
        lines.append("no previous baseline: writing a new one")
        lines.append("")
        lines.append("| metric | new mean |")
        lines.append("|---|---:|")
        lines += [f"| {m} | {v:.4f} |" for m, v in new["means"].items()]
        return "\n".join(lines)
    old_means = {m: query_mean(old.per_query[m], m)[0] for m in old.metrics}
    old_values = old.per_query.set_index("query_id")
    new_values = {q["query_id"]: q for q in new["queries"]}
    shared = [q for q in old_values.index if q in new_values]
    lines.append("| metric | old mean | new mean | change | queries changed |")
    lines.append("|---|---:|---:|---:|---:|")
    for m in dict.fromkeys([*new["metrics"], *old.metrics]):
        o, n = old_means.get(m), new["means"].get(m)
        fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
        if o is not None and n is not None:
            change = f"{n - o:+.4f}"
            moved = sum(1 for q in shared if float(old_values.loc[q, m]) != float(new_values[q][m]))
            count = f"{moved} of {len(shared)}"
        else:
            change, count = ("added" if o is None else "dropped"), "—"
        lines.append(f"| {m} | {fmt(o)} | {fmt(n)} | {change} | {count} |")
    changed = []
    for key in ("dataset", "dataset_fingerprint", "n_queries", "config_hash", "overrides", "metrics_config", "config"):
        if old.data.get(key) != new.get(key):
            changed.append(f"  {key}: {json.dumps(old.data.get(key), sort_keys=True)} -> {json.dumps(new.get(key), sort_keys=True)}")
    old_versions, new_versions = old.data.get("package_versions") or {}, new.get("package_versions") or {}
    for pkg in sorted(set(old_versions) | set(new_versions)):
        if old_versions.get(pkg) != new_versions.get(pkg):
            changed.append(f"  version of {pkg}: {old_versions.get(pkg)} -> {new_versions.get(pkg)}")
    old_ids = set(old.per_query["query_id"])
    new_ids = {q["query_id"] for q in new["queries"]}
    if old_ids != new_ids:
        changed.append(f"  queries: {len(old_ids - new_ids)} removed, {len(new_ids - old_ids)} added")
    if changed:
        lines.append("")
        lines.append("changed since the previous baseline (previous run " + str(old.data.get("source_run_id")) + "):")
        lines += changed
    else:
        lines.append("")
        lines.append("provenance unchanged (dataset, queries, config hash, overrides, package versions)")
    return "\n".join(lines)


# ---------------------------------------------------------------------- candidate config


def _metrics_config(cfg) -> dict:
    """The ``metrics`` config group without keys that do not change per-query values."""
    from harness.experiment import build

    return {k: v for k, v in build.to_container(cfg.metrics).items() if k not in _METRICS_KEYS_IGNORED}


def _display_path(path: Path) -> str:
    """``path`` relative to the project when inside it (provenance without machine paths)."""
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def compose_candidate(gate: Gate, cli_overrides: Sequence[str], run_name_prefix: str):
    """Compose the candidate config (gate overrides, then command-line ones, then ``resume=false``).

    Sets ``tracking.run_name`` to ``<prefix>-<usual run name>`` and ``tracking.purpose`` to
    ``gate`` (the run's ``harness.purpose`` tag) unless an override sets them.

    Raises:
        GateError: an override Hydra cannot parse or apply (the message names it), or a
            sweep override (``a=1,2``: the gate runs one configuration).
    """
    from omegaconf import open_dict

    from harness.experiment import build
    from harness.experiment.config import compose

    overrides = [*gate.overrides, *cli_overrides]
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in ("hydra", "resume") or key.startswith("hydra."):
            raise GateError(f"override {o!r}: the gate sets {key} itself; remove it")
    try:
        cfg = compose([*overrides, "resume=false"])
    except Exception as exc:  # hydra raises several exception types for bad overrides
        raise GateError(f"cannot compose the candidate config from overrides {overrides}: {type(exc).__name__}: {exc}") from exc
    with open_dict(cfg):
        if not cfg.tracking.get("run_name"):
            cfg.tracking.run_name = f"{run_name_prefix}-{build.run_name(cfg)}"
        if not cfg.tracking.get("purpose"):
            cfg.tracking.purpose = "gate"  # tag harness.purpose=gate: out of harness compare's listing
    return cfg


def validate_candidate(cfg, gate: Gate):
    """Check parameters and guarded metrics against the composed config, then load the dataset.

    Cheap: builds the (lazy) encoder, the chunker and the retriever to validate their
    parameters, and reads the dataset; nothing is embedded or indexed.

    Returns:
        The loaded :class:`harness.types.Dataset`.

    Raises:
        GateError: a metrics setting or a chunker/retriever parameter is invalid; a guarded
            metric's k is not in ``metrics.ks`` or its budget not in ``metrics.budgets`` or
            it needs ``metrics.level=document``; the dataset fails to load or verify.
    """
    from harness.evaluation.metrics import parse_name
    from harness.experiment import build
    from harness.experiment.settings import metric_settings

    try:
        metrics = metric_settings(cfg)
        encoder = build.build_encoder(cfg)
        build.build_chunker(cfg, encoder)
        build.build_retriever(cfg, encoder)
    except (ValueError, TypeError) as exc:
        raise GateError(f"candidate config: {exc}") from exc
    ks, budgets, level = list(metrics.ks), list(metrics.budgets), metrics.level
    for name in gate.margins:
        parsed = parse_name(name)
        field = f"{gate.path}: field 'metrics.{name}'"
        if parsed.k is not None and parsed.k not in ks:
            raise GateError(f"{field}: k={parsed.k} is not in metrics.ks={ks}")
        if parsed.budget is not None and parsed.budget not in budgets:
            raise GateError(f"{field}: budget {parsed.budget} is not in metrics.budgets={budgets}")
        if parsed.family.level == "document" and level != "document":
            raise GateError(f"{field}: a document-level metric needs metrics.level=document")
    try:
        return build.build_dataset(cfg)
    except Exception as exc:  # loaders raise ValueError/FileNotFoundError/... naming the dataset
        raise GateError(f"dataset {cfg.dataset.get('name', '?')!r} could not be loaded: {type(exc).__name__}: {exc}") from exc


def check_same_data(baseline: Baseline, dataset, cfg) -> None:
    """Refuse a candidate on other data or metric definitions than the baseline's.

    Raises:
        GateError: different dataset fingerprint (documents, queries or evidence changed),
            different query id sets (counts and a few ids on each side), or a different
            ``metrics`` config group (the keys that differ).
    """
    fp = dataset.fingerprint()
    if fp != baseline.fingerprint:
        raise GateError(
            f"the candidate's dataset {dataset.name!r} has fingerprint {fp}, the baseline {baseline.path} was made on "
            f"{baseline.data['dataset']!r} with fingerprint {baseline.fingerprint}: documents, queries or evidence differ, "
            f"so per-query values cannot be paired; gate the same dataset or rewrite the baseline with --update-baseline"
        )
    ids = {q.query_id for q in dataset.queries}
    base_ids = set(baseline.per_query["query_id"])
    if ids != base_ids:
        raise GateError(
            f"different query sets: the baseline has {len(base_ids)} queries, the candidate's dataset {len(ids)}; "
            + query_set_difference(base_ids, ids, "the candidate")
        )
    ours, theirs = _metrics_config(cfg), baseline.data["metrics_config"]
    if ours != theirs:
        diff = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        detail = "; ".join(f"metrics.{k}: baseline {theirs.get(k)!r}, candidate {ours.get(k)!r}" for k in diff)
        raise GateError(f"metric definitions differ from the baseline's ({detail}); values would not be comparable")


# ---------------------------------------------------------------------- the run and the verdict


def run_candidate(cfg) -> tuple[str, pd.DataFrame, str, str]:
    """Run ``cfg`` with :func:`harness.experiment.run.execute`; return ``(run_id, per_query, tracking_uri, experiment)``.

    Per-query values come from the returned evaluation, or, when ``execute`` returned none
    (a resumed run), from the run's ``per_query.csv`` artifact.

    Raises:
        GateError: the run raised (it is recorded FAILED in MLflow) or has no per-query table.
    """
    from harness.experiment import build
    from harness.experiment.run import execute
    from harness.tracking.runs import experiment_name
    from harness.tracking.tracker import resolve_tracking_uri

    try:
        result = execute(cfg)
    except Exception as exc:
        raise GateError(f"the candidate run failed: {type(exc).__name__}: {exc}") from exc
    uri = resolve_tracking_uri(cfg.tracking.uri, build.PROJECT_ROOT)
    experiment = experiment_name(cfg)
    evaluation = result.get("evaluation")
    if evaluation is not None:
        per_query = evaluation.per_query.copy()
    else:
        from harness.evaluation.compare import CompareError
        from harness.tracking.runs import load_run

        with tempfile.TemporaryDirectory() as tmp:
            try:
                per_query = load_run(uri, result["run_id"], tmp).per_query
            except CompareError as exc:
                raise GateError(str(exc)) from exc
    per_query["query_id"] = per_query["query_id"].astype(str)
    return result["run_id"], per_query, uri, experiment


def evaluate_gate(gate: Gate, baseline: Baseline, candidate: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Non-inferiority test per guarded metric, and the queries that flipped from hit to miss.

    Args:
        gate: margins, alpha, resamples, seed.
        baseline: the baseline (its query ids must equal the candidate's).
        candidate: per-query table with ``query_id``, ``query`` and the guarded metrics.

    Returns:
        ``(results, flips)``. ``results``: one row per guarded metric with ``metric``,
        ``baseline``, ``candidate``, ``diff``, ``ci_low``, ``ci_high``, ``p``, ``margin``,
        ``W``, ``T``, ``L``, ``n``, ``verdict`` (``pass``/``fail``). ``flips``: one row per
        query that flipped for at least one metric: ``query_id``, ``metrics`` (comma
        separated), ``query`` (the question text), in baseline order.

    Raises:
        GateError: query ids differ, or a guarded metric is missing from the candidate table
            or has missing values.
    """
    from harness.evaluation.stats import non_inferiority

    order = baseline.per_query["query_id"].tolist()
    cand_ids = set(candidate["query_id"])
    if cand_ids != set(order) or candidate["query_id"].duplicated().any():
        raise GateError(f"the candidate run scored {len(cand_ids)} queries, the baseline holds {len(order)}; query ids differ")
    cand = candidate.set_index("query_id").loc[order]
    base = baseline.per_query.set_index("query_id").loc[order]
    rows = []
    flipped: dict[str, list[str]] = {}
    for metric, margin in gate.margins.items():
        if metric not in cand.columns:
            raise GateError(f"the candidate run has no per-query column {metric!r}")
        values = pd.to_numeric(cand[metric], errors="coerce")
        if values.isna().any():
            raise GateError(f"the candidate run has {int(values.isna().sum())} missing values of {metric!r}")
        res = non_inferiority(base[metric].to_numpy(float), values.to_numpy(float), margin, gate.alpha, gate.resamples, gate.seed)
        rows.append(
            {
                "metric": metric,
                "baseline": res.mean_baseline,
                "candidate": res.mean_candidate,
                "diff": res.diff,
                "ci_low": res.ci_low,
                "ci_high": res.ci_high,
                "p": res.p_value,
                "margin": margin,
                "W": res.wins,
                "T": res.ties,
                "L": res.losses,
                "n": res.n,
                "verdict": "pass" if res.passed else "fail",
            }
        )
        hit_to_miss = (base[metric].to_numpy(float) > 0) & (values.to_numpy(float) <= 0)
        for qid in base.index[hit_to_miss]:
            flipped.setdefault(qid, []).append(metric)
    flips = pd.DataFrame(
        [
            {"query_id": q, "metrics": ", ".join(flipped[q]), "query": str(cand.loc[q, "query"]) if "query" in cand.columns else ""}
            for q in order
            if q in flipped
        ],
        columns=["query_id", "metrics", "query"],
    )
    return pd.DataFrame(rows), flips


def format_report(gate: Gate, baseline: Baseline, results: pd.DataFrame, flips: pd.DataFrame, run_id: str, precision: str | None = None) -> str:
    """Markdown report: header, the embedding precisions, the results table, the verdict and
    the hit-to-miss queries. ``precision``: the candidate's resolved embedding precision."""
    level = round(100 * (1 - 2 * gate.alpha), 6)
    passed = bool((results["verdict"] == "pass").all())
    lines = [
        f"## Release gate: {'PASS' if passed else 'FAIL'}",
        "",
        f"gate {_display_path(gate.path)}; baseline {_display_path(baseline.path)} (run {baseline.data.get('source_run_id')}, "
        f"{baseline.data.get('created')}); candidate run {run_id}; {len(baseline.per_query)} paired queries",
        f"diff = candidate - baseline; {level:g}% percentile-bootstrap CI; p = one-sided sign-flip p of "
        f"H0 diff <= -margin; pass when p <= alpha = {gate.alpha:g}; resamples {gate.resamples}, seed {gate.seed}",
        precision_line(baseline, precision),
        "",
        f"| metric | baseline | candidate | diff | {level:g}% CI | p | margin | W/T/L | verdict |",
        "|---|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for r in results.to_dict(orient="records"):
        lines.append(
            f"| {r['metric']} | {r['baseline']:.4f} | {r['candidate']:.4f} | {r['diff']:+.4f} | "
            f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] | {r['p']:.4f} | {r['margin']:g} | {r['W']}/{r['T']}/{r['L']} | {r['verdict']} |"
        )
    lines.append("")
    if flips.empty:
        lines.append("No query flipped from hit (value > 0 in the baseline) to miss (0 in the candidate).")
    else:
        lines.append(f"{len(flips)} queries flipped from hit (value > 0 in the baseline) to miss (0 in the candidate):")
        lines.append("")
        lines.append("| query_id | metrics | question |")
        lines.append("|---|---|---|")
        for r in flips.to_dict(orient="records"):
            question = str(r["query"]).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r['query_id']} | {r['metrics']} | {question} |")
    return "\n".join(lines)


_XML_ILLEGAL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(value: Any) -> str:
    """``value`` as text XML 1.0 can hold: characters it forbids (control characters) become U+FFFD."""
    return _XML_ILLEGAL.sub("\ufffd", str(value))


def _flip_lines(flips: pd.DataFrame, metric: str) -> list[str]:
    """One line ``<query_id>: <question>`` per query that flipped from hit to miss for ``metric``."""
    out = []
    for r in flips.to_dict(orient="records"):
        if metric in [m.strip() for m in str(r["metrics"]).split(",")]:
            question = " ".join(str(r["query"]).split())
            out.append(f"{r['query_id']}: {question}")
    return out


def junit_xml(gate: Gate | None, results: pd.DataFrame | None, flips: pd.DataFrame | None, error: str | None = None, seconds: float = 0.0) -> str:
    """The gate's verdict as JUnit XML (the format CI systems show as test results).

    One ``<testsuite name="harness check">`` in a ``<testsuites>`` root, one ``<testcase>``
    per guarded metric (``classname`` ``gate.<gate file stem>``, ``name`` the metric, in the
    gate file's order). A failing metric holds a ``<failure>`` whose ``message`` gives the
    mean difference, CI, p, alpha and margin and whose text lists the queries that flipped
    from hit to miss for it, one ``<query_id>: <question>`` a line; a passing metric lists
    its flips (if any) in ``<system-out>``. When the gate could not be evaluated (exit 2)
    pass ``error``: a single ``<testcase name="gate">`` holds an ``<error>`` with it.
    Characters XML 1.0 forbids are replaced by U+FFFD, so the output always parses.

    Args:
        gate: the gate (None with ``error``).
        results, flips: :func:`evaluate_gate`'s tables (None with ``error``).
        error: the one-line reason the gate could not be evaluated.
        seconds: wall time of the check, written as ``time`` (seconds).

    Returns:
        The XML document as text (UTF-8 declaration included).
    """
    import xml.etree.ElementTree as ET

    classname = f"gate.{gate.path.stem}" if gate is not None else "gate"
    root = ET.Element("testsuites", name="harness check")
    suite = ET.SubElement(root, "testsuite", name="harness check")
    n_failures = n_errors = 0
    cases = []
    if error is not None or results is None:
        case = ET.Element("testcase", classname=classname, name="gate", time="0")
        ET.SubElement(case, "error", message=_xml_text(error or "the gate was not evaluated"), type="GateError")
        cases.append(case)
        n_errors = 1
    else:
        level = round(100 * (1 - 2 * gate.alpha), 6)
        for r in results.to_dict(orient="records"):
            case = ET.Element("testcase", classname=classname, name=_xml_text(r["metric"]), time="0")
            lines = _flip_lines(flips, r["metric"]) if flips is not None else []
            numbers = (
                f"diff {r['diff']:+.4f} (baseline {r['baseline']:.4f}, candidate {r['candidate']:.4f}), "
                f"{level:g}% CI [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}], p {r['p']:.4f}, alpha {gate.alpha:g}, margin {r['margin']:g}, "
                f"W/T/L {r['W']}/{r['T']}/{r['L']}"
            )
            if r["verdict"] == "fail":
                n_failures += 1
                failure = ET.SubElement(case, "failure", message=_xml_text(f"{r['metric']} not shown non-inferior: {numbers}"), type="regression")
                head = (
                    f"{len(lines)} queries flipped from hit (> 0 in the baseline) to miss (0 in the candidate):"
                    if lines
                    else "no query flipped from hit to miss"
                )
                failure.text = _xml_text("\n".join([head, *lines]))
            elif lines:
                ET.SubElement(case, "system-out").text = _xml_text("\n".join([f"{len(lines)} queries flipped from hit to miss ({numbers}):", *lines]))
            cases.append(case)
    for element in (root, suite):
        element.set("tests", str(len(cases)))
        element.set("failures", str(n_failures))
        element.set("errors", str(n_errors))
        element.set("time", f"{seconds:.3f}")
    suite.extend(cases)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True).decode("utf-8") + "\n"


def record_in_mlflow(uri: str, run_id: str, tags: dict[str, str], metrics: dict[str, float] | None = None, report: str | None = None) -> None:
    """Add the gate's tags, metrics and report (``gate_report.md``) to the finished run ``run_id``.

    Written through :func:`harness.tracking.runs.annotate_run` (the signal-safe client of
    the runs: a Ctrl-C here cannot leave the SQLite store locked).
    """
    from harness.tracking.runs import annotate_run

    annotate_run(uri, run_id, tags=tags, metrics=metrics, texts=None if report is None else {"gate_report.md": report})


# ---------------------------------------------------------------------- the two verbs


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`check` found.

    Attributes:
        passed: every guarded metric passed.
        report: the markdown report (:func:`format_report`).
        run_id: the candidate's MLflow run.
        tracking_uri: the store it is in.
        tags: the tags set on the run (``gate=pass|fail`` and the rest, see the module docstring).
        results, flips: :func:`evaluate_gate`'s tables (for :func:`junit_xml`).
    """

    passed: bool
    report: str
    run_id: str
    tracking_uri: str
    tags: dict
    results: pd.DataFrame | None = None
    flips: pd.DataFrame | None = None

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_PASS` or :data:`EXIT_FAIL`."""
        return EXIT_PASS if self.passed else EXIT_FAIL


@dataclass(frozen=True)
class BaselineUpdate:
    """What :func:`update_baseline` wrote.

    Attributes:
        path: the baseline file written.
        summary: old vs new means and the provenance that changed (:func:`describe_changes`).
        run_id: the MLflow run the values come from.
        tracking_uri: the store it is in.
        n_queries: queries in the new baseline.
    """

    path: Path
    summary: str
    run_id: str
    tracking_uri: str
    n_queries: int


def check(gate: Gate, cli_overrides: Sequence[str] = ()) -> GateOutcome:
    """Run the gate's candidate settings (plus ``cli_overrides``) and test them against the
    baseline; tag the run, log the numbers and the report on it (module docstring).

    Raises:
        GateError: the gate could not be evaluated (bad baseline, config, data or a failed run).
    """
    from harness.evaluation.metrics import mlflow_key

    baseline = load_baseline(gate.baseline, list(gate.margins))
    cfg = compose_candidate(gate, cli_overrides, "gate")
    dataset = validate_candidate(cfg, gate)
    check_same_data(baseline, dataset, cfg)
    run_id, per_query, uri, _ = run_candidate(cfg)
    results, flips = evaluate_gate(gate, baseline, per_query)
    report = format_report(gate, baseline, results, flips, run_id, embedding_precision(cfg))
    passed = bool((results["verdict"] == "pass").all())
    failed = results.loc[results["verdict"] == "fail", "metric"].tolist()
    tags = {
        "gate": "pass" if passed else "fail",
        "gate.role": "candidate",
        "gate.file": _display_path(gate.path),
        "gate.baseline": _display_path(gate.baseline),
        "gate.baseline_run_id": str(baseline.data.get("source_run_id")),
        "gate.failed": ",".join(failed),
        "gate.flipped_queries": str(len(flips)),
        **{f"gate.{mlflow_key(r['metric'])}": r["verdict"] for r in results.to_dict(orient="records")},
    }
    numbers = {}
    for r in results.to_dict(orient="records"):
        for name in ("diff", "ci_low", "ci_high", "p"):
            numbers[f"gate.{r['metric']}.{name}"] = r[name]
    record_in_mlflow(uri, run_id, tags, numbers, report)
    return GateOutcome(passed, report, run_id, uri, tags, results, flips)


def update_baseline(gate: Gate, cli_overrides: Sequence[str] = (), warn=None) -> BaselineUpdate:
    """Run the gate's settings (plus ``cli_overrides``) and (re)write its baseline file; tag
    the run ``gate.role=baseline``.

    Args:
        gate: the gate whose ``baseline`` file is written.
        cli_overrides: Hydra overrides after the gate file's.
        warn: called with a one-line message when the existing baseline cannot be read (it
            is replaced); None: ignore.

    Raises:
        GateError: bad config or data, a failed run, or a guarded metric the run lacks.
    """
    old = None
    if gate.baseline.is_file():
        try:
            old = load_baseline(gate.baseline)
        except GateError as exc:
            if warn is not None:
                warn(f"the existing baseline cannot be read and will be replaced: {exc}")
    cfg = compose_candidate(gate, cli_overrides, "baseline")
    dataset = validate_candidate(cfg, gate)
    run_id, per_query, uri, experiment = run_candidate(cfg)
    missing = [m for m in gate.margins if m not in per_query.columns]
    if missing:
        raise GateError(f"the run has no per-query column(s) {missing}")
    payload = baseline_payload(gate, cli_overrides, cfg, dataset, run_id, experiment, per_query)
    summary = describe_changes(old, payload)
    write_baseline(gate.baseline, payload)
    record_in_mlflow(uri, run_id, {"gate.role": "baseline", "gate.file": _display_path(gate.path), "gate.baseline": _display_path(gate.baseline)})
    return BaselineUpdate(gate.baseline, summary, run_id, uri, len(per_query))
