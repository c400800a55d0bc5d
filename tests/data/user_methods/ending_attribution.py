"""Methods that misbehave as user code can (tests/test_error_catalogue.py): one ends the program
with sys.exit, one fails a graph-mode check with its own message, one blocks inside a
TensorFlow kernel (a py_function that sleeps) until Ctrl-C."""
import sys
import time

import tensorflow as tf


def calls_sys_exit(model, images, targets):
    sys.exit(3)


def graph_check(model, images, targets):
    tf.debugging.assert_less(tf.reduce_max(images), -1000.0, message="my own graph check failed")
    return images


def blocks(model, images, targets):
    def sleep(x):
        print("blocking inside the kernel", file=sys.stderr, flush=True)  # (the test's cue)
        time.sleep(600)
        return x

    return tf.py_function(sleep, [images], tf.float32)
