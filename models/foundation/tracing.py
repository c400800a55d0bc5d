"""Traced functions that are built once per model, method or bottleneck by design."""
from typing import Any, Callable, Hashable, Sequence, TypeVar

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


def open_batch(function: Any) -> Callable[..., Any]:
    """`function` (a `tf.function` of tensors returning one structure) called through one
    trace whose every argument has an open first axis, so that calls of other batch sizes
    reuse it: the card scores 20 images, then the meta-evaluation's 16, where a trace of the
    exact shapes was made again for the second size (docs/report_card.md, "Where the card's
    time goes"). The other axes and the dtypes choose the trace; each trace is called with its
    flat tensors (`flat_call`)."""
    import tensorflow as tf  # here: importing the foundation loads no TensorFlow

    concretes: dict = {}

    def call(*args: Any) -> Any:
        tensors = [tf.convert_to_tensor(arg) for arg in args]
        key = tuple((tensor.dtype, tuple(tensor.shape[1:]) if tensor.shape.rank else None)
                    for tensor in tensors)
        if key not in concretes:
            concretes[key] = flat_call(function.get_concrete_function(*(
                tf.TensorSpec([None, *tensor.shape[1:]] if tensor.shape.rank else [],
                              tensor.dtype) for tensor in tensors)))
        return concretes[key](*tensors)
    call.function = function  # type: ignore[attr-defined]
    return call


def assigner(targets: Sequence[Any], sources: Sequence[Any]) -> Callable[[], None]:
    """One traced call that assigns each of `sources` (variables or tensors) to the variable of
    `targets` beside it, in order (a target may be a later pair's source), where an eager
    assignment costs about 0.1 ms a variable and a host copy of each value more."""
    import tensorflow as tf  # here: importing the foundation loads no TensorFlow

    pairs = list(zip(targets, sources, strict=True))

    @tf.function(autograph=False)
    def assign() -> None:
        for target, source in pairs:
            target.assign(source)
    return quiet_retracing(assign)


def set_aside(variables: Sequence[Any]) -> tuple[Callable[[], None], Callable[[], None]]:
    """(keep, restore): traced calls (`assigner`) that copy the values of `variables` into
    variables of their own and back (a copy on the device: no host round trip)."""
    import tensorflow as tf

    aside = [tf.Variable(tf.zeros_like(variable), trainable=False) for variable in variables]
    return assigner(aside, variables), assigner(variables, aside)
