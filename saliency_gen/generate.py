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
import dataclasses
import json
import os
import re
import time
from typing import Optional

import numpy as np
import tensorflow as tf
from tqdm import tqdm

import models
from models.cli import option, run_binary
from models.errors import RecordError, UserError
from models.preprocessing import CROP_VERSION, input_space
from saliency_gen import engine, names, pipelines, records


@dataclasses.dataclass(frozen=True)
class Config:
    """The generator's options (one flag each)."""

    input_pattern: Optional[str] = option(None, "Glob of the image TFRecord shards to explain.")
    model_path: Optional[str] = option(None, "Model directory written by models.export.")
    saliency_method: str = option(
        "roar:SH_SG", "Method name(s), comma-separated: built-in names (saliency_gen.METHODS), "
        "registered ones, or 'package.module:function'.")
    output_dir: Optional[str] = option(None, "Root directory of the saliency records.")
    batch_size: int = option(32, "Images read and explained per step.")
    chunk_size: int = option(64, "Rows per gradient evaluation (results do not depend on it).")
    num_shards: int = option(1, "Split the input shards over this many tasks.")
    shard_index: int = option(0, "This task's index in [0, num_shards).")
    seed: int = option(0, "Seed of every random choice (noise, baselines, masks).")
    dtype: str = option("rank8", "Stored map format: rank8 (1 byte per element, exact ROAR "
                        "ranking at integer percentages), float16 or float32 (full precision).",
                        records.MAP_DTYPES)
    geometry: str = option("auto", "How images reach the model's input size: center_crop "
                           "(ROAR's crop_224), none (images already have it) or auto (none when "
                           "they do, else center_crop).", ("auto", "center_crop", "none"))
    label_offset: int = option(0, "Added to every stored label (ImageNet TF-slim: -1).")
    explain: str = option("prediction", "Explain the model's predicted class (ROAR, BAM) or the "
                          "label (IDSDS).", ("prediction", "label"))
    overwrite: bool = option(False, "Recompute finished output shards.")


def method_directory(method):
    """The folder of a method's shards: the ROAR code for roar: names, else a safe name."""
    if method.lower().startswith("roar:"):
        return names.roar_code(method.split(":", 1)[1])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", method).strip("_")


def record_key(method):
    """The map's record key: ROAR's key for roar: names (ig_smooth_2, ...), else the folder."""
    code = method_directory(method)
    return names.ROAR_KEYS.get(code, code) if method.lower().startswith("roar:") else code


def explain_shard(path, output_path, loaded, methods_list, options, progress):
    """Explains every image of one input shard and writes its saliency shard atomically."""
    space = input_space(loaded.preprocessing)
    if loaded.input_shape[0] != loaded.input_shape[1] and options["geometry"] != "none":
        raise UserError(f"model {loaded.path} takes non-square input; use --geometry=none")
    dataset = pipelines.explanation_inputs([path], loaded.input_shape, space, options["geometry"])
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
            ids = pipelines.key_ids(keys)
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


def run(config: Config) -> dict:
    """Runs the generator with `config`, prints a summary line and returns `generate`'s result."""
    for name in ("input_pattern", "model_path", "output_dir"):
        if not getattr(config, name):
            raise UserError(f"--{name} is required")
    methods_list = [m.strip() for m in config.saliency_method.split(",") if m.strip()]
    result = generate(config.input_pattern, config.model_path, methods_list, config.output_dir,
                      batch_size=config.batch_size, chunk_size=config.chunk_size,
                      num_shards=config.num_shards, shard_index=config.shard_index,
                      seed=config.seed, dtype=config.dtype, geometry=config.geometry,
                      label_offset=config.label_offset, explain=config.explain,
                      overwrite=config.overwrite)
    rate = result["images"] / result["seconds"] if result["seconds"] > 0 else 0.0
    print(f"wrote {result['images']} maps in {result['written']} shard(s) "
          f"({result['skipped']} already finished) in {result['seconds']:.1f} s: "
          f"{rate:.1f} images/s")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
