"""Traced functions that are built once per model, method or bottleneck by design."""


def quiet_retracing(function):
    """Marks a `tf.function` so TensorFlow does not warn about "frequent retracing": tools that
    build one traced function per model, method or bottleneck trigger that warning by design.
    Keras silences it for its own functions the same way. Returns `function`."""
    if hasattr(function, "_omit_frequent_tracing_warning"):
        function._omit_frequent_tracing_warning = True
    return function
