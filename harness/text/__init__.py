"""Text layer: the span bookkeeping every other layer measures text with.

Owns size units (characters, words, model word pieces, tiktoken tokens; :mod:`.units`),
sentence and paragraph boundaries (:mod:`.sentences`), structural blocks of markdown,
code, tables and transcripts (:mod:`.blocks`), packing of pieces into size-limited
windows with overlap (:mod:`.packing`), placing a library's chunk strings back on source
offsets (:mod:`.align`), the escapes typed in separator settings (:mod:`.escapes`) and
Unicode normalisation forms, NFC vs NFD (:mod:`.normalisation`), and why bytes are not
UTF-8 (:mod:`.encoding`).
Every position is a character offset (code point) into ``Document.text``.

May import: :mod:`harness.types` and third-party libraries only. Imported by chunkers,
evaluation, ingest and datasets. Chunk output depends on this code, so it is part of the
chunk-cache code fingerprint (:data:`harness.cache.CHUNKER_CODE`).
"""
