"""IDX files (the MNIST / Fashion-MNIST format) as image records (docs/records.md, "Real data
sources").

    python -m saliency_gen.data.sources.idx --output_dir=fashion_mnist   # Debian's Fashion-MNIST
    python -m saliency_gen.data.sources.idx --train_images=train-images-idx3-ubyte.gz \\
        --train_labels=train-labels-idx1-ubyte.gz --test_images=... --test_labels=... \\
        --output_dir=mnist --train_limit=12000

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of dimensions),
one big-endian uint32 per dimension, then the values in row-major order, big-endian; `.gz` files
are read through gzip. `read_idx` returns the array and names the file and the problem in one
line when the header or the size does not fit. `write_idx_records` writes the first `limit`
images (in file order) as grayscale PNG image records, `train-NNNNN-of-MMMMM.tfrecord` and
`validation-...`, 10,000 records per shard, the example key `<split>_<index>`; the project's
decoder turns grayscale into RGB, so the models see three equal channels.
"""
import dataclasses
import gzip
import math
import os
import struct
from typing import TYPE_CHECKING, Optional

import numpy as np

from models.foundation.cli import option, run_binary
from models.foundation.errors import MissingPathError, UserError, check_minimum
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf

    from saliency_gen.data import records
else:
    tf = lazy_module("tensorflow")
    records = lazy_module("saliency_gen.data.records")

# IDX type codes: numpy dtype (big-endian where it matters).
IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
FASHION_MNIST_FILES = {"train_images": "train-images-idx3-ubyte.gz",
                       "train_labels": "train-labels-idx1-ubyte.gz",
                       "test_images": "t10k-images-idx3-ubyte.gz",
                       "test_labels": "t10k-labels-idx1-ubyte.gz"}
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
RECORDS_PER_SHARD = 10_000


def read_idx(path: str) -> np.ndarray:
    """The array stored in the IDX file `path` (gzip-compressed when it ends in .gz)."""
    if not os.path.isfile(path):
        raise MissingPathError(f"{path}: no such IDX file")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as error:
        raise UserError(f"{path}: unreadable ({error})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in IDX_TYPES:
        raise UserError(f"{path}: not an IDX file (bad magic number)")
    dtype, ndim = IDX_TYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise UserError(f"{path}: an IDX header with {ndim} dimensions is cut off")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = math.prod(shape) * dtype.itemsize
    if len(data) - header != expected:
        raise UserError(f"{path}: holds {len(data) - header} bytes of values; its header "
                        f"{'x'.join(map(str, shape))} says {expected} (truncated or padded)")
    return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_split(images_path: str, labels_path: str, limit: Optional[int] = None) -> tuple:
    """(uint8 images [N, H, W], int64 labels [N]) of one split, the first `limit` (None: all);
    mismatched counts or non-image files are one line."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise UserError(f"{images_path}: holds {images.dtype} values of shape {images.shape}, "
                        "not uint8 images [N, H, W]")
    if labels.ndim != 1 or len(labels) != len(images):
        raise UserError(f"{labels_path}: holds {labels.shape} labels for {len(images)} images "
                        f"of {images_path}")
    count = len(images) if limit is None else min(limit, len(images))
    return images[:count], labels[:count].astype(np.int64)


def write_idx_records(images: np.ndarray, labels: np.ndarray, output_dir: str,
                      prefix: str) -> list:
    """Writes `images` / `labels` as grayscale PNG image records `<prefix>-NNNNN-of-MMMMM`
    under `output_dir` (finished shards are kept); returns the files."""
    os.makedirs(output_dir, exist_ok=True)
    shards = max(1, math.ceil(len(images) / RECORDS_PER_SHARD))
    files = []
    for shard in range(shards):
        path = os.path.join(output_dir, f"{prefix}-{shard:05d}-of-{shards:05d}.tfrecord")
        files.append(path)
        if os.path.isfile(path):
            continue
        start = shard * RECORDS_PER_SHARD
        stop = min(start + RECORDS_PER_SHARD, len(images))

        def examples(start=start, stop=stop):
            for index in range(start, stop):
                encoded = tf.io.encode_png(images[index][..., None]).numpy()
                yield records.image_example(
                    encoded, int(labels[index]), filename=f"{prefix}_{index}",
                    image_format="png", height=images.shape[1], width=images.shape[2])

        records.write_records(path, examples())
    return files


@dataclasses.dataclass(frozen=True)
class Config:
    """saliency_gen.data.sources.idx's options (one flag each)."""

    train_images: str = option(os.path.join(FASHION_MNIST_DIR,
                                            FASHION_MNIST_FILES["train_images"]),
                               "IDX file of the training images (default: Debian's "
                               "Fashion-MNIST).")
    train_labels: str = option(os.path.join(FASHION_MNIST_DIR,
                                            FASHION_MNIST_FILES["train_labels"]),
                               "IDX file of the training labels.")
    test_images: str = option(os.path.join(FASHION_MNIST_DIR,
                                           FASHION_MNIST_FILES["test_images"]),
                              "IDX file of the test images.")
    test_labels: str = option(os.path.join(FASHION_MNIST_DIR,
                                           FASHION_MNIST_FILES["test_labels"]),
                              "IDX file of the test labels.")
    output_dir: Optional[str] = option(None, "Where the train-* and validation-* shards go.")
    train_limit: int = option(0, "Keep the first this many training images (0: all).")
    test_limit: int = option(0, "Keep the first this many test images (0: all).")


def run(config: Config) -> dict:
    """Writes both splits; prints the counts."""
    if not config.output_dir:
        raise UserError("--output_dir is required")
    check_minimum("train_limit", config.train_limit, 0)
    check_minimum("test_limit", config.test_limit, 0)
    written = {}
    for split, prefix, limit in (("train", "train", config.train_limit),
                                 ("test", "validation", config.test_limit)):
        images, labels = read_split(getattr(config, f"{split}_images"),
                                    getattr(config, f"{split}_labels"), limit or None)
        written[prefix] = write_idx_records(images, labels, config.output_dir, prefix)
        print(f"{prefix}: {len(images)} images of {images.shape[1]}x{images.shape[2]} px in "
              f"{len(written[prefix])} shard(s) under {config.output_dir}")
    return written


if __name__ == "__main__":
    run_binary(Config, run)
