"""Which values of a run are MLflow metrics, and the table that holds all of them.

A run computes a few hundred values (every metric family at every k and budget, bootstrap
CI bounds, ``chunks.*`` statistics, ``diagnostics.*`` miss reasons, cache and embedding
counters). The MLflow UI offers every metric key as a chart and a column, so a run logs
only its **headline** metrics as MLflow metrics (``tracking.metrics=headline``, the
default) and every value, headline ones included, in the MLflow table
:data:`METRICS_TABLE` (``metrics.json``, one row per value with its CI bounds; the UI shows
it) and its full-precision copy :data:`METRICS_CSV` (``metrics.csv``). With
``tracking.metrics=all`` every value is an MLflow metric as well.

Headline metrics (:func:`is_headline`), MLflow keys in brackets:

* at every ``k`` of ``metrics.ks``: ``recall@k``, ``precision@k``, ``context_precision@k``,
  ``iou@k``, ``context_tokens@k`` (``recall_at_5`` ...);
* ``ndcg@10`` and ``mrr@10`` (at the largest k of ``metrics.ks`` when 10 is not one of them);
* ``recall@Btok`` at every budget of ``metrics.budgets`` (``recall_at_512tok``);
* the same families with the ``compressed.`` prefix when contextual compression is on;
* ``metrics.objective`` (whatever it names) and ``chunks.n_chunks``.

The run also logs the ``recall_curve`` series (recall@k at ``step=k``) and its phase
timings ``time.*_s`` as MLflow metrics. Confidence intervals are in the table only
(columns ``ci_low``/``ci_high``): the MLflow UI cannot draw them, and as metric keys they
tripled the list.

Reading values back is :func:`harness.tracking.runs.run_metrics`: the run's MLflow
metrics merged with its table, under the MLflow keys every reader used before
(``recall_at_5``, ``recall_at_5_ci_low``, ``chunks.n_chunks``).
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Iterable, Mapping, Sequence

from harness.evaluation.metrics import families as metric_families

#: Values of ``tracking.metrics``.
METRIC_MODES = ("headline", "all")
#: Artifact file of the table holding every value of a run (an MLflow table, pandas "split"
#: JSON, shown by the UI; MLflow writes its numbers with 10 decimals).
METRICS_TABLE = "metrics.json"
#: The same table as CSV with every digit: what :func:`harness.tracking.runs.run_metrics` reads.
METRICS_CSV = "metrics.csv"
#: Families logged as MLflow metrics at every k of ``metrics.ks``: the registry's ``headline``
#: families without the ``at_rank_k`` role (:func:`harness.evaluation.metrics.families`).
HEADLINE_AT_RANK_K = metric_families("at_rank_k")
HEADLINE_AT_EVERY_K = tuple(f for f in metric_families("headline") if f not in HEADLINE_AT_RANK_K)
#: Families logged as MLflow metrics at k = :data:`HEADLINE_RANK_K` only (role ``at_rank_k``).
#: The k of :data:`HEADLINE_AT_RANK_K` (the largest k of ``metrics.ks`` when it is not one of them).
HEADLINE_RANK_K = 10
#: Families logged as MLflow metrics at every budget of ``metrics.budgets``: the registry's
#: ``headline`` budget families.
HEADLINE_AT_EVERY_BUDGET = metric_families("headline", param="budget")
#: Run statistics logged as MLflow metrics whatever the mode.
HEADLINE_STATS = ("chunks.n_chunks",)
#: Prefixes of values logged as MLflow metrics whenever a run has them: an approximate
#: index's recall against exact search (``retriever.index=hnsw|ivf``), which qualifies
#: every other number of the run.
HEADLINE_PREFIXES = ("retriever.ann_recall",)
#: Columns of :data:`METRICS_TABLE`, in order.
TABLE_COLUMNS = ("metric", "key", "family", "k", "budget", "value", "ci_low", "ci_high", "headline")
_CI_SUFFIXES = ("_ci_low", "_ci_high")
_COMPRESSED = "compressed."


def check_mode(mode: Any) -> str:
    """``mode`` when it is one of :data:`METRIC_MODES`.

    Raises:
        ValueError: naming ``tracking.metrics``, the allowed values and, for a misspelling, the one meant.
    """
    if mode in METRIC_MODES:
        return str(mode)
    close = difflib.get_close_matches(str(mode), METRIC_MODES, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"tracking.metrics must be one of {list(METRIC_MODES)}, got {mode!r}{hint}")


def rank_k(ks: Sequence[int]) -> int:
    """The k at which ``ndcg`` and ``mrr`` are headline metrics: 10 when in ``ks``, else ``max(ks)``.

    Raises:
        ValueError: ``ks`` is empty.
    """
    if not ks:
        raise ValueError("metrics.ks must not be empty")
    return HEADLINE_RANK_K if HEADLINE_RANK_K in ks else max(ks)


def is_headline(name: str, ks: Sequence[int], budgets: Sequence[int] = (), objective: str | None = None) -> bool:
    """Whether the value ``name`` (a harness name: ``recall@5``, ``chunks.n_chunks``) is a headline metric.

    Args:
        name: the value's name as the run computed it (not the MLflow key).
        ks: ``metrics.ks``.
        budgets: ``metrics.budgets`` (token budgets).
        objective: ``metrics.objective``; always a headline metric.
    """
    from harness.evaluation.metrics import parse_name

    if name == objective or name in HEADLINE_STATS or name.startswith(HEADLINE_PREFIXES):
        return True
    base = name[len(_COMPRESSED) :] if name.startswith(_COMPRESSED) else name
    try:
        parsed = parse_name(base)
    except ValueError:
        return False
    family = parsed.family.name
    if parsed.k is not None:
        return (family in HEADLINE_AT_EVERY_K and parsed.k in ks) or (family in HEADLINE_AT_RANK_K and parsed.k == rank_k(ks))
    if parsed.budget is not None:
        return family in HEADLINE_AT_EVERY_BUDGET and parsed.budget in budgets
    return False


def split(
    values: Mapping[str, float], mode: str, ks: Sequence[int], budgets: Sequence[int] = (), objective: str | None = None
) -> tuple[dict[str, float], set[str]]:
    """The values to log as MLflow metrics, and the names among them that are headline ones.

    Args:
        values: every step-0 value of a run by harness name, CI bounds included
            (``recall@5_ci_low``).
        mode: ``tracking.metrics`` (:data:`METRIC_MODES`).
        ks, budgets, objective: as in :func:`is_headline`.

    Returns:
        ``(to_log, headline)``: with ``headline`` mode only the headline values (no CI
        bounds), with ``all`` every value; ``headline`` names the headline values.

    Raises:
        ValueError: ``mode`` unknown (see :func:`check_mode`).
    """
    check_mode(mode)
    headline = {n for n in values if is_headline(n, ks, budgets, objective)}
    if mode == "all":
        return dict(values), headline
    return {n: v for n, v in values.items() if n in headline}, headline


def _ci_parts(name: str) -> tuple[str, str] | None:
    for suffix in _CI_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix[1:]
    return None


def metrics_table(values: Mapping[str, float], headline: Iterable[str] = ()):
    """Every value of a run as one DataFrame row: the table stored as :data:`METRICS_TABLE`.

    Args:
        values: value name (harness name, e.g. ``recall@5``, ``chunks.n_chunks``) -> number;
            CI bounds as ``<name>_ci_low`` / ``<name>_ci_high`` become the ``ci_low`` /
            ``ci_high`` columns of ``<name>``'s row.
        headline: the names that are also MLflow metrics in headline mode.

    Returns:
        A DataFrame with the columns :data:`TABLE_COLUMNS`: ``metric`` (harness name),
        ``key`` (its MLflow key, :func:`harness.evaluation.metrics.mlflow_key`), ``family``
        (registry family, else the part before the first dot, else the name), ``k`` and
        ``budget`` (the rank cut-off / token budget, else missing), ``value``, ``ci_low``
        and ``ci_high`` (missing without a bootstrap) and ``headline`` (bool). Rows in the
        order of ``values``. ``metric`` -> ``key`` is the run's stored name map.

    Raises:
        NonFiniteError, MetricNameCollision: a value is not finite, or two names map to one
            MLflow key (:func:`harness.tracking.keys.metric_keys`).
    """
    import pandas as pd

    from harness.evaluation.metrics import parse_name
    from harness.tracking.keys import metric_keys

    keys = metric_keys(values)
    heads = set(headline)
    bounds: dict[str, dict[str, float]] = {}
    names: list[str] = []
    for name, value in values.items():
        parts = _ci_parts(name)
        if parts is not None and parts[0] in values:
            bounds.setdefault(parts[0], {})[parts[1]] = float(value)
        else:
            names.append(name)
    rows = []
    for name in names:
        base = name[len(_COMPRESSED) :] if name.startswith(_COMPRESSED) else name
        try:
            parsed = parse_name(base)
            family, k, budget = (_COMPRESSED if base != name else "") + parsed.family.name, parsed.k, parsed.budget
        except ValueError:
            family, k, budget = name.split(".", 1)[0], None, None
        ci = bounds.get(name, {})
        rows.append(
            {
                "metric": name,
                "key": keys[name],
                "family": family,
                "k": k,
                "budget": budget,
                "value": float(values[name]),
                "ci_low": ci.get("ci_low", math.nan),
                "ci_high": ci.get("ci_high", math.nan),
                "headline": name in heads,
            }
        )
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for col in ("k", "budget"):
        frame[col] = frame[col].astype("Int64")
    return frame


def table_values(columns: Sequence[str], data: Sequence[Sequence[Any]]) -> dict[str, float]:
    """The values of a stored :data:`METRICS_CSV` (or :data:`METRICS_TABLE`) under their MLflow keys, CI bounds as
    ``<key>_ci_low`` / ``<key>_ci_high`` (missing bounds left out; a missing value is NaN).

    Args:
        columns, data: the table's ``columns`` and ``data`` (pandas "split" orient, as MLflow stores tables).

    Raises:
        ValueError: the table has no ``key`` or ``value`` column.
    """
    index = {c: i for i, c in enumerate(columns)}
    if "key" not in index or "value" not in index:
        raise ValueError(f"{METRICS_TABLE}: expected the columns {list(TABLE_COLUMNS)}, got {list(columns)}")
    out: dict[str, float] = {}
    for row in data:
        key = str(row[index["key"]])
        value = row[index["value"]]
        out[key] = math.nan if value is None else float(value)
        for col in ("ci_low", "ci_high"):
            if col in index and row[index[col]] is not None and not (isinstance(row[index[col]], float) and math.isnan(row[index[col]])):
                out[f"{key}_{col}"] = float(row[index[col]])
    return out
