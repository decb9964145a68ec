"""Compare logged runs: list an experiment's runs as a table, or test paired differences.

Listing: ``harness compare list [--experiment NAME] [--sort METRIC]
[--filter "tags.chunker = 'fixed'"] [--tag KEY=VALUE ...] [--k 5] [--format markdown|csv]
[--limit N]`` prints one row per FINISHED run of the experiment (default: the experiment
``python -m harness.run`` logs to with the project's default config), with chunker, size,
overlap, unit, retriever, ``recall@k``, ``precision@k``, ``context_precision@k``, ``iou@k``,
the run time ``time.total_s`` in seconds, run name and id; see :func:`runs_table` (the runs are
read by :func:`harness.tracking.runs.list_runs`: this module does no MLflow call).

Paired comparison: ``harness compare runs RUN_A RUN_B [RUN_C ...]``.

The first run is the baseline; every other run is compared with it on the same queries,
metric by metric, using each run's ``per_query.csv`` artifact (read by
:func:`harness.tracking.runs.load_run`):

- ``diff``: mean over queries of ``other - baseline`` (> 0: the other run scores higher);
- ``ci_low``/``ci_high``: percentile-bootstrap interval of ``diff`` at level ``1 - alpha``,
  resampling queries (Efron & Tibshirani 1993);
- ``p``: two-sided paired sign-flip permutation p-value (exact when ``2**n <= --resamples``);
- ``p_holm``: Holm-adjusted p over the runs compared with the baseline *for that metric*
  (the family is the m = #runs - 1 comparisons of one metric; metrics are separate
  families because they are different questions about the same rankings);
- ``W/T/L``: queries where the other run is higher / equal / lower;
- ``sig``: ``*`` when ``p_holm <= alpha``.

See :mod:`harness.evaluation.stats` for the methods. Runs are refused (exit code 2, message on stderr)
when their ``dataset_fingerprint`` tags differ or are missing, when their query id sets
differ, or when a requested metric is missing. Example::

    harness compare runs 3f2a... 9b7c... --metrics recall@5 iou@5 --json cmp.json
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import pandas as pd

from harness.evaluation.metrics import families as metric_families
from harness.evaluation.stats import holm, paired_comparison
from harness.params import Param, check_all

#: Metrics compared when ``--metrics`` is not given (those present in every run are used).
DEFAULT_METRICS = (
    "recall@5",
    "recall@10",
    "recall@1024tok",  # equal context budget: large chunks cannot win merely by being large
    "precision@5",
    "iou@5",
    "precision_omega",
    "context_precision@5",
    "mrr@10",
    "ndcg@10",
)

#: Name of the per-query artifact written by :func:`harness.experiment.run.execute`.
PER_QUERY_ARTIFACT = "per_query.csv"


class CompareError(Exception):
    """Runs that cannot be compared (different datasets, query sets, missing data)."""


@dataclass
class LoggedRun:
    """One run as read back from MLflow: id, display name, dataset fingerprint, per-query table."""

    run_id: str
    name: str
    fingerprint: str | None
    per_query: pd.DataFrame

    @property
    def label(self) -> str:
        return f"{self.name} ({self.run_id[:8]})"


def query_set_difference(baseline_ids: set[str], other_ids: set[str], other: str) -> str:
    """``"<n> only in the baseline [...], <m> only in <other> [...]"``: the sizes of the two
    one-sided differences of two query-id sets and the first five ids of each, sorted; the
    tail of the messages that refuse to pair runs on different query sets."""
    only_base, only_other = sorted(baseline_ids - other_ids), sorted(other_ids - baseline_ids)
    return f"{len(only_base)} only in the baseline {only_base[:5]}, {len(only_other)} only in {other} {only_other[:5]}"


def check_comparable(runs: Sequence[LoggedRun]) -> None:
    """Refuse runs that were not evaluated on the same dataset and the same queries.

    Raises:
        CompareError: a run lacks the ``dataset_fingerprint`` tag; fingerprints differ;
            a run has duplicate query ids; or query id sets differ (the message gives
            counts and a few ids missing on each side).
    """
    base = runs[0]
    for r in runs:
        if not r.fingerprint:
            raise CompareError(f"run {r.label} has no dataset_fingerprint tag, so its dataset cannot be checked")
    for r in runs[1:]:
        if r.fingerprint != base.fingerprint:
            raise CompareError(
                f"runs are on different datasets: baseline {base.label} has dataset_fingerprint {base.fingerprint}, "
                f"{r.label} has {r.fingerprint}; a paired comparison needs the same documents, queries and evidence"
            )
    for r in runs:
        dup = r.per_query["query_id"][r.per_query["query_id"].duplicated()]
        if len(dup):
            raise CompareError(f"run {r.label}: {PER_QUERY_ARTIFACT} repeats query ids {sorted(set(dup))[:5]}")
    base_ids = set(base.per_query["query_id"])
    for r in runs[1:]:
        ids = set(r.per_query["query_id"])
        if ids != base_ids:
            raise CompareError(
                f"runs have different query sets: baseline {base.label} has {len(base_ids)} queries, {r.label} has {len(ids)}; "
                + query_set_difference(base_ids, ids, r.label)
            )


def select_metrics(runs: Sequence[LoggedRun], requested: Sequence[str] | None) -> list[str]:
    """Metric columns to compare: ``requested`` (each must exist in every run), else the
    :data:`DEFAULT_METRICS` present in every run, else every shared numeric ``name@k`` column.

    Raises:
        CompareError: a requested metric is missing from a run, or nothing to compare.
    """
    common = set.intersection(*(set(r.per_query.columns) for r in runs))
    if requested:
        for r in runs:
            missing = [m for m in requested if m not in r.per_query.columns]
            if missing:
                available = sorted(c for c in r.per_query.columns if "@" in c)
                raise CompareError(f"metric(s) {missing} not in {PER_QUERY_ARTIFACT} of run {r.label}; available: {available}")
        return list(dict.fromkeys(requested))
    chosen = [m for m in DEFAULT_METRICS if m in common]
    if not chosen:
        base_cols = runs[0].per_query.columns
        chosen = [c for c in base_cols if c in common and "@" in c and pd.api.types.is_numeric_dtype(runs[0].per_query[c])]
    if not chosen:
        raise CompareError(f"no metric column shared by all runs in {PER_QUERY_ARTIFACT}")
    return chosen


def compare_runs(runs: Sequence[LoggedRun], metrics: Sequence[str], n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict[str, pd.DataFrame]:
    """One table per metric: a row per non-baseline run, compared with ``runs[0]``.

    Queries are aligned by ``query_id``. Columns: ``run``, ``baseline``, ``mean``,
    ``diff``, ``ci_low``, ``ci_high`` (level ``1 - alpha``), ``p``, ``p_holm``, ``W``,
    ``T``, ``L``, ``sig`` (``"*"`` when ``p_holm <= alpha``), ``n``.

    Raises:
        ValueError: ``alpha`` outside (0, 1); a metric column with missing or
            non-numeric values (the message names run and metric).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if len(runs) < 2:
        raise ValueError(f"need a baseline and at least one other run, got {len(runs)} run(s)")
    order = runs[0].per_query["query_id"].tolist()
    aligned = [r.per_query.set_index("query_id").loc[order] for r in runs]
    tables = {}
    for metric in metrics:
        cols = []
        for r, t in zip(runs, aligned):
            col = pd.to_numeric(t[metric], errors="coerce")
            if col.isna().any():
                raise ValueError(f"run {r.label}: metric {metric!r} has {int(col.isna().sum())} missing or non-numeric per-query values")
            cols.append(col.to_numpy(dtype=float))
        rows = []
        for r, values in zip(runs[1:], cols[1:]):
            res = paired_comparison(cols[0], values, n_resamples=n_resamples, confidence=1.0 - alpha, seed=seed)
            rows.append(
                {
                    "run": r.label,
                    "baseline": res.mean_a,
                    "mean": res.mean_b,
                    "diff": res.diff,
                    "ci_low": res.ci_low,
                    "ci_high": res.ci_high,
                    "p": res.p_value,
                    "W": res.wins,
                    "T": res.ties,
                    "L": res.losses,
                    "n": res.n,
                }
            )
        table = pd.DataFrame(rows)
        table.insert(table.columns.get_loc("p") + 1, "p_holm", holm(table["p"].tolist()))
        table.insert(table.columns.get_loc("L") + 1, "sig", ["*" if p <= alpha else "" for p in table["p_holm"]])
        tables[metric] = table
    return tables


def format_tables(tables: dict[str, pd.DataFrame], baseline: LoggedRun, alpha: float, n_resamples: int, seed: int) -> str:
    """Plain-text report: a header and one table per metric."""
    n = len(baseline.per_query)
    lines = [
        f"baseline: {baseline.label}; {n} paired queries; diff = other - baseline; "
        f"{100 * (1 - alpha):g}% bootstrap CI; two-sided sign-flip permutation p; "
        f"Holm over {len(next(iter(tables.values())))} comparison(s) per metric; "
        f"* = p_holm <= {alpha:g}; resamples {n_resamples}, seed {seed}"
    ]
    for metric, table in tables.items():
        shown = table.drop(columns=["n"])
        lines.append(f"\n{metric}")
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- top set of a sweep


@dataclass(frozen=True)
class TieBreaker:
    """What one tie-breaker would choose among a sweep's top set (:func:`tie_breakers`).

    Attributes:
        rule: the rule in words (``fewest context tokens``, ``fewest chunks``, ``best context_precision@5``).
        metric: the value compared (``context_tokens@5``: mean tokens handed to the generator
            per query; ``chunks.n_chunks``: chunks in the index; a metric name).
        lower: True when the smallest value wins.
        values: member -> value (members without the value are left out).
        choice: the member it chooses (ties: the smallest key), or None when no member has the value.
    """

    rule: str
    metric: str
    lower: bool
    values: Mapping
    choice: object | None


def _cutoff(objective: str) -> str:
    k = objective.rsplit("@", 1)[1] if "@" in objective else ""
    return k if k.isdigit() else "5"


def second_metric_for(objective: str, second_metric: str | None = None) -> str:
    """The tie-breaker metric: ``second_metric`` when given, else ``context_precision@k`` at the
    objective's cut-off (k = 5 without one), or ``recall@k`` when that is the objective itself."""
    if second_metric:
        return second_metric
    k = _cutoff(objective)
    return f"recall@{k}" if objective == f"context_precision@{k}" else f"context_precision@{k}"


def tie_breakers(members: Sequence, values: Mapping[object, Mapping[str, float]], objective: str, second_metric: str | None = None) -> list[TieBreaker]:
    """For a top set of more than one job, which member each tie-breaker would choose.

    Three rules, in this order: fewest context tokens (``context_tokens@k`` at the
    objective's cut-off: tokens of the top-k chunks a generator would read, mean per query),
    fewest chunks (``chunks.n_chunks``: a smaller index), and the best value of a second metric
    (:func:`second_metric_for`; highest, lowest for ``context_tokens@k``). They answer "which of
    the statistically tied settings is cheaper or better on another axis"; none is applied
    automatically.

    Args:
        members: keys of the top set (job numbers).
        values: key -> metric name (or ``chunks.n_chunks``) -> value; a missing or non-finite
            value leaves that member out of that rule.
        objective: the sweep's objective (its cut-off sets k).
        second_metric: the third rule's metric (None: :func:`second_metric_for`).
    """
    import math

    k = _cutoff(objective)
    second = second_metric_for(objective, second_metric)
    rules = [
        ("fewest context tokens", f"context_tokens@{k}", True),
        ("fewest chunks", "chunks.n_chunks", True),
        (f"best {second}", second, second.split("@", 1)[0] == "context_tokens"),
    ]
    out = []
    for rule, metric, lower in rules:
        found = {m: float(values.get(m, {}).get(metric)) for m in members if isinstance(values.get(m, {}).get(metric), (int, float))}
        found = {m: v for m, v in found.items() if math.isfinite(v)}
        choice = min(found, key=lambda m: ((found[m] if lower else -found[m]), m)) if found else None
        out.append(TieBreaker(rule, metric, lower, found, choice))
    return out


def top_set_of_runs(runs: Mapping[object, LoggedRun], objective: str, settings=None, lower: bool = False):
    """:func:`harness.evaluation.stats.top_set` of logged runs (job number -> run with its
    ``per_query.csv``): the one check that the runs can be paired, then the test.

    Raises:
        CompareError: a run without a ``dataset_fingerprint`` tag or on another dataset, a run
            repeating a query id, a run without the objective's column, or runs with different
            query sets (each one line naming the jobs).
    """
    from harness.evaluation.stats import top_set

    keys = sorted(runs)
    if not keys:
        raise CompareError(f"{objective}: no finished job with a {PER_QUERY_ARTIFACT}")
    first = runs[keys[0]]
    per_query = {}
    for key in keys:
        r = runs[key]
        if not r.fingerprint:
            raise CompareError(f"job {key} {r.label} has no dataset_fingerprint tag, so its dataset cannot be checked")
        if r.fingerprint != first.fingerprint:
            raise CompareError(
                f"job {keys[0]} {first.label} and job {key} {r.label} are on different datasets (dataset_fingerprint {first.fingerprint} and {r.fingerprint})"
            )
        ids = r.per_query["query_id"].astype(str)
        if ids.duplicated().any():
            raise CompareError(f"job {key} {r.label}: {PER_QUERY_ARTIFACT} repeats query ids {sorted(set(ids[ids.duplicated()]))[:5]}")
        if objective not in r.per_query.columns:
            raise CompareError(f"job {key} {r.label}: {PER_QUERY_ARTIFACT} has no {objective} column")
        per_query[key] = dict(zip(ids, pd.to_numeric(r.per_query[objective], errors="coerce").astype(float)))
    try:
        return top_set(per_query, settings, lower=lower, objective=objective)
    except ValueError as exc:
        raise CompareError(str(exc)) from None


# ---------------------------------------------------------------------------- listing mode

#: Config params giving a run's chunk size, first present wins (strategies name it differently).
SIZE_PARAMS = ("chunker.chunk_size", "chunker.max_chunk_size", "chunker.child_size")
#: Config params giving a run's overlap, first present wins.
OVERLAP_PARAMS = ("chunker.chunk_overlap", "chunker.overlap_sentences", "chunker.overlap_paragraphs", "chunker.child_overlap")
#: Metric families shown per run in the listing, at the chosen k: the registry's ``listed``
#: families (:func:`harness.evaluation.metrics.families`).
LIST_FAMILIES = metric_families("listed")
#: Logged metric holding a run's wall-clock time in seconds.
TIME_METRIC = "time.total_s"
#: Output formats of the listing.
LIST_FORMATS = ("markdown", "csv")


def _first(values: Mapping[str, str], keys: Sequence[str]):
    for key in keys:
        if key in values and values[key] not in ("", "None"):
            return values[key]
    return None


#: Param of a chunker that cuts where the content changes (``chunker=semantic``): its runs
#: list their cut rule in the ``cut`` column and their ``max_chunk_size`` is a cap, not a size.
BREAKPOINT_PARAM = "chunker.breakpoint"
#: Breakpoint mode -> the param holding its cut-off (other modes: ``breakpoint_amount``).
_CUTOFF_PARAMS = {"threshold": "chunker.threshold", "percentile": "chunker.percentile"}


def cut_rule(params: Mapping[str, str]) -> str | None:
    """How a content-cut run chose its boundaries, as text (``threshold 0.7, max 254``;
    ``interquartile, target 200, max 254``), from its logged chunker params; None for a run
    without :data:`BREAKPOINT_PARAM` (its ``size`` column says it all). Sizes are in the
    run's tokens (``chunker.tokenizer``)."""
    mode = _first(params, (BREAKPOINT_PARAM,))
    if mode is None:
        return None
    cutoff = _first(params, (_CUTOFF_PARAMS.get(mode, "chunker.breakpoint_amount"),))
    parts = [f"{mode} {cutoff}" if cutoff is not None else str(mode)]
    groups, target, cap = (_first(params, (f"chunker.{k}",)) for k in ("number_of_chunks", "target_chunk_size", "max_chunk_size"))
    if groups is not None:
        parts.append(f"{groups} groups")
    if target is not None:
        parts.append(f"target {target}")
    if cap is not None:
        parts.append(f"max {cap}")
    return ", ".join(parts)


def _number(text):
    """An integer-valued param as int, another number as float, anything else unchanged."""
    if text is None:
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() else value


def runs_table(
    runs: Sequence,
    k: int = 5,
    sort: str | None = None,
    ascending: bool = False,
    limit: int | None = None,
    with_status: bool = False,
) -> pd.DataFrame:
    """Logged runs as a table, one row per run (the listing of ``harness compare``).

    Args:
        runs: the runs to show, each with ``run_id``, ``name``, ``status``,
            ``start_time`` (Unix ms), ``params``, ``metrics`` (MLflow keys such as
            ``recall_at_5``) and ``tags`` mappings, as
            :class:`harness.tracking.runs.RunRecord` holds them (which runs to show is
            the caller's choice: :func:`harness.tracking.runs.list_runs`).
        k: rank cut-off of the metric columns, >= 1.
        sort: column or metric to sort by (see below); default ``recall@k``.
        ascending: sort ascending instead of descending.
        limit: at most this many rows after sorting (>= 1), or None.
        with_status: add a ``status`` column.

    Columns: ``chunker`` and ``retriever`` (the run's tags), ``size``, ``overlap``,
    ``unit`` (from the chunker params: the first of :data:`SIZE_PARAMS` /
    :data:`OVERLAP_PARAMS` a run has; sizes are in ``unit``), ``cut`` after ``size`` when a
    listed run cuts by content (:func:`cut_rule`; such a run's ``size`` is its
    ``target_chunk_size``, empty when unset, never its ``max_chunk_size`` cap), ``recall@k``,
    ``precision@k``, ``context_precision@k``, ``iou@k`` (the logged means, in [0, 1]),
    ``time_s`` (``time.total_s``: seconds from start to logged), ``run`` (run name),
    ``run_id`` and, with ``with_status``, ``status``. A cell is empty (NaN/None) when the
    run did not log that value.

    Order: by ``sort`` (a metric name as in ``recall@5`` or as logged, ``recall_at_5``,
    ``time.total_s``, or a column of this table), descending unless ``ascending``; runs
    without a value come last; ties keep the newest run first. Then at most ``limit`` rows.

    Raises:
        CompareError: ``sort`` names neither a column nor a metric any run logged.
        ValueError: ``k`` < 1 or ``limit`` < 1.
    """
    from harness.evaluation.metrics import mlflow_key

    check_all((Param("k", "int", low=1), Param("limit", "int", low=1, allow_none=True, need="an integer >= 1")), {"k": k, "limit": limit})
    all_statuses = with_status
    metric_keys = {f"{fam}@{k}": mlflow_key(f"{fam}@{k}") for fam in LIST_FAMILIES}
    rows, extra = [], []
    for run in runs:
        m, p, t = run.metrics, run.params, run.tags
        cut = cut_rule(p)
        row = {
            "chunker": t.get("chunker"),
            # a content-cut run's max_chunk_size is a cap: its size is the target, if any
            "size": _number(_first(p, ("chunker.target_chunk_size",) if cut is not None else SIZE_PARAMS)),
            "cut": cut,
            "overlap": _number(_first(p, OVERLAP_PARAMS)),
            "unit": p.get("chunker.unit"),
            "retriever": t.get("retriever"),
        }
        row.update({name: m.get(key) for name, key in metric_keys.items()})
        row["time_s"] = m.get(TIME_METRIC)
        row["run"] = run.name
        row["run_id"] = run.run_id
        if all_statuses:
            row["status"] = run.status
        rows.append(row)
        extra.append({**m, "_start": run.start_time or 0})
    with_cut = any(row["cut"] is not None for row in rows)
    columns = ["chunker", "size", *(["cut"] if with_cut else []), "overlap", "unit", "retriever", *metric_keys, "time_s", "run", "run_id"]
    columns += ["status"] if all_statuses else []
    table = pd.DataFrame(rows, columns=columns)
    if table.empty:
        return table
    for col in ("size", "overlap"):  # whole numbers stay whole next to missing values
        values = [row[col] for row in rows]
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, int) for v in present):
            table[col] = pd.array(values, dtype="Int64")
        else:
            table[col] = pd.Series(values, dtype=object)

    sort = sort or f"recall@{k}"
    if sort in table.columns:
        text_columns = ("chunker", "cut", "unit", "retriever", "run", "run_id", "status")
        key = table[sort] if sort in text_columns else pd.to_numeric(table[sort], errors="coerce").astype("float64")
    else:
        logged = sort if any(sort in e for e in extra) else mlflow_key(sort)
        if not any(logged in e for e in extra):
            known = {name for e in extra for name in e}
            examples = [n for n in (f"recall_at_{k}", f"ndcg_at_{k}", f"mrr_at_{k}", "precision_omega", "chunks.n_chunks", TIME_METRIC) if n in known]
            raise CompareError(f"--sort {sort!r} is neither a column {columns} nor a metric logged by a listed run (logged metrics include {examples})")
        key = pd.Series([e.get(logged) for e in extra], dtype="float64")
    order = pd.DataFrame({"key": key.to_numpy(), "start": [e["_start"] for e in extra]})
    # missing values last, ties: newest first (stable sorts, least significant key first)
    order = order.sort_values("start", ascending=False, kind="stable")
    order = order.sort_values("key", ascending=ascending, kind="stable", na_position="last")
    table = table.loc[order.index].reset_index(drop=True)
    if limit is not None:
        table = table.head(limit)
    return table


def format_listing(table: pd.DataFrame, fmt: str = "markdown", digits: int = 4) -> str:
    """Render :func:`runs_table`'s table: ``markdown`` (GitHub pipe table, metrics rounded to
    ``digits`` decimals, time to 1 decimal, empty cells for missing values) or ``csv``
    (full precision, for spreadsheets and scripts).

    Raises:
        ValueError: ``fmt`` not in :data:`LIST_FORMATS`.
    """
    if fmt not in LIST_FORMATS:
        raise ValueError(f"format must be one of {list(LIST_FORMATS)}, got {fmt!r}")
    if fmt == "csv":
        return table.to_csv(index=False).rstrip("\n")
    shown = table.copy()
    for col in shown.columns:
        if "@" in col:
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.{digits}f}")
        elif col == "time_s":
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
        else:
            shown[col] = shown[col].map(lambda v: "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v))
    numeric = [c for c in shown.columns if "@" in c or c in ("size", "overlap", "time_s")]
    align = ["right" if c in numeric else "left" for c in shown.columns]
    return shown.to_markdown(index=False, colalign=align, disable_numparse=True)
