"""Where the fp32 encoding floor could still move: padding, truncated tokenising, threads.

The texts are those of the reference benchmark's cold run: the chunks of ``chroma_general``
(or, with ``--dataset kestrel_kb``, of the packaged dataset) under fixed 400-token
cl100k_base windows (``chunker=fixed chunker.compatible=chroma``) and the questions,
embedded with all-MiniLM-L6-v2 in fp32 on the CPU. One loaded model, timed side by side:
every round runs every variant once (the order rotates between rounds), so all of them see
the same background load; the JSON gives each variant's median wall and CPU seconds
(``time.process_time``, all threads of the process), the medians over rounds of its ratios
to the reference variant, and whether its vectors are bitwise equal to the reference's.

Batching and tokenising, on one torch thread (so CPU seconds stay comparable when other
jobs share the machine), reference ``current``:

* ``current``: ``Encoder.encode`` as shipped (window check, blocks of ``4 * batch_size``
  longest first, ``SentenceTransformer.encode`` with ``batch_size=64``, which sorts each
  block by characters again), chunks then queries.
* ``token_sorted``: batches of 64 sorted by word pieces instead of characters.
* ``token_budget``: batches filled up to 64 x 256 padded word pieces (short texts share a
  larger batch).
* ``no_padding``: batches of at most 64 texts of one word-piece count each (no padding at
  all; more, smaller batches): what removing the padding could give at most.
* ``pre_truncated``: each chunk over the window cut, at a word boundary, right after the word
  pieces the model keeps (one tokenising with offsets, in place of the window check's), so
  the model tokenises only what it reads.

Threads: ``current`` with torch's default threads (one per core) against one thread.

Also reported: padding of the ``current`` batches (padded word pieces vs real ones), the
CPU seconds of tokenising the chunks alone, and of building the FAISS flat index (what
encoding the queries could overlap with).

    python experiments/encode_floor.py [--dataset chroma_general|kestrel_kb] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[1]
BATCH = 64


def benchmark_texts(dataset: str = "chroma_general", path: Path | None = None) -> tuple[list[str], list[str]]:
    """(chunk texts, question texts) of ``dataset`` (``chroma_general`` from ``path``, default
    the project's shared copy; or the packaged ``kestrel_kb``) with fixed 400/0 cl100k_base windows."""
    from harness.chunkers.fixed import FixedChunker

    if dataset == "kestrel_kb":
        from harness.datasets.native import load_native

        ds = load_native(path or PROJECT_ROOT / "datasets" / "kestrel_kb", name="kestrel_kb")
    else:
        from harness.datasets.chroma import load_chroma_general

        ds = load_chroma_general(path=path, project_root=PROJECT_ROOT, download=False)
    chunker = FixedChunker(400, 0, "tokens", "cl100k_base", compatible="chroma")
    return [c.text for d in ds.documents for c in chunker.chunk(d)], [q.text for q in ds.queries]


def word_piece_counts(tokenizer, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True)]


def pre_truncate(tokenizer, texts: list[str], limit: int) -> list[str]:
    """Each text cut before the first word that starts after the ``limit - 2`` word pieces
    the model keeps; texts within the window unchanged. The model's truncated word pieces
    are the same for the cut text (BERT pre-tokenisation splits at whitespace and
    punctuation, and a whole word is tokenised alone)."""
    keep = limit - 2
    out = []
    for text, enc in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False)):
        if len(enc.ids) <= keep:
            out.append(text)
            continue
        words = enc.word_ids
        j = keep
        while j < len(words) and words[j] == words[j - 1]:
            j += 1
        out.append(text if j >= len(words) else text[: enc.offsets[j][0]])
    return out


def batches_by(order: list[int], sizes: list[int], budget: int | None, exact: bool = False) -> list[list[int]]:
    """Indices in ``order`` grouped into batches of 64, or (``budget``) of at most ``budget``
    padded pieces; ``exact``: batches of 64 whose texts all have the same (truncated) size."""
    out, cur, longest = [], [], 0
    for i in order:
        n = min(sizes[i], 256)
        if cur and (len(cur) >= BATCH if budget is None else max(longest, n) * (len(cur) + 1) > budget):
            out.append(cur)
            cur, longest = [], 0
        elif cur and exact and n != longest:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def encode_batches(model, texts: list[str], batches: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for b in batches:
        out[b] = model.encode([texts[i] for i in b], batch_size=len(b), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False, prompt="")
    return out


def padding(tokenizer, texts: list[str], limit: int) -> dict:
    """Padded and real word pieces of ST's batches of 64 (sorted by characters) over ``texts``."""
    sizes = [min(n, limit) for n in word_piece_counts(tokenizer, texts)]
    order = np.argsort([-len(t) for t in texts])
    real = padded = 0
    for s in range(0, len(order), BATCH):
        part = [sizes[i] for i in order[s : s + BATCH]]
        real += sum(part)
        padded += max(part) * len(part)
    return {"real": real, "padded": padded, "waste": round((padded - real) / padded, 4)}


def _timed(fn) -> tuple[float, float, np.ndarray]:
    """(wall seconds, CPU seconds of this process, result) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def interleaved(variants: dict, rounds: int, reference: str) -> dict:
    """Run every variant once per round (order rotating); per variant the median wall and
    CPU seconds, the medians over rounds of their ratios to ``reference``, and whether its
    vectors equal the reference's bit for bit."""
    names = list(variants)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    vectors = {}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            w, c, vectors[name] = _timed(variants[name])
            wall[name].append(w)
            cpu[name].append(c)
        print(f"round {r + 1}: " + ", ".join(f"{k} {wall[k][-1]:.2f}s wall {cpu[k][-1]:.2f}s cpu" for k in names), file=sys.stderr)
    ref = vectors[reference]
    out = {}
    for name in names:
        out[name] = {
            "wall_s": round(statistics.median(wall[name]), 3),
            "cpu_s": round(statistics.median(cpu[name]), 3),
            "wall_ratio": round(statistics.median(a / b for a, b in zip(wall[name], wall[reference])), 3),
            "cpu_ratio": round(statistics.median(a / b for a, b in zip(cpu[name], cpu[reference])), 3),
            "bitwise_equal": bool(np.array_equal(vectors[name], ref)),
            "max_abs_diff": float(np.abs(vectors[name] - ref).max()),
        }
    return out


#: Where the table sits in docs/benchmark.md.
DOCS_MARKERS = ("<!-- encode-floor:start -->", "<!-- encode-floor:end -->")


def render_markdown(result: dict) -> str:
    """The docs table of a result JSON: one row per variant, then padding and tokenising."""
    lines = [
        "| variant | torch threads | wall s | CPU s | wall / reference | CPU / reference | vectors vs reference |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    groups = (("batching_one_thread", lambda name: "1"), ("threads", lambda name: name.split("=", 1)[1]))
    for group, threads in groups:
        for name, v in result[group].items():
            same = "bitwise equal" if v["bitwise_equal"] else f"differ (max {v['max_abs_diff']:.1e})"
            lines.append(f"| {name} | {threads(name)} | {v['wall_s']:.2f} | {v['cpu_s']:.2f} | {v['wall_ratio']:.3f} | {v['cpu_ratio']:.3f} | {same} |")
    pad, tk, texts = result["padding_current"], result["tokenize_chunks_cpu_s"], result["texts"]
    lines.append("")
    lines.append(
        f"{result['dataset']}: {texts['chunks']} chunks ({texts['chunks_over_window']} over the 256-word-piece window) and "
        f"{texts['queries']} queries; {result['rounds']} rounds; load average {result['load_average_1min']['before']} before, "
        f"{result['load_average_1min']['after']} after, on {result['cpu_count']} cores. Padding of the shipped batches: "
        f"{100 * pad['chunks']['waste']:.1f}% of the chunks' padded word pieces, {100 * pad['queries']['waste']:.1f}% of the queries'. "
        f"Tokenising the chunks alone (CPU s): window check {tk['window_check_count']:.3f}, model full texts {tk['model_tokenize_full']:.3f}, "
        f"model pre-truncated {tk['model_tokenize_pre_truncated']:.3f}. FAISS flat index of the chunks: {1000 * result['faiss_flat_build_s']:.1f} ms."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dataset", default="chroma_general", choices=("chroma_general", "kestrel_kb"))
    parser.add_argument("--dataset-path", type=Path, default=None, help="the dataset's folder (default: the project's copy)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--from-json", type=Path, default=None, help="print the docs table of this JSON and exit")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        print(render_markdown(json.loads(args.from_json.read_text(encoding="utf-8"))))
        return 0

    import os

    import faiss
    import torch

    from harness.embeddings.model import Encoder

    load_before = os.getloadavg()
    chunks, queries = benchmark_texts(args.dataset, args.dataset_path)
    base = Encoder(show_progress=False, on_truncate="ignore", precision="fp32")
    model, tok, limit = base.model, base._tokenizer, base.max_seq_length
    default_threads = torch.get_num_threads()

    def current() -> np.ndarray:
        import warnings

        enc = Encoder(show_progress=False, precision="fp32", on_truncate="warn")
        enc._model = model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.concatenate([enc.encode(chunks), enc.encode(queries, role="query")])

    def by_tokens(budget: int | None, exact: bool = False) -> np.ndarray:
        # chunks and queries in separate calls, as a run embeds them
        parts = []
        for group in (chunks, queries):
            sizes = word_piece_counts(tok, group)  # the window check counts them in any case
            order = sorted(range(len(group)), key=lambda i: -sizes[i])
            parts.append(encode_batches(model, group, batches_by(order, sizes, budget, exact)))
        return np.concatenate(parts)

    def token_sorted() -> np.ndarray:
        return by_tokens(None)

    def token_budget() -> np.ndarray:
        return by_tokens(BATCH * limit)

    def no_padding() -> np.ndarray:
        return by_tokens(None, exact=True)

    def pre_truncated() -> np.ndarray:
        enc = Encoder(show_progress=False, precision="fp32", on_truncate="ignore")
        enc._model = model
        prefixes = pre_truncate(tok, chunks, limit)  # one full tokenising, as the window check does
        return np.concatenate([enc.encode(prefixes), enc.encode(queries, role="query")])

    def with_threads(n: int):
        def run() -> np.ndarray:
            torch.set_num_threads(n)
            try:
                return current()
            finally:
                torch.set_num_threads(default_threads)

        return run

    current()  # warm-up: first-call allocations and kernel selection
    # Batching and tokenising variants on one thread: CPU seconds are then comparable even
    # when other jobs share the machine (wall seconds are reported too).
    torch.set_num_threads(1)
    batching = interleaved(
        {"current": current, "token_sorted": token_sorted, "token_budget": token_budget, "no_padding": no_padding, "pre_truncated": pre_truncated},
        args.rounds,
        "current",
    )
    torch.set_num_threads(default_threads)
    threads = interleaved({f"threads={default_threads}": current, "threads=1": with_threads(1)}, args.rounds, f"threads={default_threads}")

    ref = current()
    result = {
        "dataset": args.dataset,
        "texts": {"chunks": len(chunks), "queries": len(queries), "chunks_over_window": int(sum(n > limit for n in word_piece_counts(tok, chunks)))},
        "torch_threads_default": default_threads,
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "rounds": args.rounds,
        "batching_one_thread": batching,
        "threads": threads,
        "padding_current": {"chunks": padding(tok, chunks, limit), "queries": padding(tok, queries, limit)},
    }
    # Tokenising alone (one thread of the model; the tokenizer's own pool as configured).
    cut = pre_truncate(tok, chunks, limit)
    tk = {"window_check_count": [], "model_tokenize_full": [], "model_tokenize_pre_truncated": []}
    for _ in range(max(args.rounds, 5)):
        for name, fn in (
            ("window_check_count", lambda: word_piece_counts(tok, chunks)),
            ("model_tokenize_full", lambda: model.preprocess(chunks)),
            ("model_tokenize_pre_truncated", lambda: model.preprocess(cut)),
        ):
            tk[name].append(_timed(fn)[1])
    result["tokenize_chunks_cpu_s"] = {k: round(statistics.median(v), 4) for k, v in tk.items()}
    w, c, _ = _timed(lambda: faiss.IndexFlatIP(ref.shape[1]).add(ref[: len(chunks)]))
    result["faiss_flat_build_s"] = round(w, 5)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(render_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
