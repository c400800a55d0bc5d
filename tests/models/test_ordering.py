"""`models.foundation.ordering`: always NumPy's stable order (docs/architecture.md, "Stable
orders"), also where a row has equal values, -0.0 beside 0.0, or NaNs."""
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from models.foundation import ordering

FEW = st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan, 3.0])  # ties and NaNs likely
ROWS = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
               elements=st.floats(allow_nan=True, width=64)),
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9), elements=FEW),
    hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=9),
               elements=st.integers(-3, 3)))


@settings(max_examples=300, deadline=None)
@given(ROWS, st.booleans(), st.integers(1, 9))
def test_the_order_and_places_are_numpys_stable_ones(values, descending, n):
    keys = -values if descending else values
    want = np.argsort(keys, axis=-1, kind="stable")
    np.testing.assert_array_equal(ordering.stable_order(values, descending), want)
    with mock.patch.object(ordering, "RADIX_WIDTH", 1):  # these short rows in radix passes
        np.testing.assert_array_equal(ordering.stable_order(values, descending), want)
    np.testing.assert_array_equal(ordering.top_order(values, n, descending), want[..., :n])
    places = ordering.places(values, descending)
    np.testing.assert_array_equal(np.take_along_axis(places, want, axis=-1),
                                  np.broadcast_to(np.arange(values.shape[-1]), values.shape))


@settings(max_examples=200, deadline=None)
@given(ROWS, st.integers(1, 3), st.booleans())
def test_the_places_of_repeated_rows_are_those_of_the_longer_rows(values, copies, descending):
    # a map broadcast over an image's channels, channel first: the row repeated end to end
    longer = np.concatenate([values] * copies, axis=-1)
    want = ordering.places(longer, descending).reshape(*values.shape[:-1], copies, -1)
    np.testing.assert_array_equal(ordering.places_repeated(values, copies, descending), want)


@pytest.mark.parametrize("radix_width", [ordering.RADIX_WIDTH, 10 ** 6])  # radix, comparison
def test_a_large_map_with_and_without_ties(radix_width):
    values = np.random.default_rng(3).normal(size=(16, 12_288))
    rectified = np.round(np.maximum(values, 0), 2)  # half zeros, and many equal values
    dead = np.where(values > 1.9, 0.0, values)  # 3% zeros: the tied entries sorted alone
    merged = 1.0 - 1e-12 * (np.arange(16 * 12_288) % 7).reshape(16, -1)  # one float32 value
    for map_ in (values, rectified, dead, merged, values.astype(np.float32)):
        with mock.patch.object(ordering, "RADIX_WIDTH", radix_width):
            found = ordering.stable_order(map_, True)
        np.testing.assert_array_equal(found, np.argsort(-map_, axis=1, kind="stable"))
        np.testing.assert_array_equal(ordering.top_order(map_, 5, True),
                                      np.argsort(-map_, axis=1, kind="stable")[:, :5])


def test_the_first_n_see_subnormal_numbers():
    # TensorFlow's kernels read subnormal numbers as 0: such values go to the stable sort
    for dtype, tiny in ((np.float64, 1e-310), (np.float32, np.float32(1e-40))):
        values = np.zeros((2, 50), dtype)
        values[0, 3], values[1, 5] = tiny, -tiny
        for descending in (True, False):
            want = np.argsort(-values if descending else values, axis=1, kind="stable")[:, :2]
            np.testing.assert_array_equal(ordering.top_order(values, 2, descending), want)
