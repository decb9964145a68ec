"""Uncertainty of mean metrics and paired comparisons of runs over the same queries.

Every function here treats the *query* as the unit of resampling: a run's score is the mean
of its per-query values, and the uncertainty that matters for "is chunking A better than
chunking B on this kind of question" is the sampling variation of the queries.

Methods and sources:

- Confidence intervals: the percentile bootstrap (Efron & Tibshirani, *An Introduction to
  the Bootstrap*, Chapman & Hall, 1993, ch. 13). Resample the n per-query values with
  replacement ``n_resamples`` times, take each resample's mean, and report the
  ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those means.
- Paired p-values: the paired randomisation (sign-flip permutation) test (Fisher, 1935;
  Efron & Tibshirani 1993, ch. 15; its use for IR evaluation: Smucker, Allan & Carterette,
  CIKM 2007). Under H0 "both systems are exchangeable on every query" each per-query
  difference ``d_i = b_i - a_i`` is equally likely to have either sign. Two-sided statistic
  ``|mean(d)|``. When ``2**n <= n_resamples`` all ``2**n`` sign patterns are enumerated and the
  p-value is exact; otherwise ``n_resamples`` random patterns are drawn and
  ``p = (1 + #{|mean(s*d)| >= |mean(d)|}) / (1 + n_resamples)`` (Phipson & Smyth, 2010:
  a Monte Carlo p-value is never 0). This is what ``scipy.stats.permutation_test`` with
  ``permutation_type="samples"`` computes; the tests check the two agree.
- Multiple comparisons: Holm's step-down correction (Holm, Scand. J. Statist. 6, 1979),
  which controls the family-wise error rate without assuming independence.
- Non-inferiority (the release gate, :func:`non_inferiority`): a one-sided sign-flip test
  of ``H0: mean(d) <= -margin`` on the shifted differences ``d_i + margin``, with the
  margin fixed in advance (Wellek, *Testing Statistical Hypotheses of Equivalence and
  Noninferiority*, 2nd ed., 2010).

All randomness comes from ``numpy.random.default_rng(seed)``, so equal inputs and seeds give
equal outputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from harness.params import Param

#: Relative tolerance when comparing permuted statistics with the observed one, and when
#: deciding a per-query tie: sums of the same numbers in another order differ by rounding.
_RTOL = 1e-12

#: Upper bound on resample-by-query cells held in memory at once (~64 MB of float64).
_BLOCK_CELLS = 8_000_000


def _as_values(values: Iterable[float], name: str = "values") -> np.ndarray:
    """1-D float array; raises ValueError naming ``name`` when empty or not finite."""
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per query), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: need at least one per-query value")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} holds {int(bad.sum())} non-finite value(s) (NaN or inf), first at position {int(np.argmax(bad))}")
    return arr


def query_mean(values: Iterable[float], name: str = "values", query_ids: Sequence[str] | None = None) -> tuple[float, int]:
    """The mean of a metric over every query, a query whose value is not finite scored 0.

    The one function a run's mean over per-query values goes through. A NaN or infinite
    per-query value means the metric failed for that query: it is never skipped (that would
    shrink the denominator and lift the mean: ``[1, NaN, 0.5, NaN]`` would give 0.75), but
    scored 0, kept in the denominator and counted, with a warning.

    Args:
        values: one value per query (n >= 1).
        name: the metric's name, for the warning.
        query_ids: the n query ids, to name the first failed one (optional).

    Returns:
        ``(mean, n_failed)``: ``sum(finite values) / n`` and how many values were not finite.

    Raises:
        ValueError: ``values`` is empty or not one-dimensional.
    """
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: need one value per query (a non-empty 1-D list), got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    n_failed = int(bad.sum())
    if n_failed:
        import warnings

        first = int(np.argmax(bad))
        which = f"query {query_ids[first]!r}" if query_ids is not None else f"position {first}"
        warnings.warn(
            f"{name}: {n_failed} of {arr.size} queries have no finite value (first: {which}, {arr[first]!r}); "
            "each is scored 0 and kept in the mean's denominator (counted in queries.n_failed)",
            stacklevel=2,
        )
    return float(np.where(bad, 0.0, arr).sum() / arr.size), n_failed


#: The resampling arguments of the bootstrap and permutation functions below.
RESAMPLES = Param("n_resamples", "int", low=1, numpy=True, desc="resamples drawn")
CONFIDENCE = Param(
    "confidence", "number", low=0, high=1, low_open=True, high_open=True, numpy=True, need="in the open interval (0, 1)", desc="interval coverage"
)


def _bootstrap_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_resamples`` with-replacement resamples of ``values`` (drawn in blocks)."""
    n = values.size
    block = max(1, _BLOCK_CELLS // n)
    out = np.empty(n_resamples)
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = values[idx].mean(axis=1)
    return out


def bootstrap_ci(values: Iterable[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Mean of per-query values with a percentile-bootstrap confidence interval.

    Method (Efron & Tibshirani 1993, ch. 13): draw ``n_resamples`` samples of size n with
    replacement from the n values, compute each sample's mean, and take the empirical
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (numpy's default linear
    interpolation) of those means as ``low`` and ``high``.

    Args:
        values: one value per query (any real numbers; metric values are in [0, 1]).
        n_resamples: number of bootstrap resamples, >= 1 (1000 gives quantiles stable to
            about ±0.005 for a [0, 1] metric over a few hundred queries).
        confidence: coverage of the interval, in (0, 1).
        seed: seed of ``numpy.random.default_rng``; equal seeds give equal intervals.

    Returns:
        ``(mean, low, high)``: the sample mean (not a bootstrap estimate) and the interval
        bounds, ``low <= high``. With one value, or all values equal, ``low == high == mean``.
        The percentile interval is not forced to contain the mean, but it does unless the
        resample distribution is extremely skewed.

    Raises:
        ValueError: ``values`` empty, not 1-D or not finite; ``n_resamples`` < 1;
            ``confidence`` outside (0, 1).
    """
    arr = _as_values(values)
    n_resamples = int(RESAMPLES.check(n_resamples))
    confidence = float(CONFIDENCE.check(confidence))
    mean = float(arr.mean())
    if arr.size == 1 or np.all(arr == arr[0]):
        return mean, mean, mean
    means = _bootstrap_means(arr, n_resamples, np.random.default_rng(seed))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return mean, float(low), float(high)


def sign_flip_p_value(differences: Iterable[float], n_resamples: int = 1000, seed: int = 0) -> float:
    """Two-sided p-value of the paired sign-flip permutation test of ``mean(d) = 0``.

    Statistic ``T = |mean(d)|``. Exact over all ``2**n`` sign patterns when
    ``2**n <= n_resamples`` (p = share of patterns with ``|mean(s*d)| >= T``); otherwise
    Monte Carlo with ``n_resamples`` random patterns and ``p = (1 + hits) / (1 + n_resamples)``.
    Zero differences are kept (they do not change any permuted mean). Source: Fisher 1935;
    Efron & Tibshirani 1993, ch. 15; Phipson & Smyth 2010 for the ``+1``.

    Args:
        differences: per-query paired differences ``b_i - a_i``.
        n_resamples: random sign patterns when not enumerating, >= 1.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        p in (0, 1]; exactly 1.0 when every difference is 0. With all n differences of the
        same sign and equal size the exact p is ``2 / 2**n``.

    Raises:
        ValueError: ``differences`` empty, not 1-D or not finite; ``n_resamples`` < 1.
    """
    d = _as_values(differences, "differences")
    n_resamples = int(RESAMPLES.check(n_resamples))
    n = d.size
    observed = abs(d.mean())
    threshold = observed - _RTOL * max(1.0, float(np.abs(d).max()))
    if n < 63 and 2**n <= n_resamples:  # exact: every sign pattern once
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        stats = np.abs(patterns @ d) / n
        return float(np.count_nonzero(stats >= threshold) / 2**n)
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_CELLS // n)
    hits = 0
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        signs = rng.integers(0, 2, size=(size, n)) * 2 - 1
        hits += int(np.count_nonzero(np.abs(signs @ d) / n >= threshold))
    return float((1 + hits) / (1 + n_resamples))


def _paired(baseline: Iterable[float], other: Iterable[float], other_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Validated per-query values ``a`` (baseline) and ``b`` (``other_name``), their
    differences ``d = b - a`` and the wins / ties / losses of ``b`` (ties within
    :data:`_RTOL` relative).

    Raises:
        ValueError: different lengths, empty or non-finite inputs.
    """
    a = _as_values(baseline, "baseline")
    b = _as_values(other, other_name)
    if a.size != b.size:
        raise ValueError(f"baseline and {other_name} must hold one value per query for the same queries, got {a.size} and {b.size} values")
    d = b - a
    tol = _RTOL * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
    wins = int(np.count_nonzero(d > tol))
    losses = int(np.count_nonzero(d < -tol))
    return a, b, d, wins, int(a.size) - wins - losses, losses


class _Result:
    """Base of the test results below: :meth:`as_dict` gives their fields, in declaration order."""

    def as_dict(self) -> dict:
        """The fields as a plain dict (``dataclasses.asdict``), in declaration order."""
        return asdict(self)


@dataclass(frozen=True)
class PairedResult(_Result):
    """Paired comparison of a run B against a baseline A on the same n queries.

    Attributes:
        n: number of paired queries.
        mean_a, mean_b: mean metric of the baseline and of the other run.
        diff: ``mean_b - mean_a`` (= mean of per-query differences); > 0 means B scores higher.
        ci_low, ci_high: percentile-bootstrap interval of ``diff`` over queries.
        p_value: two-sided sign-flip permutation p-value, in (0, 1].
        wins, ties, losses: queries where B is higher / equal (within 1e-12 relative) /
            lower than A; they sum to n.
    """

    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    wins: int
    ties: int
    losses: int


def paired_comparison(baseline: Sequence[float], other: Sequence[float], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> PairedResult:
    """Compare per-query values of two runs on the same queries, in the same order.

    Per-query differences ``d_i = other_i - baseline_i``; ``diff = mean(d)`` with its
    percentile-bootstrap CI (:func:`bootstrap_ci`, resampling queries) and the two-sided
    sign-flip permutation p-value (:func:`sign_flip_p_value`), both seeded with ``seed``.

    Raises:
        ValueError: different lengths, empty or non-finite inputs, bad ``n_resamples`` or
            ``confidence``.
    """
    a, b, d, wins, ties, losses = _paired(baseline, other, "other")
    diff, low, high = bootstrap_ci(d, n_resamples, confidence, seed)
    return PairedResult(
        n=int(a.size),
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        diff=diff,
        ci_low=low,
        ci_high=high,
        p_value=sign_flip_p_value(d, n_resamples, seed),
        wins=wins,
        ties=ties,
        losses=losses,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order.

    With the m p-values sorted ascending ``p_(1) <= ... <= p_(m)``:
    ``adj_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j))``. Rejecting every hypothesis
    with ``adj <= alpha`` controls the family-wise error rate at alpha (Holm 1979).
    Ties keep their input order; an empty input gives an empty list.

    Raises:
        ValueError: a p-value outside [0, 1] or NaN.
    """
    p = np.asarray(list(p_values), dtype=float)
    if p.size == 0:
        return []
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"p_values must all be in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def metric_cis(
    per_query: Mapping[str, Sequence[float]], metrics: Iterable[str], n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Bootstrap CI bounds for the mean of each named per-query column, for logging.

    Args:
        per_query: a mapping (or pandas DataFrame) of column name -> per-query values.
        metrics: column names, e.g. ``["recall@5", "iou@5"]``.
        n_resamples, confidence, seed: as in :func:`bootstrap_ci` (the same seed for
            every metric, so the same query resamples are used throughout).

    Returns:
        ``{"<metric>_ci_low": low, "<metric>_ci_high": high, ...}``; keys pass through
        :func:`harness.evaluation.metrics.mlflow_key` as ``recall_at_5_ci_low``.

    Raises:
        ValueError: a metric is not a column (message names it), or as :func:`bootstrap_ci`.
    """
    out: dict[str, float] = {}
    for name in metrics:
        if name not in per_query:
            raise ValueError(f"metric {name!r} is not a per-query column; available: {sorted(map(str, per_query.keys()))}")
        _, low, high = bootstrap_ci(np.asarray(per_query[name], dtype=float), n_resamples, confidence, seed)
        out[f"{name}_ci_low"] = low
        out[f"{name}_ci_high"] = high
    return out


def sign_flip_p_value_greater(values: Iterable[float], n_resamples: int = 10000, seed: int = 0) -> float:
    """One-sided p-value of the sign-flip test of H0 "location <= 0" against H1 "location > 0".

    Statistic ``T = mean(x)``; under H0 at its boundary each ``x_i`` is as likely to be
    ``+|x_i|`` as ``-|x_i|`` (a distribution symmetric about 0), so ``p`` is the share of sign
    patterns ``s`` with ``mean(s * x) >= T``. Exact over all ``2**n`` patterns when
    ``2**n <= n_resamples``; otherwise Monte Carlo with ``p = (1 + hits) / (1 + n_resamples)``
    (Phipson & Smyth 2010). This is the one-sample randomisation test (Fisher 1935; Efron &
    Tibshirani 1993, ch. 15) with a one-sided alternative; it equals
    ``scipy.stats.permutation_test(..., permutation_type="samples", alternative="greater")``
    up to Monte Carlo error. To test a location other than 0, shift the values first (see
    :func:`non_inferiority`).

    Args:
        values: one value per query (e.g. shifted paired differences ``d_i + margin``).
        n_resamples: random sign patterns when not enumerating, >= 1.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        p in (0, 1]. All values 0 gives 1.0; all n values positive and equal gives the exact
        ``1 / 2**n`` when enumerated (only the all-plus pattern reaches ``T``).

    Raises:
        ValueError: ``values`` empty, not 1-D or not finite; ``n_resamples`` < 1.
    """
    x = _as_values(values)
    n_resamples = int(RESAMPLES.check(n_resamples))
    n = x.size
    observed = x.mean()
    threshold = observed - _RTOL * max(1.0, float(np.abs(x).max()))
    if n < 63 and 2**n <= n_resamples:  # exact: every sign pattern once
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        return float(np.count_nonzero(patterns @ x / n >= threshold) / 2**n)
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_CELLS // n)
    hits = 0
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        signs = rng.integers(0, 2, size=(size, n)) * 2 - 1
        hits += int(np.count_nonzero(signs @ x / n >= threshold))
    return float((1 + hits) / (1 + n_resamples))


@dataclass(frozen=True)
class NonInferiorityResult(_Result):
    """Paired non-inferiority test of a candidate against a baseline on the same n queries.

    Attributes:
        n: number of paired queries.
        mean_baseline, mean_candidate: mean metric of each.
        diff: ``mean_candidate - mean_baseline``.
        ci_low, ci_high: two-sided ``1 - 2 * alpha`` percentile-bootstrap interval of
            ``diff`` (``ci_low`` is the one-sided ``1 - alpha`` lower confidence bound).
        p_value: one-sided sign-flip p-value of H0 ``diff <= -margin``, in (0, 1].
        margin: the non-inferiority margin (>= 0, in metric units).
        alpha: the one-sided significance level.
        passed: ``p_value <= alpha`` (H0 rejected: the candidate is non-inferior).
        wins, ties, losses: queries where the candidate is higher / equal / lower.
    """

    n: int
    mean_baseline: float
    mean_candidate: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    margin: float
    alpha: float
    passed: bool
    wins: int
    ties: int
    losses: int


def non_inferiority(
    baseline: Sequence[float],
    candidate: Sequence[float],
    margin: float,
    alpha: float = 0.05,
    n_resamples: int = 10000,
    seed: int = 0,
) -> NonInferiorityResult:
    """Is the candidate no worse than the baseline by more than ``margin``? (paired, one-sided)

    Per-query differences ``d_i = candidate_i - baseline_i``; hypotheses
    ``H0: E[d] <= -margin`` (the candidate is worse by at least the margin) against
    ``H1: E[d] > -margin``. Test: the one-sided sign-flip test
    (:func:`sign_flip_p_value_greater`) applied to the shifted differences
    ``d_i + margin``, i.e. the paired randomisation test of the location ``-margin``
    (Fisher 1935; Efron & Tibshirani 1993, ch. 15), assuming the shifted differences are
    symmetric about 0 at the H0 boundary. The candidate passes when ``p <= alpha``. The
    non-inferiority framing (a margin fixed in advance, a one-sided test at alpha, or
    equivalently a ``1 - 2 alpha`` interval whose lower bound must exceed ``-margin``)
    follows Wellek, *Testing Statistical Hypotheses of Equivalence and Noninferiority*,
    2nd ed., CRC 2010. The reported interval is the percentile bootstrap of ``mean(d)``
    (:func:`bootstrap_ci`) at level ``1 - 2 alpha``; it is descriptive, the verdict comes
    from ``p``. Identical per-query values give ``diff = 0`` and, for ``margin > 0``, the
    smallest attainable p (``1 / 2**n`` exact, ``1 / (1 + n_resamples)`` Monte Carlo).

    Args:
        baseline, candidate: per-query values for the same queries in the same order.
        margin: non-inferiority margin, >= 0, in the metric's units (0.02 = 2 points of a
            [0, 1] metric). With 0 the test asks whether the candidate is strictly better.
        alpha: one-sided significance level, in (0, 0.5).
        n_resamples: bootstrap resamples and random sign patterns, >= 1.
        seed: seed of ``numpy.random.default_rng`` (same seed for CI and test).

    Raises:
        ValueError: different lengths, empty or non-finite inputs; ``margin`` < 0 or not
            finite; ``alpha`` outside (0, 0.5); ``n_resamples`` < 1.
    """
    a, b, d, wins, ties, losses = _paired(baseline, candidate, "candidate")
    Param("margin", "number", low=0, numpy=True, noun="a finite number").check(margin)
    if not 0.0 < float(alpha) < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5) (a one-sided level), got {alpha!r}")
    margin, alpha = float(margin), float(alpha)
    diff, low, high = bootstrap_ci(d, n_resamples, 1.0 - 2.0 * alpha, seed)
    p = sign_flip_p_value_greater(d + margin, n_resamples, seed)
    return NonInferiorityResult(
        n=int(a.size),
        mean_baseline=float(a.mean()),
        mean_candidate=float(b.mean()),
        diff=diff,
        ci_low=low,
        ci_high=high,
        p_value=p,
        margin=margin,
        alpha=alpha,
        passed=bool(p <= alpha),
        wins=wins,
        ties=ties,
        losses=losses,
    )


# ---------------------------------------------------------------------------- top set of a sweep


@dataclass(frozen=True)
class TopSetSettings:
    """How a sweep names its top set (:func:`top_set`); the ``tracking.top_set`` settings.

    Attributes:
        alpha: family-wise significance level of the one-sided tests, in (0, 0.5) (default 0.05).
        margin: how much worse than the best a job may be before it counts as worse, >= 0, in
            the objective's units (0.01 = one point of a [0, 1] metric; tokens for
            ``context_tokens@k``). 0 (default): any significant shortfall excludes a job.
        second_metric: the tie-breaker metric (``name@k``); None = ``context_precision@k`` at
            the objective's cut-off (``recall@k`` when the objective is context precision).
        n_resamples: random sign patterns of each test when they are not enumerated, >= 1.
        seed: seed of ``numpy.random.default_rng`` (equal inputs and seeds give equal sets).

    Raises:
        ValueError: one line naming ``tracking.top_set.<key>``, the value and the allowed range.
    """

    alpha: float = 0.05
    margin: float = 0.0
    second_metric: str | None = None
    n_resamples: int = 10000
    seed: int = 0

    #: Where these settings live in the configuration (the prefix of every error).
    WHERE = "tracking.top_set"

    def __post_init__(self) -> None:
        w = self.WHERE
        for name in ("alpha", "margin"):
            Param(name, "number", numpy=True, noun="a finite number", message="{name}: expected {need}, got {value!r}").check(getattr(self, name), w)
        if not 0.0 < float(self.alpha) < 0.5:
            raise ValueError(f"{w}.alpha: expected a one-sided level in (0, 0.5), got {self.alpha!r}")
        if float(self.margin) < 0:
            raise ValueError(f"{w}.margin: expected a number >= 0 (how much worse than the best still counts as tied), got {self.margin!r}")
        if self.second_metric is not None:
            from harness.evaluation.metrics import FAMILIES, parse_name

            try:
                parse_name(str(self.second_metric))
            except ValueError:
                import difflib

                family = str(self.second_metric).split("@", 1)[0]
                close = difflib.get_close_matches(family, [f.split("@", 1)[0] for f in FAMILIES], n=1)
                hint = f"; did you mean {close[0]}@{str(self.second_metric).split('@', 1)[1]}?" if close and "@" in str(self.second_metric) else ""
                raise ValueError(
                    f"{w}.second_metric: unknown metric {self.second_metric!r}; expected null or a registered metric name@k such as context_precision@5{hint}"
                ) from None
        RESAMPLES.check(self.n_resamples, w)
        Param("seed", "int", low=0, numpy=True, message="{name}: expected {need}, got {value!r}").check(self.seed, w)
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "margin", float(self.margin))

    @classmethod
    def from_mapping(cls, given: Mapping | None) -> TopSetSettings:
        """Settings from a mapping (the ``tracking.top_set`` config node, or the JSON of the
        parent run's ``sweep.top_set_settings`` tag); missing keys take the defaults.

        Raises:
            ValueError: an unknown key (``did you mean`` the closest known one) or a value out of range.
        """
        import difflib

        data = dict(given or {})
        known = ("alpha", "margin", "second_metric", "n_resamples", "seed")
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean {cls.WHERE}.{close[0]}?" if close else ""
                raise ValueError(f"{cls.WHERE}.{key}: unknown setting{hint} (known: {', '.join(known)})")
        return cls(**data)

    def to_dict(self) -> dict:
        """``{"alpha", "margin", "second_metric", "n_resamples", "seed"}`` (plain values, JSON-ready)."""
        return {"alpha": self.alpha, "margin": self.margin, "second_metric": self.second_metric, "n_resamples": int(self.n_resamples), "seed": int(self.seed)}

    def test_text(self) -> str:
        """The test in words: ``paired one-sided sign-flip test against the best, Holm, alpha 0.05, margin 0``."""
        return f"paired one-sided sign-flip test against the best, Holm, alpha {self.alpha:g}, margin {self.margin:g}"


@dataclass(frozen=True)
class TopSet:
    """The jobs of a sweep not significantly worse than the best (:func:`top_set`).

    Attributes:
        objective: the metric compared (``recall@5``).
        best: key of the best job (highest mean; lowest for a lower-is-better objective; equal
            means: the smallest key).
        members: keys of the top set, the best first, then by mean (best first; equal means:
            smaller key first).
        means: key -> mean over the n queries (a non-finite value scored 0, as in the run's mean).
        p_values: key -> raw one-sided p of "worse than the best by more than ``margin``", for
            every job but the best, in (0, 1].
        p_holm: the same, Holm-adjusted over those jobs.
        settings: the :class:`TopSetSettings` used (alpha, margin, resamples, seed).
        lower: True when lower is better.
        n_queries: number of paired queries.
    """

    objective: str
    best: object
    members: tuple
    means: Mapping
    p_values: Mapping
    p_holm: Mapping
    settings: TopSetSettings
    lower: bool
    n_queries: int


def _job_label(key) -> str:
    return f"job {key}"


def top_set(
    per_query: Mapping[object, Mapping[str, float]], settings: TopSetSettings | None = None, lower: bool = False, objective: str = "objective"
) -> TopSet:
    """The set of jobs not significantly worse than the best, over the same queries.

    The one function a sweep's top set comes from (the sweep's summary and its report both
    call it). The best job is the one with the highest mean (lowest when ``lower``); for every
    other job j the per-query shortfall ``x_i = best_i - j_i`` (``j_i - best_i`` when lower
    is better) is tested one-sided, ``H0: E[x] <= margin`` ("j is at most ``margin`` worse")
    against ``H1: E[x] > margin`` ("j is worse by more than the margin"), with the paired
    sign-flip test on ``x_i - margin`` (:func:`sign_flip_p_value_greater`; Fisher 1935, Efron
    & Tibshirani 1993 ch. 15). The p-values are Holm-adjusted over the other jobs
    (:func:`holm`; Holm 1979), and j is in the top set unless its adjusted p is <= alpha: a job
    leaves the set only when the data show it worse, so "in the top set" means "not shown
    worse", not "shown equal". A larger margin keeps more jobs; margin 0 is the plain one-sided
    paired test of a difference. The comparison with the best chosen from the same data makes
    the test somewhat liberal towards dropping jobs (the best's mean is biased upwards).

    Args:
        per_query: job key (a job number) -> query id -> value of the objective; every job must
            hold the same query ids. A non-finite value is scored 0 with a warning (as
            :func:`query_mean` scores it in the run's own mean).
        settings: alpha, margin, resamples, seed (default :class:`TopSetSettings`).
        lower: True when lower is better (``context_tokens@k``).
        objective: the metric's name, for messages.

    Returns:
        :class:`TopSet`; deterministic for equal inputs and seed, and the same whatever the
        order of ``per_query``.

    Raises:
        ValueError: no job; a job without queries; two jobs with different query sets (one line
            naming both jobs and a few query ids only in each).
    """
    settings = settings or TopSetSettings()
    if not per_query:
        raise ValueError(f"{objective}: no job to rank (need per-query values of at least one job)")
    keys = sorted(per_query)
    first = keys[0]
    ids = sorted(map(str, per_query[first]))
    if not ids:
        raise ValueError(f"{objective}: {_job_label(first)} has no per-query values")
    wanted = set(ids)
    for key in keys[1:]:
        got = set(map(str, per_query[key]))
        if got != wanted:
            only_a, only_b = sorted(wanted - got), sorted(got - wanted)
            raise ValueError(
                f"{objective}: {_job_label(first)} and {_job_label(key)} have different query sets ({len(wanted)} and {len(got)} queries; "
                f"{len(only_a)} only in {_job_label(first)} {only_a[:5]}, {len(only_b)} only in {_job_label(key)} {only_b[:5]}): "
                "a paired test needs the same queries; rerun the jobs on one dataset"
            )
    arrays: dict = {}
    means: dict = {}
    for key in keys:
        by_id = {str(q): v for q, v in per_query[key].items()}
        raw = np.asarray([by_id[q] for q in ids], dtype=float)
        means[key], _ = query_mean(raw, f"{objective} of {_job_label(key)}", ids)
        arrays[key] = np.where(np.isfinite(raw), raw, 0.0)
    sign = -1.0 if lower else 1.0
    best = min(keys, key=lambda k: (-sign * means[k], keys.index(k)))
    others = [k for k in keys if k != best]
    p_values = {k: sign_flip_p_value_greater(sign * (arrays[best] - arrays[k]) - settings.margin, settings.n_resamples, settings.seed) for k in others}
    p_holm = dict(zip(others, holm([p_values[k] for k in others])))
    kept = [k for k in others if p_holm[k] > settings.alpha]
    members = (best, *sorted(kept, key=lambda k: (-sign * means[k], keys.index(k))))
    return TopSet(objective, best, members, means, p_values, p_holm, settings, bool(lower), len(ids))
