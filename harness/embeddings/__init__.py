"""Embedding backends (sentence-transformers), loaded offline from installed packages."""
