"""Two-stage screening of a sweep: which jobs a cheap proxy keeps, and how well its ranking
agreed with the configured model's (``sweep.screen``; the sweeper is
:mod:`harness.studies.screen`).

A screening sweep runs every grid job once with a *proxy* (:data:`PROXIES`: the static
model instead of the configured embedding, or BM25 instead of the configured retriever),
keeps the ``sweep.keep`` best grid jobs by the proxy's objective (:func:`select`) and runs
only those with the configured model. The agreement of the two rankings over the confirmed
jobs is Kendall's tau-b (:func:`kendall_tau`) and Spearman's rho (:func:`spearman_rho`).

Everything here is plain numbers: no Hydra, no MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.params import Param

#: Proxy name -> the overrides that turn a grid job into its cheap stand-in. Each override
#: selects a config group option; a job's own settings of that group (``embedding.batch_size=64``)
#: are dropped from its proxy job, since they belong to the option being replaced.
PROXIES: dict[str, tuple[str, ...]] = {
    "static": ("embedding=static",),  # model2vec static embeddings distilled from MiniLM (conf/embedding/static.yaml)
    "bm25": ("retriever=bm25",),  # Okapi BM25: no embedding at all (conf/retriever/bm25.yaml)
}

#: ``sweep.screen``: the proxy, or null for an exact sweep (every grid job with the configured model).
SCREEN = Param(
    "screen",
    "choice",
    choices=tuple(PROXIES),
    allow_none=True,
    none="null (no screening) or {}",
    default=None,
    desc="proxy of a two-stage screening sweep (static: embedding=static; bm25: retriever=bm25); null = exact sweep",
)
#: ``sweep.keep``: how many grid jobs the proxy's ranking sends to the confirming stage.
KEEP = Param("keep", "int", low=1, default=3, desc="grid jobs the proxy keeps for confirmation (the best by the proxy's objective)")

#: The keys of the ``sweep`` config node.
SWEEP_KEYS = ("screen", "keep")


class ScreenError(ValueError):
    """A ``sweep.*`` setting that cannot be used: one line naming it and what was expected."""


@dataclass(frozen=True)
class ScreenSettings:
    """The ``sweep`` node of a run's config, checked.

    Attributes:
        screen: a key of :data:`PROXIES`, or None for an exact sweep (the default).
        keep: grid jobs kept for the confirming stage, an int >= 1 (default 3).
    """

    screen: str | None = None
    keep: int = 3

    @property
    def proxy_overrides(self) -> tuple[str, ...]:
        """The proxy's overrides (:data:`PROXIES`); ``()`` for an exact sweep."""
        return PROXIES[self.screen] if self.screen else ()

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> ScreenSettings:
        """Check ``node`` (the ``sweep`` config node as plain data; None: the defaults).

        Raises:
            ScreenError: an unknown key (with the closest known one), an unknown proxy
                (``sweep.screen must be null (no screening) or one of 'static', 'bm25', got
                'statc' (did you mean 'static'?)``) or a ``keep`` that is not an int >= 1.
        """
        import difflib

        node = dict(node or {})
        for key in node:
            if key not in SWEEP_KEYS:
                close = difflib.get_close_matches(str(key), SWEEP_KEYS, n=1)
                hint = f"; did you mean sweep.{close[0]}?" if close else ""
                raise ScreenError(f"sweep.{key}: unknown setting{hint} (sweep settings: {', '.join(SWEEP_KEYS)})")
        screen = SCREEN.with_bounds(error=ScreenError).check(node.get("screen"), "sweep")
        keep = KEEP.with_bounds(error=ScreenError).check(node.get("keep", KEEP.default), "sweep")
        return cls(screen, keep)


def select(values: Sequence[float], keep: int, lower: bool = False) -> list[int]:
    """The indices of the ``keep`` best of ``values``, best first.

    Args:
        values: the proxy's objective per grid job (any finite float; NaN or +-inf for a job
            without a value: failed, invalid or busy; such a job is never kept).
        keep: how many to keep (>= 1): ``min(keep, number of finite values)`` are returned.
        lower: True when a lower objective is better (``context_tokens@k``).

    Returns:
        Indices into ``values``, best first; ties are broken by the lower index (the earlier
        grid job), so the choice is deterministic.

    Raises:
        ValueError: ``keep`` is not an int >= 1.
    """
    KEEP.check(keep)
    finite = [i for i, v in enumerate(values) if isinstance(v, (int, float)) and math.isfinite(v)]
    order = sorted(finite, key=lambda i: ((values[i] if lower else -values[i]), i))
    return order[:keep]


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1 (smallest) to n, tied values sharing the mean of their ranks
    ("fractional" ranking, as ``scipy.stats.rankdata(method="average")``)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _check_pairs(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y):
        raise ValueError(f"rank correlation needs two sequences of equal length, got {len(x)} and {len(y)}")
    if not all(math.isfinite(v) for v in [*x, *y]):
        raise ValueError("rank correlation needs finite values (a job without a value has no rank)")


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's r of the fractional ranks (:func:`ranks`), in [-1, 1].

    Source: C. Spearman, "The proof and measurement of association between two things",
    1904; ties as ``scipy.stats.spearmanr`` treats them.

    Returns:
        NaN for fewer than two pairs or when either side is constant (no ranking to compare).

    Raises:
        ValueError: lengths differ or a value is not finite.
    """
    _check_pairs(x, y)
    if len(x) < 2:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b over all pairs, in [-1, 1]: (concordant - discordant) / sqrt((n0 - ties
    in x) (n0 - ties in y)), n0 = n(n-1)/2; a pair tied on both sides counts in both ties.

    Source: M. G. Kendall, "The treatment of ties in ranking problems", 1945 (tau-b, as
    ``scipy.stats.kendalltau`` computes by default). O(n^2) pairs: meant for the confirmed jobs of a sweep.

    Returns:
        NaN for fewer than two pairs or when either side is constant.

    Raises:
        ValueError: lengths differ or a value is not finite.
    """
    _check_pairs(x, y)
    n = len(x)
    if n < 2:
        return math.nan
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx != 0 and dy != 0:
                if (dx > 0) == (dy > 0):
                    concordant += 1
                else:
                    discordant += 1
    n0 = n * (n - 1) // 2
    denominator = math.sqrt((n0 - ties_x) * (n0 - ties_y))
    if denominator == 0:
        return math.nan
    return max(-1.0, min(1.0, (concordant - discordant) / denominator))


def agreement(proxy: Sequence[float], confirmed: Sequence[float], lower: bool = False) -> dict[str, Any]:
    """How well the proxy ranked the confirmed jobs.

    Args:
        proxy: the proxy's objective of each confirmed job.
        confirmed: the configured model's objective of the same jobs, in the same order
            (NaN for a job without a value: it is left out of the correlations).
        lower: True when a lower objective is better.

    Returns:
        ``{"n": pairs with both values, "kendall_tau", "spearman_rho" (NaN when undefined),
        "best": index of the confirmed best (None without a value), "best_proxy_rank": that
        job's rank (1 = the proxy's best) in the proxy's order among the confirmed jobs}``.
    """
    pairs = [(p, c, i) for i, (p, c) in enumerate(zip(proxy, confirmed)) if math.isfinite(p) and math.isfinite(c)]
    px, cy = [p for p, _, _ in pairs], [c for _, c, _ in pairs]
    out: dict[str, Any] = {"n": len(pairs), "kendall_tau": math.nan, "spearman_rho": math.nan, "best": None, "best_proxy_rank": None}
    if pairs:
        out["kendall_tau"], out["spearman_rho"] = kendall_tau(px, cy), spearman_rho(px, cy)
        best = select(list(confirmed), 1, lower)[0]
        out["best"] = best
        out["best_proxy_rank"] = select(list(proxy), len(proxy), lower).index(best) + 1
    return out
