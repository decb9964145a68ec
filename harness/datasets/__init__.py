"""Dataset loaders: each returns a :class:`harness.types.Dataset` whose evidence spans are verified.

Formats:
    * :func:`harness.datasets.native.load_native` -- this project's folder format
      (``corpus/`` files + ``questions.jsonl`` with exact spans); used by the embedded
      ``kestrel_kb`` dataset.
    * :func:`harness.datasets.chroma.load_chroma_general` -- the ``chunking_evaluation``
      general benchmark format (corpus files + ``questions.csv`` with ``references``).
"""

from harness.datasets.validate import DatasetError, check_dataset

__all__ = ["DatasetError", "check_dataset"]
