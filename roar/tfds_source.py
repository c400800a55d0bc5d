"""A tensorflow-datasets split as image TFRecords, so every tool here can read it.

    files = tfds_to_records("cifar10", "test", "roar_runs/tfds/cifar10", "validation")

Writes `<output_dir>/<prefix>-NNNNN-of-MMMMM.tfrecord` image records (PNG, label, the example's
`tfds_id` as file name, so masks and noise are keyed by it) in the split's order. Finished
shards are kept, so an interrupted conversion resumes. `saliency_gen.generate` then writes the
saliency directory for them and `roar.train` / `roar.road` read both.
"""
import math
import os
from typing import Callable, Optional

import tensorflow as tf

from models.foundation.errors import UserError
from saliency_gen.data import records

RECORDS_PER_SHARD = 2500


def tfds_to_records(name: str, split: str, output_dir: str, prefix: str,
                    data_dir: Optional[str] = None,
                    progress: Optional[Callable[[int], None]] = None) -> list:
    """Converts `name`/`split` into image records under `output_dir`; returns the files."""
    import tensorflow_datasets as tfds

    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False,
                            read_config=tfds.ReadConfig(add_tfds_id=True))
    except Exception as error:  # tfds raises many types for unknown names, splits, missing data
        raise UserError(f"cannot read tensorflow-datasets {name!r} split {split!r}: "
                        f"{str(error).strip().splitlines()[0]}") from None
    count = int(dataset.cardinality())
    if count < 0:  # unknown: count once
        count = sum(1 for _ in dataset)
    shards = max(1, math.ceil(count / RECORDS_PER_SHARD))
    os.makedirs(output_dir, exist_ok=True)
    files = [os.path.join(output_dir, f"{prefix}-{index:05d}-of-{shards:05d}.tfrecord")
             for index in range(shards)]
    examples = iter(dataset)
    for index, path in enumerate(files):
        size = min(RECORDS_PER_SHARD, count - index * RECORDS_PER_SHARD)
        if os.path.exists(path):
            for _ in range(size):  # skip the finished shard's examples
                next(examples)
            continue

        def shard_examples(size=size):
            for _ in range(size):
                example = next(examples)
                image = example["image"]
                if image.shape[-1] == 1:
                    image = tf.image.grayscale_to_rgb(image)
                yield records.image_example(
                    tf.io.encode_png(image).numpy(), int(example["label"]),
                    filename=example["tfds_id"].numpy(), image_format="png",
                    height=int(image.shape[0]), width=int(image.shape[1]))
                if progress:
                    progress(1)
        records.write_records(path, shard_examples())
    return files


def tfds_num_classes(name: str, data_dir: Optional[str] = None) -> int:
    """The number of classes of the dataset's "label" feature."""
    import tensorflow_datasets as tfds

    return int(tfds.builder(name, data_dir=data_dir).info.features["label"].num_classes)
