"""The one owner of the project's TFRecord schemas: image records and saliency records.

Schemas (documented in docs/records.md):

* **Image records** (ImageNet / TF-slim `build_image_data.py` style): `image/encoded`,
  `image/class/label`, optional `image/class/synset` and `image/class/text` (WordNet id and name),
  `image/filename`, `image/format`, `image/height`, `image/width`,
  `image/scene/label`, an object box `image/object/bbox/{ymin,xmin,ymax,xmax}` (normalised to
  [0, 1], end exclusive) and an object mask `image/object/mask` (PNG, non-zero = object).
* **Saliency records** (v2, docs/records.md, "Saliency records (v2)"): the encoded image, label,
prediction, example key and
  one or more maps `saliency/<key>` stored with `tf.io.serialize_tensor` (float16 scaled by
  max|map|, or float32), with their shape, dtype, scale and channel convention, the list of keys,
  the model id and a JSON `saliency/meta`. The original ROAR layout (a float list under the
  record key, e.g. `ig_smooth_2`) is read by the same parser.

Writers return `tf.train.Example`s; `parse_*` functions are graph ops for `tf.data`; `check_file`
validates a file record by record and names the file and record index of the first problem;
`write_records` writes a file under a temporary name and renames it when complete.
"""
import glob
import json
import os
import struct
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

from models.foundation import ordering, provenance
from models.foundation.errors import MissingPathError, RecordError, UserError, check_known
from models.foundation.files import atomic_output, is_temporary, read_json
from saliency_gen.data import shard_ledger
from saliency_gen.data.formats import MAP_DTYPES

# ----------------------------------------------------------------------------------------------
# Field specifications: key -> (kind, required, length); length None = any number of values.

IMAGE_FIELDS = {
    "image/encoded": ("bytes", True, 1),
    "image/class/label": ("int64", True, 1),
    "image/class/synset": ("bytes", False, 1),
    "image/class/text": ("bytes", False, 1),
    "image/filename": ("bytes", False, 1),
    "image/format": ("bytes", False, 1),
    "image/height": ("int64", False, 1),
    "image/width": ("int64", False, 1),
    "image/scene/label": ("int64", False, 1),
    "image/object/bbox/ymin": ("float", False, None),
    "image/object/bbox/xmin": ("float", False, None),
    "image/object/bbox/ymax": ("float", False, None),
    "image/object/bbox/xmax": ("float", False, None),
    "image/object/mask": ("bytes", False, 1),
}
BOX_KEYS = ("image/object/bbox/ymin", "image/object/bbox/xmin",
            "image/object/bbox/ymax", "image/object/bbox/xmax")

SALIENCY_FIELDS = {
    "raw_image": ("bytes", True, 1),
    "label": ("int64", True, 1),
    "prediction_class": ("int64", False, 1),
    "height": ("int64", False, 1),
    "width": ("int64", False, 1),
    "example/key": ("bytes", False, 1),
    "saliency/methods": ("bytes", False, None),
    "saliency/model_id": ("bytes", False, 1),
    "saliency/meta": ("bytes", False, 1),
}
# rank8 bucket cuts, in percent of elements: ROAR's integer percentages plus finer top ranks.
RANK8_CUT_PERCENTS = tuple(sorted({float(q) for q in range(1, 100)}
                                  | {q + 0.5 for q in range(28)}))
CHANNEL_CONVENTIONS = ("none", "sum", "sum_sq")
LEGACY_MAP_SHAPE = (224, 224, 3)


def map_fields(key: str) -> dict:
    """The v2 fields that store the map under record key `key`."""
    return {
        f"saliency/{key}": ("bytes", True, 1),
        f"saliency/{key}/shape": ("int64", True, 3),
        f"saliency/{key}/dtype": ("bytes", True, 1),
        f"saliency/{key}/scale": ("float", True, 1),
        f"saliency/{key}/channels": ("bytes", True, 1),
    }


# ----------------------------------------------------------------------------------------------
# Writers.


def _bytes(values):
    values = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values]
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def encode_mask(mask: np.ndarray) -> bytes:
    """PNG bytes of a 2-D mask: 255 where `mask` is non-zero, 0 elsewhere."""
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise UserError(f"an object mask must be 2-D; got shape {mask.shape}")
    return tf.io.encode_png((mask != 0).astype(np.uint8)[..., None] * 255).numpy()


def image_example(encoded: bytes, label: int, *, filename: Optional[str] = None,
                  image_format: Optional[str] = None, height: Optional[int] = None,
                  width: Optional[int] = None, scene_label: Optional[int] = None,
                  box: Optional[Sequence] = None, mask: Optional[np.ndarray] = None,
                  synset: Optional[str] = None, text: Optional[str] = None) -> tf.train.Example:
    """An image record (`synset`, `text`: the class's WordNet id and name). `box` = (ymin, xmin,
    ymax, xmax) normalised to [0, 1] (or a list of such boxes); `mask` = a 2-D array the size of
    the image (non-zero = object)."""
    feature = {"image/encoded": _bytes([encoded]), "image/class/label": _ints([label])}
    optional = {"image/filename": filename, "image/format": image_format,
                "image/height": height, "image/width": width, "image/scene/label": scene_label,
                "image/class/synset": synset, "image/class/text": text}
    for key, value in optional.items():
        if value is not None:
            kind = IMAGE_FIELDS[key][0]
            feature[key] = _bytes([value]) if kind == "bytes" else _ints([value])
    if box is not None:
        boxes = np.asarray(box, np.float64).reshape(-1, 4)
        for column, key in enumerate(BOX_KEYS):
            feature[key] = _floats(boxes[:, column])
    if mask is not None:
        feature["image/object/mask"] = _bytes([encode_mask(mask)])
    return tf.train.Example(features=tf.train.Features(feature=feature))


def ranking_cut(percent: float, count: int) -> int:
    """How many of `count` features the top `percent` % are: ROAR's `int(percent / 100 * count)`."""
    return int(float(percent) / 100.0 * count)


def rank8_encode(saliency: np.ndarray) -> np.ndarray:
    """One byte per element: sign bit + 7-bit bucket of |value| by rank (see `encode_map`)."""
    flat = np.asarray(saliency, np.float32).ravel()
    ranks = ordering.places(np.abs(flat), descending=True)  # lower index first on ties
    cuts = np.array([ranking_cut(p, flat.size) for p in RANK8_CUT_PERCENTS])
    magnitude = 127 - np.searchsorted(cuts, ranks, side="right")
    return (((flat < 0).astype(np.uint8) << 7) | magnitude.astype(np.uint8)).reshape(
        np.shape(saliency))


def rank8_decode(codes: Any) -> Any:
    """Rank proxies in [-1, 1] from rank8 codes (numpy or tf): sign and bucket, order only."""
    if isinstance(codes, tf.Tensor):
        codes = tf.cast(codes, tf.int32)
        magnitude = tf.cast(codes % 128 + 1, tf.float32) / 128.0
        return tf.where(codes >= 128, -magnitude, magnitude)
    codes = np.asarray(codes).astype(np.int32)
    magnitude = (codes % 128 + 1).astype(np.float32) / 128.0
    return np.where(codes >= 128, -magnitude, magnitude)


def encode_map(saliency: np.ndarray, dtype: str = "rank8") -> tuple[bytes, float]:
    """Serialises a [H, W, C] map as (bytes, scale) in one of three formats:

    * rank8 (default): one byte per element, a quarter of float32. The top bit is the sign, the
      other 7 bits the bucket of |value| by rank (stable: the lower flat index first on ties, as
      ROAR's top_k). Bucket cuts lie exactly at ROAR's cut ranks `int(q / 100 * N)` for every
      integer percentage q (plus half percentages in the top 28%), so the top-q% set by |value|
      (ROAR's default squared ranking) is exact at every integer percentage. Decoded values are
      rank proxies in [-1, 1]; `scale` = max|map| for reference only.
    * float16: divided by max|map| first (scale = max|map|, 1 for an all-zero map), so small
      gradients do not flush to zero; half of float32.
    * float32: stored as is (scale 1).
    """
    saliency = np.asarray(saliency, np.float32)
    if saliency.ndim != 3:
        raise UserError(f"a saliency map must be [H, W, C]; got shape {saliency.shape}")
    if not np.all(np.isfinite(saliency)):
        raise UserError("a saliency map contains NaN or infinite values; fix the method's "
                        "input before writing it")
    check_known(dtype, MAP_DTYPES, "map dtype")
    peak = float(np.max(np.abs(saliency))) if saliency.size else 0.0
    if dtype == "rank8":
        return rank8_encode(saliency).tobytes(), peak
    if dtype == "float16":
        scale = peak if peak > 0 else 1.0
        return tf.io.serialize_tensor((saliency / np.float32(scale)).astype(np.float16)).numpy(), \
            scale
    return tf.io.serialize_tensor(saliency).numpy(), 1.0


def decode_map(stored: bytes, dtype: str, shape: Sequence[int],
               scale: float = 1.0) -> np.ndarray:
    """The float32 map (or rank proxies for rank8) from `encode_map`'s bytes (numpy)."""
    if dtype == "rank8":
        return rank8_decode(np.frombuffer(stored, np.uint8).reshape(shape))
    values = tf.io.parse_tensor(stored, tf.as_dtype(dtype)).numpy().astype(np.float32)
    return values.reshape(shape) * np.float32(scale)


def saliency_example(raw_image: bytes, label: int, maps: dict, *, prediction_class: int = -1,
                     height: int = 0, width: int = 0, example_key: Any = "",
                     model_id: str = "", meta: Optional[dict] = None, dtype: str = "rank8",
                     channels: str = "none") -> tf.train.Example:
    """A v2 saliency record holding the encoded image once and one map per record key.

    `maps` = {record key: [H, W, C] array}; `channels` = "none" (C = 3, per element) or "sum" /
    "sum_sq" (C = 1, a per-pixel score); `meta` = JSON-serialisable method parameters, seed,
    preprocessing version and so on.
    """
    check_known(channels, CHANNEL_CONVENTIONS, "channel convention")
    if not maps:
        raise UserError("a saliency record needs at least one map")
    feature = {
        "raw_image": _bytes([raw_image]), "label": _ints([label]),
        "prediction_class": _ints([prediction_class]), "height": _ints([height]),
        "width": _ints([width]), "example/key": _bytes([example_key]),
        "saliency/methods": _bytes(sorted(maps)), "saliency/model_id": _bytes([model_id]),
        "saliency/meta": _bytes([json.dumps(meta or {}, sort_keys=True)]),
    }
    for key, saliency in sorted(maps.items()):
        encoded, scale = encode_map(saliency, dtype)
        feature[f"saliency/{key}"] = _bytes([encoded])
        feature[f"saliency/{key}/shape"] = _ints(np.shape(saliency))
        feature[f"saliency/{key}/dtype"] = _bytes([dtype])
        feature[f"saliency/{key}/scale"] = _floats([scale])
        feature[f"saliency/{key}/channels"] = _bytes([channels])
    return tf.train.Example(features=tf.train.Features(feature=feature))


def write_records(path: str, examples: Iterable) -> int:
    """Writes `examples` to the TFRecord file `path` under a temporary name, renaming it when done.

    An interrupted write leaves only a hidden temporary file (`models.foundation.files`), never a
    file that looks finished.
    Records are serialised with sorted map keys, so the same examples give the same bytes in
    every process (protobuf's default map order follows a per-process hash seed).
    Returns the number of records written.
    """
    return write_serialized(path, (example.SerializeToString(deterministic=True)
                                   for example in examples))


def write_serialized(path: str, serialized_records: Iterable[bytes]) -> int:
    """Writes already serialised records to `path` atomically (as `write_records`); returns
    their number."""
    count = 0
    with atomic_output(path) as temporary:
        with tf.io.TFRecordWriter(temporary) as writer:
            for serialized in serialized_records:
                writer.write(serialized)
                count += 1
    return count


# ----------------------------------------------------------------------------------------------
# Validation (eager, record by record, naming the file and record).


MANIFEST = "manifest.json"  # the origin of a folder of shards (saliency_gen.generate)


def manifest_code(folder: str) -> dict:
    """The user method code digests in the origin of a folder of saliency shards ({} for the
    package's own methods, or a folder without a manifest): what a run trained on its maps puts
    into its own origin, so that an edited method's run is redone."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.exists(path):
        return {}
    recorded = read_json(path, "origin file", provenance.ORIGIN_SCHEMA)["settings"]
    return recorded.get(provenance.METHOD_CODE, {})


def list_files(pattern: str, what: str = "--input_pattern") -> list:
    """Sorted record files matching a glob (or a single path); a clear error when nothing
    matches or a sealed shard no longer matches its seal (`shard_ledger`). Manifests and
    unfinished outputs (hidden temporary names) are never listed."""
    pattern = os.fspath(pattern)
    files = sorted(path for path in glob.glob(pattern)
                   if os.path.isfile(path) and os.path.basename(path) != MANIFEST
                   and not is_temporary(path))
    if not files:
        raise MissingPathError(f"no files match {what}={pattern}; check the path or glob")
    shard_ledger.check_listing(files)  # a sealed saliency shard cut short or edited: one line
    return files


def check_framing(path: str) -> None:
    """Checks that every record length a TFRecord file declares fits in what is left of the
    file, before TensorFlow reads a record (and sizes its buffer) by that length: a damaged
    length field is a `RecordError`, not a buffer the size of a made-up length."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        offset, index = 0, 0
        while offset < size:
            header = handle.read(8)
            (length,) = struct.unpack("<Q", header) if len(header) == 8 else (None,)
            if length is None or offset + 16 + length > size:
                raise RecordError(f"{path}: record {index}: corrupt or truncated TFRecord data "
                                  f"(a record of {length} bytes declared at byte {offset} of "
                                  f"{size}); re-create the file")
            offset += 16 + length  # length, its CRC, the data, its CRC
            handle.seek(offset)
            index += 1


def iter_serialized(path: str) -> Iterator[tuple[int, bytes]]:
    """Yields (index, serialized record) of a TFRecord file; corrupt data is a `RecordError`."""
    if not os.path.isfile(path):
        raise MissingPathError(f"TFRecord file {path} does not exist")
    check_framing(path)
    index = 0
    iterator = iter(tf.data.TFRecordDataset(path))
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
            detail = str(error).strip().splitlines()[0]
            raise RecordError(f"{path}: record {index}: corrupt or truncated TFRecord data "
                              f"({detail}); re-create the file") from None
        yield index, record.numpy()
        index += 1


_KINDS = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


def _check_fields(features, fields, where):
    for key, (kind, required, length) in fields.items():
        if key not in features:
            if required:
                raise RecordError(f"{where}: missing required feature {key!r} ({kind})")
            continue
        found = _KINDS.get(features[key].WhichOneof("kind"))
        if found != kind:
            raise RecordError(f"{where}: feature {key!r} holds {found} values; expected {kind}")
        values = getattr(features[key], f"{found}_list").value
        if length is not None and len(values) != length:
            raise RecordError(f"{where}: feature {key!r} has {len(values)} values; "
                              f"expected {length}")


def parse_example(serialized: bytes, where: str) -> Any:
    """Parses serialized bytes as a `tf.train.Example`; garbage is a `RecordError`."""
    try:
        return tf.train.Example.FromString(serialized).features.feature
    except Exception:  # protobuf raises DecodeError, whose module differs between versions
        raise RecordError(f"{where}: not a tf.train.Example (wrong file type?)") from None


def check_image_features(features: Any, where: str) -> None:
    """Validates one image record's features against the image schema."""
    _check_fields(features, IMAGE_FIELDS, where)
    lengths = {len(features[key].float_list.value) for key in BOX_KEYS if key in features}
    present = [key for key in BOX_KEYS if key in features]
    if present and (len(present) != 4 or len(lengths) != 1):
        raise RecordError(f"{where}: the object box needs all of {', '.join(BOX_KEYS)} with "
                          "the same number of values")


def saliency_keys(features: Any) -> list:
    """The record keys of the maps a saliency record holds (v2 list, else legacy float lists)."""
    if "saliency/methods" in features:
        return [v.decode() for v in features["saliency/methods"].bytes_list.value]
    return sorted(key for key, value in features.items()
                  if value.WhichOneof("kind") == "float_list")


def check_saliency_features(features: Any, where: str, key: Optional[str] = None,
                            legacy_shape: Sequence[int] = LEGACY_MAP_SHAPE) -> None:
    """Validates one saliency record (v2 or legacy); `key` = a map that must be present."""
    _check_fields(features, SALIENCY_FIELDS, where)
    keys = saliency_keys(features)
    if key is not None and key not in keys:
        raise RecordError(f"{where}: no saliency map {key!r}; the record holds "
                          f"{', '.join(keys) or 'none'}")
    for name in ([key] if key is not None else keys):
        if f"saliency/{name}" in features:
            _check_fields(features, map_fields(name), where)
            dtype = features[f"saliency/{name}/dtype"].bytes_list.value[0].decode()
            if dtype not in MAP_DTYPES:
                raise RecordError(f"{where}: map {name!r} has unknown dtype {dtype!r}")
        else:
            size = len(features[name].float_list.value) if name in features else 0
            expected = int(np.prod(legacy_shape))
            if size != expected:
                raise RecordError(f"{where}: legacy map {name!r} has {size} values; expected "
                                  f"{expected} ({'x'.join(map(str, legacy_shape))})")


def check_file(path: str, kind: str, key: Optional[str] = None,
               max_records: Optional[int] = None,
               legacy_shape: Sequence[int] = LEGACY_MAP_SHAPE) -> int:
    """Validates up to `max_records` records of `path` ("image" or "saliency" schema).

    Legacy saliency maps must have `legacy_shape`'s size. Returns the number of records checked;
    raises `RecordError` naming the file and record.
    """
    if kind not in ("image", "saliency"):
        raise UserError(f"unknown record kind {kind!r}; use 'image' or 'saliency'")
    count = 0
    for index, serialized in iter_serialized(path):
        if max_records is not None and index >= max_records:
            break
        where = f"{path}: record {index}"
        features = parse_example(serialized, where)
        if kind == "image":
            check_image_features(features, where)
        else:
            check_saliency_features(features, where, key, legacy_shape)
        count += 1
    if count == 0:
        raise RecordError(f"{path}: holds no records")
    return count


# ----------------------------------------------------------------------------------------------
# Graph parsers for tf.data.


def parse_image_record(serialized: Any, label_key: str = "image/class/label") -> dict:
    """Parses an image record: {"encoded", "label", "filename", "box" [n, 4], "mask_png",
    "scene_label"} with defaults ('' / -1 / empty) for optional fields."""
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string, default_value=""),
        "image/scene/label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "image/object/mask": tf.io.FixedLenFeature([], tf.string, default_value=""),
    }
    spec.update({key: tf.io.VarLenFeature(tf.float32) for key in BOX_KEYS})
    parsed = tf.io.parse_single_example(serialized, spec)
    box = tf.stack([tf.sparse.to_dense(parsed[key]) for key in BOX_KEYS], axis=-1)
    return {
        "encoded": parsed["image/encoded"],
        "label": parsed[label_key],
        "filename": parsed["image/filename"],
        "scene_label": parsed["image/scene/label"],
        "box": box,
        "mask_png": parsed["image/object/mask"],
    }


def decode_mask(mask_png: Any) -> tf.Tensor:
    """Decodes an `image/object/mask` PNG to a bool [H, W] tensor (graph op)."""
    return tf.io.decode_png(mask_png, channels=1)[..., 0] > 0


def parse_saliency_record(serialized: Any, key: str, dtype: str, map_shape: Sequence[int],
                          default_key: Any = "") -> dict:
    """Parses a saliency record (v2 or the original ROAR layout) for the map under `key`.

    Returns {"raw_image", "label", "prediction_class", "example_key", "height", "width",
    "saliency"} with `saliency` float32 [map_shape], already multiplied by its scale (rank8: rank
    proxies in [-1, 1], see `encode_map`). `dtype` and
    `map_shape` are the stored map's (`peek_saliency_format` reads them from a file's first
    record). A legacy record (no `saliency/<key>`) is its float list reshaped to `map_shape`, with
    prediction -1 and `default_key` as its key.
    """
    spec = {
        "raw_image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "prediction_class": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "height": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "width": tf.io.FixedLenFeature([], tf.int64, default_value=0),
        "example/key": tf.io.FixedLenFeature([], tf.string, default_value=""),
        f"saliency/{key}": tf.io.FixedLenFeature([], tf.string, default_value=""),
        f"saliency/{key}/scale": tf.io.FixedLenFeature([], tf.float32, default_value=1.0),
        key: tf.io.VarLenFeature(tf.float32),
    }
    parsed = tf.io.parse_single_example(serialized, spec)
    stored = parsed[f"saliency/{key}"]

    def v2_map():
        if dtype == "rank8":
            return tf.reshape(rank8_decode(tf.io.decode_raw(stored, tf.uint8)), map_shape)
        values = tf.io.parse_tensor(stored, out_type=tf.as_dtype(dtype))
        values = tf.cast(values, tf.float32) * parsed[f"saliency/{key}/scale"]
        return tf.reshape(values, map_shape)

    def legacy_map():
        return tf.reshape(tf.sparse.to_dense(parsed[key]), map_shape)

    saliency = tf.cond(tf.strings.length(stored) > 0, v2_map, legacy_map)
    example_key = tf.where(tf.strings.length(parsed["example/key"]) > 0,
                           parsed["example/key"], default_key)
    return {
        "raw_image": parsed["raw_image"], "label": parsed["label"],
        "prediction_class": parsed["prediction_class"], "example_key": example_key,
        "height": parsed["height"], "width": parsed["width"],
        "saliency": tf.ensure_shape(saliency, map_shape),
    }


def peek_saliency_format(path: str, key: str, legacy_shape: Sequence[int] = LEGACY_MAP_SHAPE
                         ) -> tuple[str, tuple, bool]:
    """(dtype, shape, is_legacy) of the map `key` in the first record of `path`, validated.

    Legacy maps have no stored shape: they are taken to be `legacy_shape` (ROAR's 224x224x3).
    """
    for index, serialized in iter_serialized(path):
        where = f"{path}: record {index}"
        features = parse_example(serialized, where)
        check_saliency_features(features, where, key, legacy_shape)
        if f"saliency/{key}" in features:
            dtype = features[f"saliency/{key}/dtype"].bytes_list.value[0].decode()
            shape = tuple(features[f"saliency/{key}/shape"].int64_list.value)
            return dtype, shape, False
        return "float32", tuple(legacy_shape), True
    raise RecordError(f"{path}: holds no records")


def keyed_shard(path: Any, start: Any = 0, count: Any = -1) -> tf.data.Dataset:
    """A dataset of (default example key "<file name>:<index>", serialized record) of one file;
    `start` / `count` (-1: to the end) a range of its records, the skipped ones not keyed."""
    name = tf.strings.split(path, os.sep)[-1]
    return tf.data.TFRecordDataset(path).skip(start).take(count).enumerate(start).map(
        lambda index, record: (name + ":" + tf.strings.as_string(index), record))


def keyed_records(files: Sequence[str]) -> tf.data.Dataset:
    """A dataset of (default example key "<file name>:<index>", serialized record), in file
    order."""
    return tf.data.Dataset.from_tensor_slices(list(files)).flat_map(keyed_shard)
