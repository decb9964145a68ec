"""Retrievers: ``index(chunks)`` then ``search(queries, k)`` -> Run (query id -> {chunk id -> score})."""

from harness.retrievers.base import Retriever

__all__ = ["Retriever"]
