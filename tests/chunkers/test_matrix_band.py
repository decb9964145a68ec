"""The one band builder under optimal_segmentation and chroma_segmentation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.chunkers.cluster_semantic import _matrix_band, chroma_segmentation, optimal_segmentation


@given(n=st.integers(0, 7), max_width=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_band_holds_the_diagonals_and_nan_past_the_end(n, max_width, seed):
    sim = np.random.default_rng(seed).uniform(-1, 1, (n, n))
    band, mu = _matrix_band(sim, "max_width", max_width)
    width = max(1, min(max_width, n))
    assert band.shape == (n, width)
    for i in range(n):
        for k in range(width):
            if i + k < n:
                assert band[i, k] == sim[i, i + k]
            else:
                assert np.isnan(band[i, k])
    upper = [sim[i, j] for i in range(n) for j in range(i + 1, n)]
    assert mu == pytest.approx(float(np.mean(upper)) if upper else 0.0)


@pytest.mark.parametrize(("segment", "name"), [(optimal_segmentation, "max_pieces"), (chroma_segmentation, "max_cluster")])
def test_both_callers_name_their_own_setting(segment, name):
    with pytest.raises(ValueError, match="similarity must be a square matrix, got shape \\(2, 3\\)"):
        segment(np.zeros((2, 3)), 2)
    with pytest.raises(ValueError, match=name):
        segment(np.zeros((2, 2)), 0)
