"""`models.foundation.keyed_random`: every row equal to TensorFlow's own stateless draw, bit for
bit (docs/architecture.md, "Keyed draws")."""
import numpy as np
import pytest
import tensorflow as tf

from models.foundation import keyed_random

# keys past 32 bits, negative ones (two's complement) and int32 keys
KEYS = [[0, 0], [7, 123], [-5, -9], [2**40 + 3, -1], [1_000_003 * 9, 2**62]]


def _reference(keys, shape) -> np.ndarray:
    return np.stack([tf.random.stateless_uniform(shape, key).numpy() for key in keys])


@pytest.mark.parametrize("shape", [[1], [2], [5], [3, 4], [6, 5, 3]])
def test_rows_equal_tensorflows_stateless_draws_bit_for_bit(shape):
    keys = tf.constant(KEYS, tf.int64)
    expected = _reference(KEYS, shape)
    eager = keyed_random.rows_uniform(keys, shape).numpy()
    traced = tf.function(lambda k: keyed_random.rows_uniform(k, shape))(keys).numpy()
    assert eager.shape == (len(KEYS), *shape)
    np.testing.assert_array_equal(eager.view(np.int32), expected.view(np.int32))
    np.testing.assert_array_equal(traced.view(np.int32), expected.view(np.int32))
    small = [[1, 2], [-3, 4]]
    np.testing.assert_array_equal(keyed_random.rows_uniform(tf.constant(small, tf.int32), shape),
                                  _reference(small, shape))


def test_no_rows_and_a_long_row():
    assert keyed_random.rows_uniform(tf.zeros([0, 2], tf.int64), [3, 2]).shape == (0, 3, 2)
    long = keyed_random.rows_uniform(tf.constant([[11, 12]], tf.int64), [12_289]).numpy()
    np.testing.assert_array_equal(long, _reference([[11, 12]], [12_289]))

