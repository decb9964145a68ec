#!/usr/bin/env bash
# Baselines on Chroma's general benchmark (../shared/datasets/chroma_general):
# fixed 400-token windows with both tokenizers and both retrievers, recursive, and semantic.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
$PY -m harness.run -m dataset=chroma_general chunker=fixed chunker.unit=tokens \
    chunker.chunk_size=400 chunker.chunk_overlap=0 chunker.tokenizer=model,cl100k_base retriever=faiss,bm25
$PY -m harness.run -m dataset=chroma_general chunker=recursive chunker.chunk_size=200,400 retriever=faiss,bm25
$PY -m harness.run -m dataset=chroma_general chunker=semantic chunker.threshold=0.5,0.8
