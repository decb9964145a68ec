"""Render the metric registry as the markdown reference ``docs/metrics.md``.

Regenerate the file after any change to the registry::

    python -m harness.evaluation.metrics.reference > docs/metrics.md

``tests/evaluation/test_metrics_reference.py`` fails while the committed file differs from
:func:`metrics_markdown`, so the reference cannot drift from the code that computes the
numbers. Nothing here is computed at import time.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.evaluation.metrics import FAMILIES, RUN_VALUES, mlflow_key

#: The registry package whose modules the reference lists.
_PACKAGE = "harness.evaluation.metrics"

REGENERATE = "python -m harness.evaluation.metrics.reference > docs/metrics.md"

#: How each ``MetricFamily.param`` kind appears in a metric name, with an example value.
_PARAMS = {
    "k": ("`<name>@<k>`", "rank cut-off `k >= 1`", 5),
    "budget": ("`<name>@<B>tok`", "context budget of `B >= 1` tokens of `metrics.context_tokenizer`", 512),
    "none": ("`<name>`", "no parameter", None),
}

#: What each ``MetricFamily.level`` scores, in the order the sections appear.
_LEVELS = {
    "span": (
        "Span metrics",
        "Characters: the evidence spans against the spans of the returned units. They do not depend on `metrics.relevance`.",
    ),
    "chunk": (
        "Rank metrics on chunk relevance",
        "Binary relevance of each returned unit, decided from the evidence spans by the rule "
        "`metrics.relevance` (below). Ideal rankings and divisors range over the returnable units.",
    ),
    "document": (
        "Document-level metrics (`metrics.level=document`)",
        "Documents ranked by their best chunk's score (max-pooling), relevant when they hold evidence; for datasets labelled by document id (BEIR).",
    ),
    "context": (
        "Context size",
        "Tokens handed to a generator, counted with `metrics.context_tokenizer`.",
    ),
}


def _example(family) -> str:
    """A concrete metric name of ``family`` (``recall@5``, ``recall@512tok``, ``precision_omega``)."""
    value = _PARAMS[family.param][2]
    return {"k": f"{family.name}@{value}", "budget": f"{family.name}@{value}tok"}.get(family.param, family.name)


def _cell(text: str) -> str:
    """Escape a table cell: ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _summary(doc: str | None) -> str:
    """First paragraph of a docstring on one line (empty when there is none)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "`")


def _modules(pkg: str) -> list[tuple[str, str]]:
    """``(file path, first docstring paragraph)`` of the registry package and each of its modules."""
    package = importlib.import_module(pkg)
    rows = [(f"{pkg.replace('.', '/')}/__init__.py", _summary(package.__doc__))]
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name == "reference" or info.name.startswith("_"):  # this renderer, private modules
            continue
        module = importlib.import_module(f"{pkg}.{info.name}")
        rows.append((f"{pkg.replace('.', '/')}/{info.name}.py", _summary(module.__doc__)))
    return rows


def metrics_markdown() -> str:
    """The metric reference as markdown, rendered from the registry.

    Every ``MetricFamily`` of ``FAMILIES`` (in registry order, grouped by ``level``)
    becomes one section giving its name pattern, a concrete name and its MLflow key, the
    level it scores, its parameter, range, formula for one query, source, the function that
    computes it (its provider) and the display roles it holds. The relevance
    rules come from ``RELEVANCE_RULES`` of the registry's ``ranking`` module; the other values
    a run logs from ``RUN_VALUES`` (one table row each).

    Returns:
        The whole content of ``docs/metrics.md``, ending in one newline. Deterministic:
        the same registry gives the same text.

    Raises:
        ValueError: a family has a ``param`` or ``level`` this renderer does not know
            (extend ``_PARAMS`` / ``_LEVELS`` here together with the registry).
    """
    families = list(FAMILIES.values())
    for f in families:
        if f.param not in _PARAMS:
            raise ValueError(f"MetricFamily {f.pattern!r}: param {f.param!r} unknown to {__name__}; expected one of {sorted(_PARAMS)}")
        if f.level not in _LEVELS:
            raise ValueError(f"MetricFamily {f.pattern!r}: level {f.level!r} unknown to {__name__}; expected one of {sorted(_LEVELS)}")
    from harness.evaluation.metrics.ranking import RELEVANCE_RULES as rules

    pkg = _PACKAGE

    out: list[str] = [
        "# Metrics",
        "",
        f"<!-- Generated from the registry `{pkg}.FAMILIES`; do not edit by hand. Regenerate with: {REGENERATE} -->",
        "",
        "Every number a run reports for retrieval quality is one of the metric families below.",
        "For one query let `E` be the union of its evidence spans, `c_1 … c_n` the ranked returned",
        "units and `R_k` the union of the spans of `c_1 … c_k`. Sizes are in characters (Unicode",
        "code points); overlapping or duplicate units are counted once (set union), so no span",
        "metric exceeds 1 (the `chroma_*` families sum lengths instead, see below). The reported",
        "value is the mean over every labelled query: a query that retrieves nothing relevant",
        "scores 0 and is never dropped; a query its dataset gives no evidence is excluded and",
        "counted (`dataset.queries_without_evidence`).",
        "",
        "## Names and MLflow keys",
        "",
        "| pattern | parameter |",
        "|---|---|",
    ]
    out += [f"| {pat} | {desc} |" for pat, desc, _ in _PARAMS.values()]
    out += [
        "",
        "MLflow rejects `@` in metric names, so keys replace it with `_at_`: `recall@5` is logged",
        "as `recall_at_5`, `recall@512tok` as `recall_at_512tok`. Which names a run reports is",
        "set by `metrics.ks`, `metrics.budgets`, `metrics.level`, `metrics.relevance`,",
        "`metrics.relevance_fraction`, `metrics.context_tokenizer` and `metrics.convention`",
        "(defaults and comments in `conf/metrics/default.yaml`).",
        "",
        "*Returned units* are the retrieved chunks after `chunker.expand` (the chunks themselves",
        "for plain strategies; parents or windows for small-to-big). *Returnable units* are the",
        "image of `expand` over every indexed chunk: ideal rankings (nDCG), divisors (AP) and",
        "`Ω` (PrecisionΩ) range over them, so children that can never be returned count nowhere.",
        "",
        "| pattern | example | MLflow key | level | range |",
        "|---|---|---|---|---:|",
    ]
    for f in families:
        ex = _example(f)
        out.append(f"| `{f.pattern}` | `{ex}` | `{mlflow_key(ex)}` | {f.level} | {_cell(f.range)} |")
    out += [
        "",
        "## Relevance rules (`metrics.relevance`)",
        "",
        "A returned unit `c` is relevant when the rule holds for some evidence span `e` of the",
        "query. `f` is `metrics.relevance_fraction` (default 0.5). contains_evidence ⊆",
        "overlap_fraction ⊆ any_overlap.",
        "",
        "| rule | relevant when |",
        "|---|---|",
    ]
    out += [f"| `{name}` | {_cell(text)} |" for name, text in rules.items()]
    for level, (title, intro) in _LEVELS.items():
        members = [f for f in families if f.level == level]
        if not members:
            continue
        out += ["", f"## {title}", "", intro]
        for f in members:
            ex = _example(f)
            name = _PARAMS[f.param][0].replace("<name>", f.name)
            if ex != f.name:
                name += f", e.g. `{ex}`"
            out += [
                "",
                f"### `{f.pattern}`",
                "",
                f"- Name: {name} (MLflow key `{mlflow_key(ex)}`)",
                f"- Parameter: {_PARAMS[f.param][1]}",
                f"- Range: {f.range}",
                f"- Formula: {f.formula}",
                f"- Source: {f.source}",
                f"- Computed by: `{f.compute.source}` (provider `{f.provider}`)",
                f"- Shown in: {', '.join(f'{r} (position {f.position(r)})' for r in f.role_names) or 'the full tables only'}",
            ]
    out += [
        "",
        "## Chroma's conventions (`metrics.convention=chroma`)",
        "",
        "With `metrics.convention=chroma` a run also reports `chroma_recall@k`, `chroma_precision@k`,",
        "`chroma_iou@k` and `chroma_precision_omega`: the arithmetic of Chroma's chunking_evaluation",
        "package (Smith & Troynikov, 2024), for comparison with published numbers. Ours are computed",
        "as always and never replaced; with the default `harness` these names appear nowhere. Where",
        "the two conventions differ, and why ours are as they are:",
        "",
        "- Denominators. Ours are set unions: a character held by two overlapping or repeated units",
        "  (windows with `chunk_overlap`, a parent returned for two children) is retrieved once, and",
        "  overlapping evidence spans are evidence once, so retrieving all evidence gives recall 1.",
        "  Chroma sums the unit lengths (precision, IoU) and the evidence span lengths (recall), so",
        "  overlapping units lower its precision and IoU and overlapping evidence spans lower its recall.",
        "- Intervals. Spans are half-open everywhere in this project (`text[start:end]`), so a unit",
        "  that ends where the evidence starts shares no character with it. Chroma's intersection is",
        "  closed: such a unit intersects in zero characters. Numerators do not change, but the",
        "  touching unit enters the denominator of `chroma_precision_omega`.",
        "- PrecisionΩ. Ours divides by the units that overlap the evidence; Chroma's also adds the",
        "  evidence no unit covers to the denominator (as IoU does).",
        "- Other documents. A returned unit of another document holds no evidence of the question:",
        "  neither convention counts it in a numerator, both count it in the precision and IoU",
        "  denominators. A question with evidence in several documents (Chroma's have one corpus) is",
        "  matched document by document and the sums run over all of them.",
        "",
        "Units with several spans contribute each span as one range, their length being the sum of",
        "the spans. When no unit overlaps another, repeats, or touches evidence without overlapping",
        "it, and no two evidence spans overlap, `chroma_recall@k`, `chroma_precision@k` and",
        "`chroma_iou@k` equal ours.",
        "",
        "## Other values a run logs",
        "",
        "Besides the families above (and their bootstrap bounds `<key>_ci_low` / `<key>_ci_high`, in",
        "the metric's range; `compressed.<family>@k` in the family's range), a run logs the values",
        "below (`harness.evaluation.metrics.RUN_VALUES`; the name pattern is a regular expression).",
        "Every logged value is finite and inside its range; `value_bounds(name)` gives the range of",
        "any logged name and refuses a name documented nowhere, and the tests check every value of",
        "a run against it.",
        "",
        "| pattern | example | range | unit | meaning |",
        "|---|---|---:|---|---|",
    ]
    out += [f"| `{_cell(v.pattern)}` | `{v.example}` | {_cell(v.range)} | {_cell(v.unit)} | {_cell(v.meaning)} |" for v in RUN_VALUES]
    out += [
        "",
        "## Where they are computed",
        "",
    ]
    out += [f"- `{path}`: {summary}" for path, summary in _modules(pkg)]
    out += [
        "",
        "Formulas are checked against hand-worked examples and a brute-force character-mask",
        "oracle; the trec_eval values against ranx on generated queries.",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(metrics_markdown(), end="")
