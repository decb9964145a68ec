"""Dataset loaders: each returns a :class:`harness.types.Dataset` whose evidence spans are verified.

Formats:
    * :func:`harness.datasets.native.load_native` -- this project's folder format
      (``corpus/`` files + ``questions.jsonl`` with exact spans); used by the embedded
      ``kestrel_kb`` dataset.
    * :func:`harness.datasets.chroma.load_chroma_general` -- the ``chunking_evaluation``
      general benchmark format (corpus files + ``questions.csv`` with ``references``).
    * :func:`harness.datasets.excerpts.load_excerpts` -- a corpus folder plus quoted
      excerpts located in it; :func:`harness.datasets.folder.load_folder` -- the same for a
      folder of mixed files (PDF, HTML, markdown, code, CSV, chat exports) whose text is
      extracted by :mod:`harness.ingest`.
    * :func:`harness.datasets.beir.load_beir`, :func:`harness.datasets.squad.load_squad`.
"""

from harness.datasets.validate import DatasetError, check_dataset

__all__ = ["DatasetError", "check_dataset"]
