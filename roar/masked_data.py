"""ROAR's masked input pipelines on tf.data (docs/roar.md, "Masks" and "The input pipeline").

    config = MaskConfig(ratio=0.5, keep_information=False)          # ROAR, 50% removed
    read = Records("saliency", map_key="gradient_smooth_2")
    train = masked_dataset(files, read, config, training=True, batch_size=64)

The reading, flipping and normalisation are the shared image-record pipeline pieces
(`saliency_gen.data.pipelines`); this module inserts the scores and the mask between them. Per
example, inside the pipeline (train and test alike): parse (saliency records, v2 or the
original layout, or plain image records for the random / oracle / raw controls) -> decode to
[0, 1] pixels -> fit the map's geometry (`none`, or ROAR's crop_224) -> scores (the stored map,
a keyed random map, or the record's object mask) -> the mask (`roar.masking`) -> fill -> train
augmentation (random flip) -> normalisation with ImageNet's mean and std. Records are read with a
parallel interleave and a parallel map, shuffled (train), batched and prefetched; with a seed
the order is deterministic.

The example key (the image file name, else `<shard>:<index>`) keys every random choice, so a
mask never depends on read order, batching or sharding.
"""
import dataclasses
import os
from typing import Optional, Sequence

import tensorflow as tf

from models.formats.preprocessing import decode_image
from models.foundation.errors import RecordError, UserError, check_one_of
from roar import masking
from roar.masking import MaskConfig  # (here too: what a pipeline is read and masked with)
from saliency_gen import generate
from saliency_gen.attribution import names
from saliency_gen.data import pipelines, records
from saliency_gen.data.pipelines import count_records, fit

SOURCES = ("saliency", "images")
CONTROLS = ("random", "oracle", "none")  # maps that need no saliency records
RANDOM_MASKS = ("fixed", "per_read")
NON_FINITE_MAP = "a saliency map holds NaN or infinite values"
NO_OBJECT_MASK = ("has no object mask (image/object/mask); the oracle map needs image records "
                  "that carry them, as the synthetic world's do")


def _roar_code(method: str) -> Optional[str]:
    """The ROAR generator code of a ROAR code or record key, else None."""
    if method in names.ROAR:
        return method
    return next((code for code, entry in names.ROAR.items() if entry[0] == method), None)


def generator_name(method: str) -> str:
    """The name the generator explains `method` by: `roar:<code>` for ROAR names, else itself."""
    code = _roar_code(method)
    return f"roar:{code}" if code else method


def record_key_of(method: str) -> str:
    """The record key of `method`'s maps (`SH` -> `gradient_image`, `pkg.mod:fn` ->
    `pkg.mod_fn`; a key written by another generator stays as it is)."""
    return generate.record_key(generator_name(method))


def _example_reader(source, map_key, map_format, size, geometry, label_offset, control,
                    mask_seed, per_read):
    """A function (default key, serialized, epoch) -> (key, pixels [S, S, 3], label, scores).

    `epoch` only matters for the random map with `per_read`: then the map is re-drawn per
    epoch (keyed by seed, example and epoch), else it is keyed by seed and example only."""
    if source == "saliency":
        dtype, shape, _ = map_format

        def read(default_key, serialized, epoch):
            del epoch
            parsed = records.parse_saliency_record(serialized, map_key, dtype, shape, default_key)
            pixels = fit(decode_image(parsed["raw_image"]), size, geometry)
            finite = tf.debugging.Assert(tf.reduce_all(tf.math.is_finite(parsed["saliency"])),
                                         [NON_FINITE_MAP])
            with tf.control_dependencies([finite]):
                scores = tf.identity(parsed["saliency"])
            return parsed["example_key"], pixels, parsed["label"], scores
        return read

    def read_image(default_key, serialized, epoch):
        key, pixels, label, parsed = pipelines.read_image(default_key, serialized, size, geometry,
                                                          label_offset)
        if control == "oracle":
            mask = tf.cast(records.decode_mask(parsed["mask_png"]), tf.float32)[..., None]
            mask = fit(tf.tile(mask, [1, 1, 3]), size, geometry)
            return key, pixels, label, tf.cast(mask > 0.5, tf.float32)
        if control == "random":  # keyed by the example (and the epoch when per_read)
            scores = masking.random_map(key, (size, size, 3), mask_seed,
                                        epoch if per_read else None)
            return key, pixels, label, scores
        return key, pixels, label, tf.zeros([size, size, 3])
    return read_image


def noise_keys(keys: tf.Tensor) -> tf.Tensor:
    """int64 [B]: ROAD's imputation-noise keys of a batch of example keys (their hashes; the
    imputation pairs each with the seed), so the noise never depends on the batch."""
    return pipelines.key_seeds(keys, 0)[:, 1]


def _batch_masker(config, control):
    """A function (keys [B], pixels [B, S, S, 3], scores [B, S, S, 3]) -> masked pixels.

    Masks are computed for a batch at once; every example's mask depends only on its own map and
    key (top_k per row; ROAD's solver freezes converged images)."""
    def mask(keys, pixels, scores):
        if control == "none" or (config.ratio == 0 and not config.keep_information):
            return pixels
        seeds = noise_keys(keys) if config.fill == "noisy_linear" else None
        return masking.replace(pixels, masking.feature_mask(scores, config), config, seeds)
    return mask


def _first_image_side(path):
    """The side of the (square) image in the first record of `path`."""
    for _, serialized in records.keyed_shard(path).take(1):
        shape = decode_image(records.parse_image_record(serialized)["encoded"]).shape
        if shape[0] != shape[1]:
            raise RecordError(f"{path}: images are {shape[1]}x{shape[0]}; pass --image_size and "
                              "--geometry=center_crop")
        return int(shape[0])
    raise RecordError(f"{path}: holds no records")


def _check_image_side(path, size):
    """One line unless the first saliency record of `path` stores its image at `size` x `size`
    (the generator keeps a record's image as it came and explains it resized to the model's
    size: ROAD and ROAR would impute an image of another size than its map)."""
    for index, serialized in records.iter_serialized(path):
        features = records.parse_example(serialized, f"{path}: record {index}")
        sides = tuple(int(features[key].int64_list.value[0]) for key in ("height", "width")
                      if key in features and features[key].int64_list.value)
        if sides and all(sides) and sides != (size, size):  # (0: a legacy record, unsaid)
            raise RecordError(f"{path}: record {index} stores a {sides[1]}x{sides[0]} image, but "
                              f"its maps and the model are {size}x{size}; make the records at "
                              "the model's size first, or explain them with a model of theirs")
        return


def _check_object_mask(path):
    """One line unless the first record of `path` carries an object mask (the oracle's map)."""
    for _, serialized in records.keyed_shard(path).take(1):
        if not records.parse_image_record(serialized)["mask_png"].numpy():
            raise RecordError(f"{path}: record 0 {NO_OBJECT_MASK}")


def list_shards(pattern: str, what: str) -> list:
    """Sorted files matching `pattern` (a glob or a directory), or a one-line error."""
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "*")
    return records.list_files(pattern, what)


@dataclasses.dataclass(frozen=True)
class Records:
    """What ROAR's pipeline reads and how (checked when made): `source` "saliency" reads
    saliency records with the map `map_key`; "images" reads image records and takes its map
    from `control`: "random" (keyed uniform scores), "oracle" (the record's object mask) or
    "none" (no masking: the clean reference). `size` is the model's input side (default: the
    stored map's); `geometry` "none" (images already at `size`) or "center_crop" (ROAR's
    crop_224 at 224); `label_offset` is added to every label. For training, `random_mask`
    "fixed" keys the random map by example and "per_read" re-draws it every epoch (the
    original's behaviour; evaluation uses the fixed draw); `train_crop` "inception" adds
    ROAR's random crop (`models.formats.preprocessing.inception_crop`)."""

    source: str = "images"
    control: Optional[str] = None
    map_key: Optional[str] = None
    size: Optional[int] = None
    geometry: str = "none"
    label_offset: int = 0
    random_mask: str = "fixed"
    train_crop: str = "none"

    def __post_init__(self) -> None:
        check_one_of("source", self.source, SOURCES)
        check_one_of("random_mask", self.random_mask, RANDOM_MASKS)
        if self.source == "images" and self.control not in CONTROLS:
            raise UserError(f"image records need a control map: one of {CONTROLS}")


def _examples(files: Sequence[str], read: Records, mask_seed: int, *, training: bool,
              seed: int, span: Optional[tuple[int, int]]) -> tf.data.Dataset:
    """The unbatched stream of (key, pixels [S, S, 3] in [0, 1], label, scores) of `files` read
    as `read` says (the scores: the stored map or the control's), before any mask."""
    source, map_key, size, geometry = read.source, read.map_key, read.size, read.geometry
    control, label_offset = read.control, read.label_offset
    per_read = read.random_mask == "per_read" and training
    files = sorted(files)
    if not files:
        raise UserError("no input files")
    map_format = None
    if source == "saliency":
        if not map_key:
            raise UserError("reading saliency records needs the map's record key "
                            "(--saliency_method)")
        map_format = records.peek_saliency_format(files[0], map_key)
        size = size or map_format[1][0]
        if map_format[1] != (size, size, 3) and geometry == "none":
            raise RecordError(f"{files[0]}: map {map_key} has shape {map_format[1]}; the model "
                              f"takes {size}x{size}x3")
        if geometry == "none":
            _check_image_side(files[0], size)
    if size is None:
        if geometry != "none":
            raise UserError("--image_size is needed with --geometry=center_crop")
        size = _first_image_side(files[0])
    if control == "oracle":
        _check_object_mask(files[0])
    parse_example = _example_reader(source, map_key, map_format, size, geometry, label_offset,
                                    control, mask_seed, per_read)
    data = pipelines.keyed_stream(files, training, seed)
    if span is not None:
        if training or len(files) != 1:
            raise UserError("a record span applies to the evaluation of one file")
        data = data.skip(span[0]).take(span[1])
    if per_read:  # every pass holds each record once, so position // count is the epoch
        count = count_records(files)
        data = data.repeat().enumerate().map(
            lambda position, item: (item[0], item[1], position // count))
    else:
        data = data.map(lambda key, serialized: (key, serialized, tf.constant(0, tf.int64)))
    # (autograph off: these functions branch on Python values only, and converting them cost
    # about a third of each pipeline's set-up)
    return data.map(tf.autograph.experimental.do_not_convert(parse_example),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def masked_dataset(files: Sequence[str], read: Records, config: MaskConfig, *, training: bool,
                   batch_size: int, seed: int = 0, space: str = "imagenet",
                   drop_remainder: Optional[bool] = None, with_keys: bool = False,
                   span: Optional[tuple[int, int]] = None) -> tf.data.Dataset:
    """A batched dataset of (normalised image, label) with every example of `files` masked,
    read as `read` says.

    Training shuffles files and records with `seed` and flips images; evaluation keeps file
    order and every example (`drop_remainder` False). A per_read training dataset is infinite
    (it counts its epochs). `span` (start, count) restricts an evaluation of one file to that
    range of its records (a work unit of a Beam pipeline).
    """
    mask = _batch_masker(config, "saliency" if read.source == "saliency" else read.control)

    def mask_batch(keys, pixels, labels, scores):
        return keys, mask(keys, pixels, scores), labels

    def finish(keys, pixels, labels):
        outputs = pipelines.finish(keys, pixels, labels, training=training, seed=seed,
                                   space=space, crop=read.train_crop)
        return (keys,) + outputs if with_keys else outputs

    plain = tf.autograph.experimental.do_not_convert
    data = (_examples(files, read, config.seed, training=training, seed=seed, span=span)
            .batch(batch_size)
            .map(plain(mask_batch), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
            .map(plain(finish), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True))
    drop = training if drop_remainder is None else drop_remainder
    return data.batch(batch_size, drop_remainder=drop).prefetch(tf.data.AUTOTUNE)


def scored_batches(files: Sequence[str], read: Records, mask_seed: int, *, batch_size: int,
                   span: Optional[tuple[int, int]] = None,
                   limit: Optional[int] = None) -> tf.data.Dataset:
    """Evaluation batches of (keys, pixels [B, S, S, 3] in [0, 1], labels, scores) of every
    example of `files` in file order (the first `limit` only, when given), unmasked and
    unnormalised: what ROAD's one computation (`roar.road_outcomes`) takes. `span` as in
    `masked_dataset`. Not autotuned, as the generator's inputs: each ROAD run or work unit
    reads its own iterator beside the imputation (docs/records.md, "Reading records")."""
    examples = _examples(files, read, mask_seed, training=False, seed=0, span=span)
    if limit is not None:
        examples = examples.take(limit)
    return pipelines.without_autotuning(examples.batch(batch_size).prefetch(tf.data.AUTOTUNE))


def find_bad_record(files: Sequence[str], read: Records, num_classes: int,
                    size: int) -> Optional[str]:
    """"<file>: record <i>: <problem>" for the first record of `files` read as `read` that
    cannot be trained on (corrupt bytes, a label outside the classes, a NaN or infinite map, an
    image or map of the wrong `size`), else None. Called after training stopped on bad data, to
    name the culprit."""
    map_key, geometry, label_offset = read.map_key or "", read.geometry, read.label_offset
    map_format = (records.peek_saliency_format(files[0], map_key) if read.source == "saliency"
                  else None)  # (masked_dataset refused a saliency read without a map key)
    for path in files:
        for index, serialized in records.iter_serialized(path):
            where = f"{path}: record {index}"
            if map_format is not None:
                records.check_saliency_features(records.parse_example(serialized, where), where,
                                                map_key, map_format[1])
                parsed = records.parse_saliency_record(serialized, map_key, *map_format[:2])
                encoded, scores = parsed["raw_image"], parsed["saliency"].numpy()
            else:
                parsed = records.parse_image_record(serialized)
                encoded, scores = parsed["encoded"], None
                if read.control == "oracle" and not parsed["mask_png"].numpy():
                    return f"{where}: {NO_OBJECT_MASK}"
            label = int(parsed["label"]) + (label_offset if read.source == "images" else 0)
            if not 0 <= label < num_classes:
                return (f"{where}: label {label} is outside the {num_classes} classes; check "
                        "--num_classes and --label_offset")
            if scores is not None and not tf.reduce_all(tf.math.is_finite(scores)):
                return f"{where}: {NON_FINITE_MAP}; re-generate the saliency records"
            try:
                shape = tuple(decode_image(encoded).shape)
            except tf.errors.OpError:
                return f"{where}: the image cannot be decoded; re-create the record"
            if geometry == "none" and shape[:2] != (size, size):
                return (f"{where}: the image is {shape[1]}x{shape[0]} but the model takes "
                        f"{size}x{size}; pass --geometry=center_crop or --image_size")
    return None
