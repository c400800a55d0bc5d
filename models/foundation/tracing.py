"""Traced functions that are built once per model, method or bottleneck by design."""
from typing import Any, Callable, Hashable, TypeVar

Built = TypeVar("Built")
_F = TypeVar("_F")
# owner (a model) -> {key: traced function}, kept in the owner's own attributes, so that an
# entry goes with its owner even when the entry refers to it (an adapter holds its model); a
# weakly keyed table beside them kept every such owner alive (about 200 MB a loaded network)
_ATTRIBUTE = "_kept_builds"


def kept(owner: Any, key: Hashable, build: Callable[[], Built]) -> Built:
    """What `build()` makes (a traced function, a model's adapter), built once per (`owner`,
    `key`) and kept as long as `owner` lives, so every caller with the same owner and key
    reuses it (and its traces). An owner without attributes of its own (None, a path) keeps
    nothing: each call builds."""
    try:
        attributes = vars(owner)  # (not setattr: Keras would track the table as a layer's)
    except TypeError:
        return build()
    functions = attributes.setdefault(_ATTRIBUTE, {})
    if key not in functions:
        functions[key] = build()
    return functions[key]


def quiet_retracing(function: _F) -> _F:
    """Marks a `tf.function` so TensorFlow does not warn about "frequent retracing": tools that
    build one traced function per model, method or bottleneck trigger that warning by design.
    Keras silences it for its own functions the same way. Returns `function`."""
    if hasattr(function, "_omit_frequent_tracing_warning"):
        function._omit_frequent_tracing_warning = True
    return function


def flat_call(concrete: Any) -> Callable[..., Any]:
    """`concrete(*tensors)` without its binding of Python arguments to the signature (half a
    millisecond a call: the same order as a cheap model's gradients of a few images): through
    TensorFlow's flat call, where the installed TensorFlow has it, else the public call. The
    caller passes exactly the signature's tensors, in order, of its dtypes."""
    flat = getattr(concrete, "_call_flat", None)
    if flat is None or not hasattr(concrete, "captured_inputs"):
        return concrete
    return lambda *tensors: flat(list(tensors), concrete.captured_inputs)
