"""Retriever interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from harness.types import Chunk, Query, Run


class Retriever(ABC):
    """Indexes chunks and returns the top-k chunk ids per query.

    Attributes:
        name: retriever name used in run names.
        needs_encoder: True when the builder must pass the shared encoder as ``encoder=``.
    """

    name: str = "base"
    needs_encoder: bool = False

    @abstractmethod
    def index(self, chunks: Sequence[Chunk]) -> None:
        """Build the index over ``chunks``.

        Raises:
            ValueError: ``chunks`` is empty (nothing to retrieve from).
        """

    @abstractmethod
    def search(self, queries: Sequence[Query], k: int) -> Run:
        """Top-k chunks per query.

        Args:
            queries: the queries to answer.
            k: results per query, >= 1; when k exceeds the number of indexed chunks every
                chunk is returned once (never padding ids).

        Returns:
            ``{query_id: {chunk_id: score}}`` with at most ``min(k, n_chunks)`` entries per
            query; a higher score ranks first. Every query id is present.
        """


def check_k(k: int) -> None:
    """Raise ``ValueError`` unless ``k`` is an int >= 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top-k must be an integer >= 1, got {k!r}")


def ranked(run: Run, query_id: str) -> list[str]:
    """Chunk ids of one query sorted by descending score (ties: ascending chunk id)."""
    scores = run.get(query_id, {})
    return sorted(scores, key=lambda cid: (-scores[cid], cid))
