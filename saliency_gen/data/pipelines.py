"""The tf.data readers of image records, shared by the generator, the benchmarks and the
synthetic world's clean model (docs/records.md, "Reading records").

* `explanation_inputs`: every record of some shards in file order, decoded, fitted to a model's
  input size and mapped into its input space (what the generator explains and the faithfulness
  protocols score);
* `keyed_stream` + `read_image` + `finish`: the training and evaluation pipeline pieces (shuffled
  files and records for training, a keyed random flip, normalisation); `image_batches` puts them
  together for unmasked images, and `roar.masked_data` inserts its masking between them.

The example key (the image file name, else `<shard>:<index>`) keys every random choice, so an
example's flip or mask never depends on read order, batching or sharding.
"""
import contextlib
import functools
import zlib
from typing import (
    Any,
    Callable,
    Iterable,
    Iterator,
    Literal,
    NamedTuple,
    Optional,
    Sequence,
    Union,
    overload,
)

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from models.formats.preprocessing import (
    INPUT_SPACES,
    TRAIN_CROPS,
    InputSpace,
    center_crop,
    decode_image,
    inception_crop,
    input_space,
)
from models.foundation.errors import UserError, check_one_of
from saliency_gen.data import records

SHUFFLE_BUFFER = 1024
GEOMETRIES = ("none", "center_crop")


def without_autotuning(data: tf.data.Dataset) -> tf.data.Dataset:
    """`data` with tf.data's autotuning off (AUTOTUNE parallelism then takes TensorFlow's fixed
    default): in a process confined to one core, TensorFlow 2.21 ends an autotuned iterator only
    after its tuning thread's current period, seconds with the core idle for an iterator read
    beside heavy work (docs/records.md, "Reading records")."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)


def key_ids(keys: Iterable) -> np.ndarray:
    """int64 [N] ids of example keys (bytes or str): CRC-32, stable across runs and machines
    (the engine keys every random draw of an image on its id)."""
    return np.array([zlib.crc32(k if isinstance(k, bytes) else k.encode()) for k in keys],
                    np.int64)


def key_seeds(keys: Any, seed: Any, epoch: Any = None) -> tf.Tensor:
    """Per-example stateless seeds [N, 2] from string keys, the run seed and an optional epoch."""
    hashed = tf.strings.to_hash_bucket_fast(keys, 2**62)
    salt = tf.cast(seed, tf.int64) * 1000003 + (0 if epoch is None else tf.cast(epoch, tf.int64))
    return tf.stack([tf.fill(tf.shape(hashed), salt), hashed], axis=-1)


def fit(image: tf.Tensor, size: int, geometry: str) -> tf.Tensor:
    """An image [H, W, 3] at the model's side `size`: ROAR's centre crop ("center_crop"), checked
    to be that size ("none"), or left alone when it has that size and centre-cropped otherwise
    ("auto")."""
    if geometry == "center_crop":
        image = center_crop(image, crop_size=size)
    elif geometry == "auto":
        image = tf.cond(tf.reduce_all(tf.shape(image)[:2] == [size, size]),
                        lambda: image, lambda: center_crop(image, crop_size=size))
    return tf.ensure_shape(image, [size, size, 3])


def example_key(parsed: dict, default_key: Any) -> tf.Tensor:
    """The record's file name, else its default "<shard>:<index>" key."""
    return tf.where(tf.strings.length(parsed["filename"]) > 0, parsed["filename"], default_key)


def explanation_record(input_shape: Sequence[int], space: InputSpace, geometry: str,
                       with_masks: bool = False) -> Callable[[tf.Tensor, tf.Tensor], tuple]:
    """(key, serialized image record) -> (key, encoded, label, model input, height, width): the
    image decoded, fitted to `input_shape` per `geometry` ("none", "center_crop", or "auto":
    none when it has the size, else the centre crop) and mapped into the model's input space
    `space`; `with_masks` appends the object mask (float {0, 1} [H, W], fitted the same way),
    for records that have one."""
    size = input_shape[0]

    def prepare(key, serialized):
        parsed = records.parse_image_record(serialized)
        image = decode_image(parsed["encoded"])
        shape = tf.shape(image)
        found = (example_key(parsed, key), parsed["encoded"], parsed["label"],
                 space.from_pixels(fit(image, size, geometry)), shape[0], shape[1])
        if not with_masks:
            return found
        mask = tf.cast(records.decode_mask(parsed["mask_png"]), tf.float32)
        mask = fit(tf.tile(mask[..., None], [1, 1, 3]), size, geometry)
        return (*found, tf.cast(mask[..., 0] > 0.5, tf.float32))

    return prepare


def explanation_inputs(paths: Sequence[str], input_shape: Sequence[int], space: InputSpace,
                       geometry: str, with_masks: bool = False,
                       select: Optional[Callable[[tf.data.Dataset], tf.data.Dataset]] = None
                       ) -> tf.data.Dataset:
    """`explanation_record` of every record of the image shards `paths`, in file order (keys
    "<shard>:<index>" where a record names no file). `select`, when given, reorders or thins
    the (key, serialized record) stream before decoding (a shuffle then a take decodes only the
    images taken). Not autotuned: each shard gets an iterator of its own, read beside the
    explanations (`without_autotuning`). A range of one shard: `explanation_range`."""
    keyed = records.keyed_records(list(paths))
    if select is not None:
        keyed = select(keyed)
    return without_autotuning(keyed.map(explanation_record(input_shape, space, geometry,
                                                           with_masks),
                                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True))


# Records a range reader decodes at once at most: its batch is held in memory whole.
RANGE_PIECE = 256


def range_reader(prepare: Callable[[tf.Tensor, tf.Tensor], Any]) -> Callable[..., Any]:
    """(shard path, start, count) -> `prepare` of each record of that range of the shard
    (keyed as `records.keyed_shard` keys them: "<shard>:<index>" of the whole file), stacked in
    one batch; fewer records where the shard ends sooner, none past its end. One
    tf.function with the tf.data pipeline inside its graph, traced once: a Beam work unit that
    built a pipeline of its own paid its tracing and iterator set-up every time (docs/records.md,
    "Reading records"); keep the reader for the process."""
    signature = [tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64),
                 tf.TensorSpec([], tf.int64)]

    @tf.function(input_signature=signature, autograph=False)
    def read(path, start, count):
        keyed = records.keyed_shard(path, start, count)
        mapped = keyed.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        batched = without_autotuning(mapped).batch(count)
        nothing = tf.nest.map_structure(lambda spec: tf.zeros([0, *spec.shape[1:]], spec.dtype),
                                        batched.element_spec)  # past the shard's end
        return batched.concatenate(tf.data.Dataset.from_tensors(nothing)).take(
            1).get_single_element()

    return read


@functools.lru_cache(maxsize=None)
def _explanation_reader(input_shape: tuple, space: InputSpace, geometry: str) -> Callable:
    return range_reader(explanation_record(input_shape, space, geometry))


def explanation_range(path: str, input_shape: Sequence[int], space: InputSpace, geometry: str,
                      start: int, count: int, batch_size: int) -> Iterator[tuple]:
    """The batches of `batch_size` of `explanation_inputs([path], ...)` over its records
    [start, start + count): the same values, read in pieces of at most `RANGE_PIECE` records
    (rounded up to a multiple of `batch_size`) by a `range_reader` kept for the process, so
    that the many ranges of a Beam run pay no pipeline set-up each (docs/records.md, "Reading
    records"). Ends early where the shard does."""
    read = _explanation_reader(tuple(input_shape), space, geometry)
    piece = -(-max(RANGE_PIECE, batch_size) // batch_size) * batch_size
    for offset in range(start, start + count, piece):
        found = read(path, offset, min(piece, start + count - offset))
        total = int(tf.shape(found[0])[0])
        for first in range(0, total, batch_size):
            yield tuple(part[first:first + batch_size] for part in found)
        if total < piece:
            return


@contextlib.contextmanager
def _process_independent_seeds():
    """A dataset shuffle given `seed` is seeded (87654321, seed) in a fresh process, but
    (g, seed) once anything called `tf.random.set_seed(g)` (Keras' `set_random_seed` does): the
    order would depend on what ran before in the process. While the global seed is cleared, as
    here, it is always (87654321, seed). (TensorFlow offers no public way to clear it.)"""
    eager = context.context()
    saved = getattr(eager, "_seed", None)
    eager._seed = None
    try:
        yield
    finally:
        eager._seed = saved


class Images(NamedTuple):
    """Images read for explaining and scoring (`load_images`)."""

    images: np.ndarray  # [N, H, W, C] in the model's input space
    labels: np.ndarray  # int64 [N]
    ids: np.ndarray  # int64 [N], keyed on the records (`key_ids`)


class ImagesWithMasks(NamedTuple):
    """`Images` and the objects' masks (`load_images(..., with_masks=True)`)."""

    images: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    masks: np.ndarray  # [N, H, W]


@overload
def load_images(pattern: str, loaded: Any, nr_images: int = ..., seed: int = ...,
                geometry: str = ..., shuffle: bool = ...,
                with_masks: Literal[False] = ...) -> Images: ...
@overload
def load_images(pattern: str, loaded: Any, nr_images: int = ..., seed: int = ...,
                geometry: str = ..., shuffle: bool = ..., *,
                with_masks: Literal[True]) -> ImagesWithMasks: ...
@overload
def load_images(pattern: str, loaded: Any, nr_images: int = ..., seed: int = ...,
                geometry: str = ..., shuffle: bool = ..., *,
                with_masks: bool) -> Union[Images, ImagesWithMasks]: ...
def load_images(pattern: str, loaded: Any, nr_images: int = -1, seed: int = 0,
                geometry: str = "auto", shuffle: bool = True,
                with_masks: bool = False) -> Union[Images, ImagesWithMasks]:
    """`Images` (images, labels, ids) from image records, `ImagesWithMasks` (and object masks)
    with `with_masks`: a seeded shuffle of all records (buffer 10,000), then the first
    `nr_images` (-1: all). Unreadable data and labels outside the model's classes are one
    `UserError` line."""
    files = records.list_files(pattern, "--input_pattern")
    for path in files:
        records.check_file(path, "image", max_records=1)
    if with_masks:
        for _, serialized in records.keyed_records(files[:1]).take(1):
            if not records.parse_image_record(serialized)["mask_png"].numpy():
                raise UserError(f"the records of {pattern} have no object masks "
                                "(image/object/mask), which the oracle and the localisation "
                                "measures read; choose records that carry them (the synthetic "
                                "world's do)")

    def select(keyed: tf.data.Dataset) -> tf.data.Dataset:
        # One record in, one image out: shuffling the records gives the order a shuffle of the
        # decoded images gives, and only the images taken are decoded.
        if shuffle:
            keyed = shuffled(keyed, 10_000, int(seed), reshuffle_each_iteration=False)
        return keyed.take(nr_images) if nr_images >= 0 else keyed

    dataset = explanation_inputs(files, loaded.input_shape, input_space(loaded.preprocessing),
                                 geometry, with_masks, select=select)
    keys, images, labels, masks = [], [], [], []
    try:
        for key, _, label, image, _, _, *mask in dataset.batch(256):
            keys += list(key.numpy())
            images.append(image.numpy())
            labels.append(label.numpy())
            masks += [m.numpy() for m in mask]
    except tf.errors.OpError as error:
        problem = str(error).strip().splitlines()[0]
        if with_masks:
            problem = f"an image or its object mask is unreadable ({problem})"
        raise UserError(f"cannot read the images of {pattern}: {problem}") from None
    if not images:
        raise UserError(f"{pattern} holds no images")
    label_array = np.concatenate(labels).astype(np.int64)
    if label_array.min() < 0 or label_array.max() >= loaded.num_classes:
        raise UserError(f"a label of {pattern} is outside the model's {loaded.num_classes} "
                        "classes; check --input_pattern and --model_path")
    found = Images(np.concatenate(images), label_array, key_ids(keys))
    return ImagesWithMasks(*found, np.concatenate(masks)) if with_masks else found


def shuffled(data: tf.data.Dataset, buffer_size: int, seed: int,
             reshuffle_each_iteration: bool = True) -> tf.data.Dataset:
    """`data.shuffle` with an order that depends only on `seed` (see above)."""
    with _process_independent_seeds():
        return data.shuffle(buffer_size, seed=seed,
                            reshuffle_each_iteration=reshuffle_each_iteration)


def keyed_stream(files: Sequence[str], training: bool, seed: int) -> tf.data.Dataset:
    """(default key, serialized record) of every record of `files`: in file order, or, for
    training, files and records shuffled with `seed` (a new order every epoch)."""
    names = tf.data.Dataset.from_tensor_slices(list(files))
    if training:
        names = shuffled(names, len(files), seed)
    data = names.interleave(records.keyed_shard, cycle_length=min(len(files), 8),
                            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if training:
        data = shuffled(data, SHUFFLE_BUFFER, seed)
    return data


def read_image(default_key: Any, serialized: Any, size: int, geometry: str,
               label_offset: int = 0) -> tuple:
    """(key, pixels [size, size, 3] in [0, 1], label, parsed record) of one image record."""
    parsed = records.parse_image_record(serialized)
    pixels = fit(decode_image(parsed["encoded"]), size, geometry)
    return example_key(parsed, default_key), pixels, parsed["label"] + label_offset, parsed


def finish(keys: Any, pixels: tf.Tensor, labels: Any, *, training: bool, seed: int,
           space: str = "imagenet", crop: str = "none") -> tuple:
    """(model input, label) of one example: for training, ROAR's Inception crop when `crop` is
    "inception", then a random flip, both keyed on the example; then the input space's
    normalisation."""
    check_one_of("train_crop", crop, TRAIN_CROPS)
    if training and crop == "inception":  # keyed apart from the flip (seed + 1)
        pixels = inception_crop(pixels, key_seeds(keys[None], seed + 1)[0], pixels.shape[0])
    if training:  # per example, keyed: the same flip whatever the batch
        pixels = tf.image.stateless_random_flip_left_right(pixels, key_seeds(keys[None], seed)[0])
    return INPUT_SPACES[space].from_pixels(pixels), labels


def image_batches(files: Sequence[str], *, training: bool, batch_size: int, size: int,
                  geometry: str = "none", seed: int = 0, space: str = "imagenet",
                  label_offset: int = 0) -> tf.data.Dataset:
    """Batches of (model input, label) of image records, unmasked: training shuffles and flips
    (and drops a short last batch), evaluation keeps file order and every example."""
    def read(key, serialized):
        key, pixels, label, _ = read_image(key, serialized, size, geometry, label_offset)
        return finish(key, pixels, label, training=training, seed=seed, space=space)

    data = keyed_stream(sorted(files), training, seed).map(
        read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return data.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)


def count_records(files: Sequence[str]) -> int:
    """The number of records in `files` (a full read); corrupt data names its file and record."""
    return sum(1 for path in files for _ in records.iter_serialized(path))
