"""The one chunked executor: work items streamed through a model in fixed-size chunks.

Both the attribution engine (`saliency_gen.attribution.engine`) and the faithfulness scorer
(`faithfulness.scorer`) cut their work into items (image x noise sample x path step, or image x
deletion step), flatten them into one stream and evaluate it in chunks of exactly `chunk` items
inside one `tf.while_loop` (docs/architecture.md, "The chunked executor"):

* `collect` concatenates each item's output, in item order;
* `accumulate` scatter-adds each item's outputs into per-slot sums (one slot per image, or per
  image and noise sample).

A chunk of `TAIL_FROM` items or more streams whole chunks only; the items left over are run in
tail chunks of a quarter of its size (a second traced copy of `compute`), so that a small job
does not pay for up to a whole chunk of padding. The last chunk is padded with repeats of the last
item; their outputs are dropped (`collect`) or sent to a slot that is thrown away
(`accumulate`). A chunk's items never see one another, so results do not depend on the chunk
size (but for rounding: oneDNN's kernels may round differently at another batch size). Both
functions are meant to be called while a `tf.function` traces. `chunk_size` chooses a stream's
chunk where its length is known before tracing (the items split evenly, little padding).
`groups` cuts a job into groups of images whose per-image state fits a memory budget; that
Python loop is over groups of many images, never over images.
"""
import threading
from typing import Any, Callable, Iterator, Sequence

import tensorflow as tf

# Chunks in flight: the next chunk's inputs are prepared while the current one runs the model.
CHUNKS_IN_FLIGHT = 2


# Chunks of at least this many items run their left-over items in chunks of a quarter of the
# size: padding then costs at most a quarter chunk (a chunk of 256 items over 64 images x 25
# path points pads 192 items, 11% of the work, without tail chunks; 0 with them).
TAIL_FROM = 128
TAIL_DIVISOR = 4


CHUNK_QUANTUM = 4  # items: an evenly split stream's chunk is a multiple of this


def chunk_size(items: int, largest: int) -> int:
    """The chunk for a stream of `items` items (known before tracing) in chunks of at most
    `largest`: all of them when they fit, else the items split evenly over the fewest chunks,
    rounded up to a multiple of `CHUNK_QUANTUM`. A stream then pads at most 3 items a chunk,
    where chunks of `largest` pad up to `largest` - 1 (96 images in chunks of 64 computed 128),
    and streams longer than `largest` see at most eight chunk sizes (from largest / 2 to
    largest, for a `largest` of 64): a traced function per size, few of them."""
    if items <= largest:
        return max(1, items)
    chunks = -(-items // largest)
    even = -(-items // chunks)
    return min(largest, -(-even // CHUNK_QUANTUM) * CHUNK_QUANTUM)


def compiled_chunk_size(items: int, largest: int) -> int:
    """The chunk of a stream of `items` items whose computation XLA compiles per chunk size
    (ROAD's solver: seconds a size, docs/architecture.md): `largest`, half, a quarter or an
    eighth of it, whichever pads the fewest items, the larger on a tie, so streams of any length
    share four sizes (`chunk_size` may choose any). 16 images x 5 cuts at 64: 5 chunks of 16,
    where chunks of 64 computed 128 items; 4 x 5: 3 chunks of 8, where one of 32 computed 32."""
    sizes = [max(1, largest // share) for share in (1, 2, 4, 8)]
    return min(sizes, key=lambda size: (-(-items // size) * size, -size))


def _passes(count, chunk: int) -> list:
    """[(first item, number of chunks, chunk size)]: the streams that cover `count` items."""
    if chunk < TAIL_FROM:
        return [(0, (count + chunk - 1) // chunk, chunk)]
    tail = chunk // TAIL_DIVISOR
    whole = count // chunk
    rest = count - whole * chunk
    return [(0, whole, chunk), (whole * chunk, (rest + tail - 1) // tail, tail)]


def _padded_items(first, index, chunk: int, count):
    """(item indices [chunk] int32, valid [chunk] bool) of chunk `index` of a pass that starts
    at item `first`."""
    items = first + index * chunk + tf.range(chunk)
    valid = items < count
    return tf.minimum(items, count - 1), valid


def collect(count: Any, chunk: int, compute: Callable, item_shape: Sequence = (),
            parallel: int = CHUNKS_IN_FLIGHT) -> tf.Tensor:
    """float32 [count, *item_shape]: `compute(items)` of every item, in order.

    `compute` maps int32 item indices [chunk] to float32 outputs [chunk, *item_shape].
    `parallel` chunks may be in flight at once (the next chunk's input preparation overlaps the
    current chunk's model call). A `count` known when tracing (a Python int) that fits one
    chunk runs that chunk alone, without the loop: a small call's fixed cost, and a loop body
    keeps the graph optimiser from folding what a method computes from shapes alone (its
    constants then run at every call)."""
    if isinstance(count, int) and count <= chunk:
        items, _ = _padded_items(0, 0, chunk, count)
        return compute(items)[:count]
    passes = _passes(count, chunk)
    # One array for every pass (whole and tail chunks differ in size), concatenated once: each
    # concatenation copies every output.
    array = tf.TensorArray(tf.float32, size=sum(chunks for _, chunks, _ in passes),
                           infer_shape=False,
                           element_shape=[chunk if len(passes) == 1 else None, *item_shape])
    written = 0
    for first, chunks, size in passes:

        def body(index, array, first=first, size=size, written=written):
            items, _ = _padded_items(first, index, size, count)
            return index + 1, array.write(written + index, compute(items))

        _, array = tf.while_loop(lambda index, _, chunks=chunks: index < chunks, body,
                                 [0, array], parallel_iterations=parallel)
        written += chunks
    return array.concat()[:count]


class Buffers:
    """The in-place accumulators of one traced function that calls `accumulate`: one resource
    variable per accumulator (of the declared dtypes, any shape), made eagerly by the
    function's owner before it traces, and the lock that keeps two calls from sharing them.
    A functional scatter-add into a loop-carried tensor copies the whole tensor at every chunk
    (IG-SG keeps a map per image and noise sample: 61 MB for 50 images at 64 px, copied 488
    times a call); adding into a variable does not (docs/architecture.md, "The chunked
    executor")."""

    def __init__(self, dtypes: Sequence[tf.DType]) -> None:
        self.variables = [tf.Variable(tf.zeros([0], dtype), trainable=False,
                                      shape=tf.TensorShape(None)) for dtype in dtypes]
        self.lock = threading.Lock()


def accumulate(count: Any, chunk: int, compute: Callable, initial: tuple, buffers: Buffers,
               parallel: int = CHUNKS_IN_FLIGHT) -> tuple:
    """Per-slot sums of every item's shares.

    `compute(items)` maps int32 item indices [chunk] to (slots [chunk] int32, shares), where
    shares is a tuple with one tensor [chunk, ...] per accumulator. `initial` holds the zero
    accumulators, each [num_slots + 1, ...]: the last slot receives the padding and is dropped.
    The sums are added in place into `buffers`' variables (call the traced function under
    `buffers.lock`) and the variables emptied at the end. Returns the accumulators without the
    dropped slot. With `parallel` > 1 the next chunks' items are computed while the current
    chunk's shares are added; the additions stay in item order (each waits for the last)."""
    dropped = tf.shape(initial[0])[0] - 1
    variables = buffers.variables
    if [total.dtype for total in initial] != [variable.dtype for variable in variables]:
        raise TypeError(f"accumulators of {[total.dtype.name for total in initial]} in buffers "
                        f"of {[variable.dtype.name for variable in variables]}")
    with tf.control_dependencies([variable.assign(total)
                                  for variable, total in zip(variables, initial)]):
        token = tf.constant(0)
    for first, chunks, size in _passes(count, chunk):

        def body(index, token, first=first, size=size):
            items, valid = _padded_items(first, index, size, count)
            slots, shares = compute(items)
            slots = tf.where(valid, slots, dropped)[:, None]
            with tf.control_dependencies([token]):  # in item order, one chunk after another
                added = [tf.raw_ops.ResourceScatterNdAdd(ref=variable.handle, indices=slots,
                                                         updates=share)
                         for variable, share in zip(variables, shares)]
            with tf.control_dependencies(added):
                return index + 1, tf.identity(token)

        _, token = tf.while_loop(lambda index, _, chunks=chunks: index < chunks, body,
                                 [tf.constant(0), token], parallel_iterations=parallel)
    sums = []
    with tf.control_dependencies([token]):
        for variable, total in zip(variables, initial):
            value = variable.read_value()
            value.set_shape(total.shape)
            sums.append(value[:-1])
    with tf.control_dependencies(sums):  # the buffers are not kept between calls
        emptied = [variable.assign(tf.zeros([0], variable.dtype)) for variable in variables]
    with tf.control_dependencies(emptied):
        return tuple(tf.identity(total) for total in sums)


def groups(count: int, per_image_bytes: int, memory_bytes: int,
           max_images: int = 256) -> Iterator[tuple]:
    """(start, stop) ranges covering `count` images, each group's state within `memory_bytes`
    and at most `max_images` images (so that progress can be reported per group), at least one
    image per group."""
    size = max(1, min(count, int(max_images),
                      int(memory_bytes) // max(1, int(per_image_bytes))))
    for start in range(0, count, size):
        yield start, min(start + size, count)
