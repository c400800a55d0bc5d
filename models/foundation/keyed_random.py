"""Keyed uniform draws for many rows at once (docs/architecture.md, "Keyed draws").

Row i of `rows_uniform(keys, shape)` is `tf.random.stateless_uniform(shape, keys[i])` bit for
bit: TensorFlow's Philox-4x32-10 generator with its scrambling of a seed into a key and a
counter, written as integer tensor arithmetic, so that every row is drawn by one XLA-compiled
kernel instead of one random op per row in a `tf.map_fn` loop. Integer arithmetic is exact on
every device and under XLA, so the bits do not depend on where or how the rows are computed.
"""
from typing import Sequence

import numpy as np
import tensorflow as tf

# Philox-4x32's multipliers and key increments (Salmon et al. 2011, as TensorFlow's
# lib/random/philox_random.h)
_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_ROUNDS = 10
# the fixed key with which TensorFlow scrambles a stateless op's seed into its key and counter
_SCRAMBLE_KEY = (0x3EC8F720, 0x02461E29)
_LOW = 0xFFFFFFFF


def _low_high(value: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The low and high 32-bit words of uint64 values, as uint64."""
    return tf.bitwise.bitwise_and(value, _LOW), tf.bitwise.right_shift(value, 32)


def _philox(counter: list, key: list) -> list:
    """Philox-4x32-10 of a counter (four uint32 words held in uint64 tensors) under a key (two
    words): the four output words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(_ROUNDS):
        low0, high0 = _low_high(tf.constant(_MULTIPLIERS[0], tf.uint64) * c0)
        low1, high1 = _low_high(tf.constant(_MULTIPLIERS[1], tf.uint64) * c2)
        c0, c1, c2, c3 = (tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(high1, c1), k0), low1,
                          tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(high0, c3), k1), low0)
        if round_ < _ROUNDS - 1:
            k0 = tf.bitwise.bitwise_and(k0 + _KEY_STEPS[0], _LOW)
            k1 = tf.bitwise.bitwise_and(k1 + _KEY_STEPS[1], _LOW)
    return [c0, c1, c2, c3]


@tf.function(jit_compile=True, autograph=False)
def _unit_rows(keys: tf.Tensor, groups: int) -> tf.Tensor:
    """float32 [N, 4 groups]: each row's first 4 `groups` draws in [0, 1)."""
    seeds = tf.cast(keys, tf.uint64)  # two's complement, as the random ops read a seed
    seed0, seed1 = _low_high(seeds[:, 0]), _low_high(seeds[:, 1])
    fixed = [tf.constant(word, tf.uint64) for word in _SCRAMBLE_KEY]
    mixed = _philox([seed0[0], seed0[1], seed1[0], seed1[1]], fixed)
    rows = tf.shape(keys)[0]
    zeros = tf.zeros([rows, groups], tf.uint64)
    # the row's counter starts at (0, 0, mixed[2], mixed[3]); group g adds g to its first word
    counter = [tf.cast(tf.range(groups), tf.uint64)[None, :] + zeros, zeros,
               mixed[2][:, None] + zeros, mixed[3][:, None] + zeros]
    words = _philox(counter, [mixed[0][:, None] + zeros, mixed[1][:, None] + zeros])
    words = tf.reshape(tf.stack(words, axis=2), [rows, 4 * groups])
    # 23 random mantissa bits under the exponent of 1: a float in [1, 2), less 1
    bits = tf.bitwise.bitwise_or(tf.bitwise.bitwise_and(words, 0x7FFFFF), 0x3F800000)
    return tf.bitcast(tf.cast(bits, tf.uint32), tf.float32) - 1.0


def rows_uniform(keys: tf.Tensor, shape: Sequence[int]) -> tf.Tensor:
    """float32 [N, *shape]: U(0, 1) per row of the integer `keys` [N, 2], row i equal to
    `tf.random.stateless_uniform(shape, keys[i])` bit for bit (eagerly or while tracing)."""
    shape = [int(size) for size in shape]
    size = int(np.prod(shape, dtype=np.int64))
    keys = tf.cast(tf.convert_to_tensor(keys), tf.int64)
    draws = _unit_rows(keys, -(-size // 4))[:, :size]
    return tf.reshape(draws, tf.concat([tf.shape(keys)[:1], shape], axis=0))
