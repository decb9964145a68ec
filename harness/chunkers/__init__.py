"""Chunking strategies. Each module holds one strategy; each has ``conf/chunker/<name>.yaml``.

Every chunker returns :class:`harness.types.Chunk` objects whose spans were tracked while
splitting (never found by searching the text).
"""

from harness.chunkers.base import Chunker

__all__ = ["Chunker"]
