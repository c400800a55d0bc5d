"""Writes saliency records: `python -m saliency_gen.generate`.

    python -m saliency_gen.generate --input_pattern='data/records/validation-*' \\
        --model_path=exports/obj --saliency_method=roar:IG_SG_2 --output_dir=saliency

Reads image TFRecords (docs/records.md), explains every image with the exported model (its
prediction, unless --explain=label), and writes one saliency-record shard per input shard to
`<output_dir>/<method dir>/<input file name>`, where the method dir is the ROAR generator code for
`roar:` names (IG_SG_2, SH, ...) and the method name otherwise. Each shard is written under a
temporary name and renamed when complete: a re-run skips finished shards and redoes unfinished
ones. `--num_shards/--shard_index` give every cluster task its own subset of input shards.
"""
import json
import os
import re
import time
import zlib

import numpy as np
import tensorflow as tf
from absl import flags
from tqdm import tqdm

import models
from models.errors import RecordError, UserError, run_main
from models.preprocessing import CROP_VERSION, center_crop, decode_image, input_space
from saliency_gen import engine, names, records

FLAGS = flags.FLAGS


def define_flags():
    """The binary's flags (defined only when it runs, so importing this module defines none)."""
    flags.DEFINE_string("input_pattern", None, "Glob of the image TFRecord shards to explain.")
    flags.DEFINE_string("model_path", None, "Model directory written by models.export.")
    flags.DEFINE_string("saliency_method", "roar:SH_SG",
                        "Method name(s), comma-separated (see saliency_gen.METHODS).")
    flags.DEFINE_string("output_dir", None, "Root directory of the saliency records.")
    flags.DEFINE_integer("batch_size", 32, "Images read and explained per step.")
    flags.DEFINE_integer("chunk_size", 64, "Rows per gradient evaluation (results do not depend on it).")
    flags.DEFINE_integer("num_shards", 1, "Split the input shards over this many tasks.")
    flags.DEFINE_integer("shard_index", 0, "This task's index in [0, num_shards).")
    flags.DEFINE_integer("seed", 0, "Seed of every random choice (noise, baselines, masks).")
    flags.DEFINE_enum("dtype", "rank8", records.MAP_DTYPES,
                      "Stored map format: rank8 (1 byte per element, exact ROAR ranking at integer "
                      "percentages), float16 or float32 (full precision).")
    flags.DEFINE_enum("geometry", "auto", ["auto", "center_crop", "none"],
                      "How images reach the model's input size: center_crop (ROAR's crop_224), "
                      "none (images already have it) or auto (none when they do, else center_crop).")
    flags.DEFINE_integer("label_offset", 0, "Added to every stored label (ImageNet TF-slim: -1).")
    flags.DEFINE_enum("explain", "prediction", ["prediction", "label"],
                      "Explain the model's predicted class (ROAR, BAM) or the label (IDSDS).")
    flags.DEFINE_bool("overwrite", False, "Recompute finished output shards.")


def method_directory(method):
    """The folder of a method's shards: the ROAR code for roar: names, else a safe name."""
    if method.lower().startswith("roar:"):
        return names.roar_code(method.split(":", 1)[1])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", method).strip("_")


def record_key(method):
    """The map's record key: ROAR's key for roar: names (ig_smooth_2, ...), else the folder."""
    code = method_directory(method)
    return names.ROAR_KEYS.get(code, code) if method.lower().startswith("roar:") else code


def key_ids(keys):
    """int64 [N] noise ids of example keys (bytes or str): CRC-32, stable across runs."""
    return np.array([zlib.crc32(k if isinstance(k, bytes) else k.encode()) for k in keys],
                    np.int64)


def image_pipeline(paths, input_shape, space, geometry):
    """(key, encoded, label, model input, height, width) of every record of the image shards
    `paths`, in file order; images decoded, fitted to `input_shape` per `geometry` and mapped
    into the model's input space `space`."""
    height, width, _ = input_shape

    def prepare(key, serialized):
        parsed = records.parse_image_record(serialized)
        image = decode_image(parsed["encoded"])
        shape = tf.shape(image)
        if geometry == "center_crop":
            fitted = center_crop(image, crop_size=height)
        elif geometry == "none":
            fitted = tf.ensure_shape(image, input_shape)
        else:
            fitted = tf.cond(tf.reduce_all(shape[:2] == [height, width]),
                             lambda: image, lambda: center_crop(image, crop_size=height))
        key = tf.where(tf.strings.length(parsed["filename"]) > 0, parsed["filename"], key)
        return (key, parsed["encoded"], parsed["label"],
                space.from_pixels(tf.ensure_shape(fitted, input_shape)), shape[0], shape[1])

    return records.keyed_records(list(paths)).map(prepare, num_parallel_calls=tf.data.AUTOTUNE,
                                             deterministic=True)


def explain_shard(path, output_path, loaded, methods_list, options, progress):
    """Explains every image of one input shard and writes its saliency shard atomically."""
    space = input_space(loaded.preprocessing)
    if loaded.input_shape[0] != loaded.input_shape[1] and options["geometry"] != "none":
        raise UserError(f"model {loaded.path} takes non-square input; use --geometry=none")
    dataset = image_pipeline([path], loaded.input_shape, space, options["geometry"])
    dataset = dataset.batch(options["batch_size"]).prefetch(1)

    def examples():
        start = 0
        for keys, encoded, labels, images, heights, widths in dataset:
            labels = labels.numpy() + options["label_offset"]
            bad = np.flatnonzero((labels < 0) | (labels >= loaded.num_classes))
            if bad.size:
                raise RecordError(
                    f"{path}: record {start + bad[0]}: label {labels[bad[0]]} is outside the "
                    f"model's {loaded.num_classes} classes; check --label_offset and "
                    "--model_path")
            images = images.numpy()
            keys = [k.decode() for k in keys.numpy()]
            ids = key_ids(keys)
            predictions = np.argmax(engine.predict(loaded, images, options["chunk_size"]), 1)
            targets = labels if options["explain"] == "label" else predictions
            maps = {record_key(method): engine.attribute(
                loaded, images, method, targets, batch_size=options["chunk_size"],
                seed=options["seed"], ids=ids) for method in methods_list}
            for n, key in enumerate(keys):
                try:
                    yield records.saliency_example(
                        encoded[n].numpy(), int(labels[n]),
                        {name: values[n] for name, values in maps.items()},
                        prediction_class=int(predictions[n]), height=int(heights[n]),
                        width=int(widths[n]), example_key=key, model_id=loaded.model_id,
                        meta=options["meta"], dtype=options["dtype"])
                except UserError as error:
                    raise RecordError(f"{path}: record {start + n} ({key}): {error}") from None
            start += len(keys)
            progress(len(keys))

    try:
        return records.write_records(output_path, examples())
    except tf.errors.OpError as error:
        detail = str(error).strip().splitlines()[0]
        raise RecordError(f"{path}: cannot decode an image or fit it to the model's input "
                          f"{loaded.input_shape} ({detail}); check --geometry or re-create the "
                          "shard") from None


def generate(input_pattern, model_path, methods_list, output_dir, *, batch_size=32,
             chunk_size=64, num_shards=1, shard_index=0, seed=0, dtype="rank8",
             geometry="auto", label_offset=0, explain="prediction", overwrite=False,
             progress_bar=True):
    """The generator as a function; returns {"images", "seconds", "written", "skipped"}."""
    if not 0 <= shard_index < num_shards:
        raise UserError(f"--shard_index={shard_index} must be in [0, --num_shards={num_shards})")
    for method in methods_list:
        names.resolve(method)  # unknown names fail before any work
    loaded = models.load(model_path)
    files = records.list_files(input_pattern)[shard_index::num_shards]
    todo = []
    for path in files:
        output_path = os.path.join(output_dir, "{}", os.path.basename(path))
        outputs = [output_path.format(method_directory(m)) for m in methods_list]
        if not overwrite and all(os.path.exists(o) for o in outputs):
            continue
        todo.append((path, records.check_file(path, "image")))
    meta = {"methods": {record_key(m): {"name": m, **{k: repr(v) for k, v in
                                                        names.resolve(m).options.items()}}
                        for m in methods_list},
            "seed": seed, "model_id": loaded.model_id, "preprocessing": loaded.preprocessing,
            "geometry": geometry, "crop_version": CROP_VERSION, "explain": explain,
            "label_offset": label_offset}
    options = dict(batch_size=batch_size, chunk_size=chunk_size, seed=seed, dtype=dtype,
                   geometry=geometry, label_offset=label_offset, explain=explain,
                   meta=json.loads(json.dumps(meta)))
    total = sum(count for _, count in todo)
    started = time.time()
    written = 0
    with tqdm(total=total, unit="img", desc="saliency", disable=not progress_bar) as bar:
        for path, _ in todo:
            for method in methods_list:
                output_path = os.path.join(output_dir, method_directory(method),
                                           os.path.basename(path))
                if os.path.exists(output_path) and not overwrite:
                    continue
                written += explain_shard(path, output_path, loaded, [method], options,
                                         lambda count: bar.update(count / len(methods_list)))
    seconds = time.time() - started
    return {"images": written, "seconds": seconds, "written": len(todo),
            "skipped": len(files) - len(todo)}


def main(argv):
    del argv
    for name in ("input_pattern", "model_path", "output_dir"):
        if not getattr(FLAGS, name):
            raise UserError(f"--{name} is required")
    methods_list = [m.strip() for m in FLAGS.saliency_method.split(",") if m.strip()]
    result = generate(FLAGS.input_pattern, FLAGS.model_path, methods_list, FLAGS.output_dir,
                      batch_size=FLAGS.batch_size, chunk_size=FLAGS.chunk_size,
                      num_shards=FLAGS.num_shards, shard_index=FLAGS.shard_index,
                      seed=FLAGS.seed, dtype=FLAGS.dtype, geometry=FLAGS.geometry,
                      label_offset=FLAGS.label_offset, explain=FLAGS.explain,
                      overwrite=FLAGS.overwrite)
    rate = result["images"] / result["seconds"] if result["seconds"] > 0 else 0.0
    print(f"wrote {result['images']} maps in {result['written']} shard(s) "
          f"({result['skipped']} already finished) in {result['seconds']:.1f} s: "
          f"{rate:.1f} images/s")


if __name__ == "__main__":
    define_flags()
    run_main(main)
