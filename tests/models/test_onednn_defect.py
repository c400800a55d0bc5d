"""The zoo steers clear of oneDNN's strided 1x1 convolution (docs/architecture.md, "oneDNN"): on
AVX2 CPUs its gradient writes outside its buffers when the input has fewer than 16 channels,
which crashed the suite at random. The replacement computes the same values, and the eager
gradients of the zoo models that had such a layer run clean under glibc's heap checks (its
malloc debug library, where the system has it; glibc >= 2.34 checks only with it loaded)."""
import os
import subprocess
import sys

import keras
import numpy as np

from models.architectures.layers import StridedPointwiseConv2D
from tests import REPO

# Before the fix, on an AMD EPYC (Zen 3, AVX2) with oneDNN on, the first eager gradient aborted
# under the heap checks and 3 without them crashed (3 runs of 3); 30 pass after it.
MALLOC_DEBUG = "/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"
PROBE = """
import numpy as np
import models
import keras, tensorflow as tf
for name in ("bcos_resnet50", "resnet18"):  # B-cos's patch norms; resnet18's 8-channel shortcut
    keras.utils.set_random_seed(0)
    model = models.build(name, 5, (64, 64, 3), **dict(models.spec(name).small))
    x = tf.constant(np.random.default_rng(0).uniform(size=(3, 64, 64, 3)).astype(np.float32))
    for _ in range(5):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = tf.reduce_sum(model(x)[:, 0])
        assert np.isfinite(tape.gradient(score, x).numpy()).all()
print("ok")
"""


def test_the_strided_pointwise_convolution_equals_keras_own():
    keras.utils.set_random_seed(0)
    images = np.random.default_rng(0).normal(size=(2, 10, 9, 5)).astype(np.float32)
    ours = StridedPointwiseConv2D(7, 1, strides=3, use_bias=True, bias_initializer="ones")
    plain = keras.layers.Conv2D(7, 1, strides=3, use_bias=True)
    expected_shape = (2, 4, 3, 7)
    found = ours(images)
    plain.build(images.shape)
    plain.set_weights(ours.get_weights())
    assert tuple(found.shape) == expected_shape == ours.compute_output_shape(images.shape)
    np.testing.assert_allclose(found, plain(images), rtol=1e-6, atol=1e-6)
    rebuilt = StridedPointwiseConv2D.from_config(ours.get_config())
    assert rebuilt.strides == (3, 3) and rebuilt.kernel_size == (1, 1)


def test_zoo_gradients_pass_glibcs_heap_checks():
    environment = {**os.environ, "MALLOC_CHECK_": "3", "TF_ENABLE_ONEDNN_OPTS": "1",
                   "PYTHONPATH": REPO}
    if os.path.exists(MALLOC_DEBUG):
        environment["LD_PRELOAD"] = MALLOC_DEBUG
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-1000:]
