#!/usr/bin/env bash
# Every chunking strategy at its default settings, FAISS retrieval, on one dataset
# (default chroma_general); then print the comparison table.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATASET=${DATASET:-chroma_general}
CHUNKERS=$(ls conf/chunker/*.yaml | xargs -n1 basename | sed 's/\.yaml$//' | paste -sd, -)
$PY -m harness.run -m dataset="$DATASET" chunker="$CHUNKERS" retriever=faiss embedding.show_progress=false || true
$PY experiments/strategy_table.py --experiment "$DATASET" --retriever faiss
