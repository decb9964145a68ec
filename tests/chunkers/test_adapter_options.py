"""The library adapters share one check of ``on_unaligned`` / ``on_oversize`` (LibraryAdapter._init_adapter)."""

import pytest

from harness.chunkers.adapter import LibraryAdapter
from harness.chunkers.chonkie import ChonkieChunker
from harness.chunkers.langchain import LangChainChunker

ADAPTERS = [ChonkieChunker, LangChainChunker]


def test_every_adapter_is_listed():
    assert set(LibraryAdapter.__subclasses__()) == set(ADAPTERS)


@pytest.mark.parametrize("cls", ADAPTERS)
def test_bad_on_unaligned_names_the_option_and_its_choices(cls):
    with pytest.raises(ValueError) as err:
        cls(on_unaligned="drop")
    assert str(err.value) == "chunker.on_unaligned must be one of ['error', 'skip'], got 'drop'"


@pytest.mark.parametrize("cls", ADAPTERS)
def test_bad_on_oversize_names_the_option_and_its_choices(cls):
    with pytest.raises(ValueError) as err:
        cls(on_oversize="truncate")
    assert str(err.value) == "chunker.on_oversize must be one of ['error', 'split', 'ignore'], got 'truncate'"


@pytest.mark.parametrize("cls", ADAPTERS)
def test_the_check_is_the_shared_one(cls, monkeypatch):
    seen = []
    original = LibraryAdapter._init_adapter

    def spy(self, library, on_unaligned, on_oversize):
        seen.append((on_unaligned, on_oversize))
        return original(self, library, on_unaligned, on_oversize)

    monkeypatch.setattr(LibraryAdapter, "_init_adapter", spy)
    with pytest.raises(ValueError, match="on_oversize"):
        cls(on_oversize="truncate")
    assert seen == [("error", "truncate")]
