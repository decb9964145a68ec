"""What a loader skipped or could not resolve: counts per kind plus the problems themselves.

Loaders of foreign formats (BEIR, SQuAD, excerpt lists) may legitimately drop records
(a query without relevance judgements, an unanswerable question). Dropping silently would
change what a metric averages over, so every drop is counted here, logged as a warning when
the dataset is loaded, and printed by ``harness datasets validate``.

A labelled query that has no evidence in its file (BEIR: no positive judgement in the
split; SQuAD: unanswerable; excerpts/folder: an empty ``excerpts`` list or none located
with ``allow_unlocated``; native: an empty ``evidence`` list; chroma: empty
``references``) is excluded -- never scored 0 -- and counted under
:data:`QUERIES_WITHOUT_EVIDENCE`; a run logs that count as the metric
``dataset.queries_without_evidence``.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

#: Report kind (and, prefixed with ``dataset.``, the run metric) counting labelled queries
#: excluded because their file gives them no evidence span.
QUERIES_WITHOUT_EVIDENCE = "queries_without_evidence"


@dataclass
class LoadReport:
    """Counts and messages collected while loading one dataset.

    Attributes:
        name: dataset name the report belongs to.
        counts: kind -> number of records (e.g. ``{"queries_without_qrels": 3}``); only
            kinds that occurred at least once are present.
        problems: one human-readable message per dropped or unresolved record, in file
            order, each naming the file and line (or JSON path) it refers to.
        info: neutral facts that are not problems (e.g. ``{"located_exact": 12}``); printed
            by ``validate`` but never logged as a warning.
    """

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    info: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, message: str | None = None) -> None:
        """Count one record of ``kind``; keep ``message`` (if given) as a problem line."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if message:
            self.problems.append(message)

    def without_evidence(self, evidence: object, message: str) -> bool:
        """True when ``evidence`` (a record's evidence field) is None or ``[]``: a query
        labelled with no evidence, excluded from scoring; it is then counted as
        :data:`QUERIES_WITHOUT_EVIDENCE` with ``message``. False (nothing counted) otherwise."""
        if evidence is None or evidence == []:
            self.add(QUERIES_WITHOUT_EVIDENCE, message)
            return True
        return False

    def note(self, kind: str) -> None:
        """Count one neutral fact of ``kind`` in :attr:`info`."""
        self.info[kind] = self.info.get(kind, 0) + 1

    def count(self, kind: str) -> int:
        """How many records of ``kind`` were counted (0 when none)."""
        return self.counts.get(kind, 0)

    def summary(self, first: int = 5) -> str:
        """One paragraph: the counts, then the first ``first`` problems (``first >= 0``)."""
        if not self.counts:
            return f"dataset {self.name!r}: nothing dropped"
        parts = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        lines = [f"dataset {self.name!r}: {parts}"]
        lines += [f"  - {p}" for p in self.problems[:first]]
        if len(self.problems) > first:
            lines.append(f"  ... and {len(self.problems) - first} more")
        return "\n".join(lines)

    def log(self, logger: logging.Logger) -> None:
        """Emit :meth:`summary` as one WARNING when anything was counted; queries excluded
        for lack of evidence are also reported with :func:`warnings.warn` (they change what
        every mean metric averages over)."""
        if self.counts:
            logger.warning("%s", self.summary())
        n = self.count(QUERIES_WITHOUT_EVIDENCE)
        if n:
            warnings.warn(
                f"dataset {self.name!r}: {n} labelled quer{'y' if n == 1 else 'ies'} without evidence excluded from "
                f"scoring (dataset.queries_without_evidence={n}; not scored 0)",
                UserWarning,
                stacklevel=3,  # the caller of the loader's load_* function
            )
