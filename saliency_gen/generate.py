"""Writes saliency records: `python -m saliency_gen.generate`.

    python -m saliency_gen.generate --input_pattern='data/records/validation-*' \\
        --model_path=exports/obj --saliency_method=roar:IG_SG_2 --output_dir=saliency

Reads image TFRecords (docs/records.md), explains every image with the exported model (its
prediction, unless --explain=label), and writes one saliency-record shard per input shard to
`<output_dir>/<method dir>/<input file name>`, where the method dir is the ROAR generator code for
`roar:` names (IG_SG_2, SH, ...) and the method name otherwise. Each shard is written under a
temporary name and renamed when complete: a re-run skips finished shards of the same origin
(the folder's manifest.json, docs/records.md "Provenance") and redoes unfinished ones.
`--num_shards/--shard_index` give every cluster task its own subset of input shards.
"""
import contextlib
import dataclasses
import functools
import os
import re
import shutil
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np

import models
from models.foundation import progress, provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import (
    RecordError,
    UserError,
    check_unique,
    failure_line,
    op_error_detail,
    required,
)
from models.foundation.files import ensure_directory, exclusive, read_json, remove_leftovers
from models.foundation.lazy import lazy_module
from models.foundation.rules import LABEL_OFFSETS, MAX_CHUNK, Checked, at_least, at_most
from saliency_gen.data import shard_ledger
from saliency_gen.data.formats import MAP_DTYPES

# Loaded on first use: a bad flag is reported before TensorFlow starts (docs/architecture.md).
if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf

    from models.formats import preprocessing
    from saliency_gen.attribution import engine
    from saliency_gen.data import pipelines, records
else:
    tf = lazy_module("tensorflow")
    preprocessing = lazy_module("models.formats.preprocessing")
    engine = lazy_module("saliency_gen.attribution.engine")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")
if TYPE_CHECKING:  # the type checker's view of the same module
    from saliency_gen.attribution import names
else:
    names = lazy_module("saliency_gen.attribution.names")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    """The generator's options (one flag each), checked when built."""

    input_pattern: Optional[str] = option(None, "Glob of the image TFRecord shards to explain.",
                                          origin=False)
    model_path: Optional[str] = option(None, "Model directory written by models.export.",
                                       origin="model_id")
    saliency_method: str = option(
        "roar:SH_SG", "Method name(s), comma-separated: built-in names (saliency_gen.METHODS), "
        "registered ones, or 'package.module:function'.", origin="method")
    output_dir: Optional[str] = option(None, "Root directory of the saliency records.",
                                       origin=False)
    batch_size: int = option(32, "Images read and explained per step.", origin=False,
                             rule=at_least(1))
    chunk_size: int = option(64, "Rows per gradient evaluation (results do not depend on it).",
                             origin=False, rule=(at_least(1), at_most(MAX_CHUNK)))
    num_shards: int = option(1, "Split the input shards over this many tasks.", origin=False,
                             rule=at_least(1))
    shard_index: int = option(0, "This task's index in [0, num_shards).", origin=False)
    seed: int = option(0, "Seed of every random choice (noise, baselines, masks).")
    dtype: str = option("rank8", "Stored map format: rank8 (1 byte per element, exact ROAR "
                        "ranking at integer percentages), float16 or float32 (full precision).",
                        MAP_DTYPES)
    geometry: str = option("auto", "How images reach the model's input size: center_crop "
                           "(ROAR's crop_224), none (images already have it) or auto (none when "
                           "they do, else center_crop).", ("auto", "center_crop", "none"))
    label_offset: int = option(0, "Added to every stored label (ImageNet TF-slim: -1).",
                              rule=LABEL_OFFSETS)
    explain: str = option("prediction", "Explain the model's predicted class (ROAR, BAM) or the "
                          "label (IDSDS).", ("prediction", "label"))
    overwrite: bool = option(False, "Recompute finished output shards.", origin=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.shard_index < self.num_shards:
            raise UserError(f"--shard_index={self.shard_index} must be in [0, "
                            f"--num_shards={self.num_shards})")
        if not self.methods:
            raise UserError("--saliency_method names no method")
        check_unique("saliency_method", self.methods)

    @property
    def methods(self) -> list:
        """The method names of the comma-separated --saliency_method."""
        return [m.strip() for m in self.saliency_method.split(",") if m.strip()]


def method_directory(method: str) -> str:
    """The folder of a method's shards: the ROAR code for roar: names, else a safe name."""
    if method.lower().startswith("roar:"):
        return names.roar_code(method.split(":", 1)[1])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", method).strip("_")


def record_key(method: str) -> str:
    """The map's record key: ROAR's key for roar: names (ig_smooth_2, ...), else the folder."""
    code = method_directory(method)
    return names.ROAR_KEYS.get(code, code) if method.lower().startswith("roar:") else code


def explain_shard(path: str, output_path: str, loaded: Any, methods: "Sequence[names.Resolved]",
                  options: dict, progress: Optional[Callable]) -> int:
    """Explains every image of one input shard and writes its saliency shard atomically."""
    return records.write_records(output_path, explain_records(path, loaded, methods, options,
                                                              progress))


def explain_records(path: str, loaded: Any, methods: "Sequence[names.Resolved]", options: dict,
                    progress: Optional[Callable] = None, start: int = 0,
                    count: int = -1) -> Iterator:
    """Yields the saliency examples (tf.train.Example) of records [start, start + count) of the
    input shard `path` (count -1: to the end) with the maps of the resolved `methods`, explained
    in batches of options["batch_size"] from `start`. Each map depends on its image and key
    only (docs/saliency.md), so any split of a shard into ranges gives the same examples as the
    whole shard."""
    space = preprocessing.input_space(loaded.preprocessing)
    if loaded.input_shape[0] != loaded.input_shape[1] and options["geometry"] != "none":
        raise UserError(f"model {loaded.path} takes non-square input; use --geometry=none")
    if count < 0:  # to the shard's end, streamed
        batches = iter(pipelines.explanation_inputs(
            [path], loaded.input_shape, space, options["geometry"],
            select=(lambda keyed: keyed.skip(start)) if start else None).batch(
            options["batch_size"]).prefetch(1))
    else:  # a Beam work unit: one reader for every range (docs/records.md, "Reading records")
        batches = pipelines.explanation_range(path, loaded.input_shape, space,
                                              options["geometry"], start, count,
                                              options["batch_size"])
    index = start
    for keys, encoded, labels, images, heights, widths in _decoded(batches, path, loaded):
        labels = labels.numpy() + options["label_offset"]
        bad = np.flatnonzero((labels < 0) | (labels >= loaded.num_classes))
        if bad.size:
            raise RecordError(
                f"{path}: record {index + bad[0]}: label {labels[bad[0]]} is outside the "
                f"model's {loaded.num_classes} classes; check --label_offset and "
                "--model_path")
        images = images.numpy()
        keys = [k.decode() for k in keys.numpy()]
        ids = pipelines.key_ids(keys)
        predictions = np.argmax(engine.predict(loaded, images, options["chunk_size"]), 1)
        targets = labels if options["explain"] == "label" else predictions
        maps = {record_key(method.name): engine.attribute(
            loaded, images, method, targets, batch_size=options["chunk_size"],
            seed=options["seed"], ids=ids) for method in methods}
        for n, key in enumerate(keys):
            try:
                yield records.saliency_example(
                    encoded[n].numpy(), int(labels[n]),
                    {name: values[n] for name, values in maps.items()},
                    prediction_class=int(predictions[n]), height=int(heights[n]),
                    width=int(widths[n]), example_key=key, model_id=loaded.model_id,
                    meta={**options["meta"], "input": shard_ledger.identity(path)},
                    dtype=options["dtype"])
            except UserError as error:
                raise RecordError(f"{path}: record {index + n} ({key}): {error}") from None
        index += len(keys)
        if progress:
            progress(len(keys))


def _decoded(batches: Iterator, path: str, loaded: Any) -> Iterator:
    """The `batches`; a failure to read or decode them (not the model's or a method's, which
    say their own) is one line with TensorFlow's own message."""
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except tf.errors.OpError as error:
            if failure_line(error):  # out of memory: the binary's one line says so
                raise
            raise RecordError(f"{path}: cannot decode an image or fit it to the model's input "
                              f"{loaded.input_shape} ({op_error_detail(error)}); check "
                              "--geometry or re-create the shard") from None
        yield batch


def _shard_is_current(source, output_path, overwrite):
    """Whether the finished `output_path` can be kept: it exists, --overwrite is off, its bytes
    match its seal (else it is redone, with a line saying why) and it was made from an input
    of the content `source` has now (else one line offering --overwrite)."""
    if overwrite or not os.path.exists(output_path):
        return False
    entry = shard_ledger.read_seal(output_path)
    reason = ("it has no seal (written by an older version, or killed before it was sealed)"
              if entry is None else shard_ledger.mismatch(output_path, entry))
    if reason or entry is None:  # (no seal: `reason` says so)
        print(f"redoing {output_path}: {reason}", flush=True)
        return False
    if entry["input"] != source:
        raise UserError(f"{output_path} was made from input {_shown(entry['input'])}, not "
                        f"{_shown(source)}; pass --overwrite to replace it or choose a new "
                        "--output_dir")
    return True


def _shown(source: dict) -> str:
    return f"{source.get('file')} ({source.get('bytes')} bytes, sha256 " \
           f"{str(source.get('sha256'))[:12]})"


def claim_folder(folder: str, requested: dict, overwrite: bool, method: str = "") -> bool:
    """Makes `folder` (one method's shards) hold shards of the origin `requested` only; True
    when its finished shards must be redone because the method's code changed.

    The folder's manifest records the origin; a folder of another origin, or finished shards
    without a manifest, stop the run with one line unless --overwrite, which starts the folder
    afresh. A folder made by an earlier edit of a user method (the origins differ in the
    method's code alone) starts afresh with one line saying so. Concurrent tasks of one run
    claim the same origin and share the folder.
    """
    manifest = os.path.join(folder, records.MANIFEST)
    what = f"saliency folder {folder}"
    edited = not overwrite and os.path.exists(manifest) and provenance.code_changed(
        read_json(manifest, "origin file", provenance.ORIGIN_SCHEMA), requested,
        f"method {method}")
    if edited:
        print(f"{what}: {edited} changed since its shards were made; redoing them", flush=True)
        # their seals go too, so that a concurrent task of the run redoes its own shards
        shutil.rmtree(os.path.join(folder, shard_ledger.LEDGER), ignore_errors=True)
    if (overwrite or edited) and os.path.exists(manifest):
        os.remove(manifest)
    elif not os.path.exists(manifest) and _finished_shards(folder):
        if not overwrite:
            raise UserError(f"{what} holds shards without a {records.MANIFEST} (from an older "
                            "version or another tool); pass --overwrite to replace them or "
                            "choose a new --output_dir")
    provenance.claim(manifest, requested, what)
    return bool(edited)


def _finished_shards(folder):
    if not os.path.isdir(folder):
        return []
    return [name for name in os.listdir(folder)
            if name != records.MANIFEST and not name.startswith(".")]


def _holds_nothing_else(folder) -> bool:
    """Whether `folder` holds at most a manifest, an empty ledger and empty method folders: no
    shard, and no other generator's lock or unfinished file."""
    if not os.path.isdir(folder):
        return False
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name == records.MANIFEST or (name == shard_ledger.LEDGER and not os.listdir(path)):
            continue
        if not (os.path.isdir(path) and _holds_nothing_else(path)):
            return False
    return True


def generate(config: Config, *, progress_bar: bool = True,
             explain_all: Optional[Callable] = None) -> dict:
    """The generator of `config` as a function; returns {"images", "seconds", "written",
    "skipped"}.

    `explain_all(work, loaded, options, progress_bar)` does the work: `work` lists
    `ShardWork` items (an input shard, the methods it still lacks, its record count and the
    output path per method) and it returns {"images", "seconds", "written"}. The default
    explains them in this process; `saliency_gen.beam_generate` runs them as a Beam pipeline.

    Every method folder carries a manifest of its origin (docs/records.md, "Provenance"): a
    finished shard is skipped only when the folder's origin equals the requested one and the
    shard was made from the same input file; anything else stops with one line.
    """
    input_pattern, model_path, output_dir = required(config, "input_pattern", "model_path",
                                                     "output_dir")
    methods_list = config.methods
    batch_size, chunk_size, seed, dtype = (config.batch_size, config.chunk_size, config.seed,
                                           config.dtype)
    geometry, label_offset, explain = config.geometry, config.label_offset, config.explain
    num_shards, shard_index, overwrite = config.num_shards, config.shard_index, config.overwrite
    chosen = {method: names.resolved(method) for method in methods_list}  # unknown: stop now
    loaded = models.load(model_path)
    files = records.list_files(input_pattern)[shard_index::num_shards]
    common = {"seed": seed, "preprocessing": loaded.preprocessing, "geometry": geometry,
              "crop_version": preprocessing.CROP_VERSION, "explain": explain,
              "label_offset": label_offset}
    meta = {"methods": {record_key(m): {"name": m, **{k: repr(v) for k, v in
                                                      chosen[m].options.items()},
                                        **provenance.with_code({}, chosen[m].code_origin)}
                        for m in methods_list}, "model_id": loaded.model_id, **common}
    options = dict(batch_size=batch_size, chunk_size=chunk_size, seed=seed, dtype=dtype,
                   geometry=geometry, label_offset=label_offset, explain=explain,
                   meta=provenance.canonical(meta))
    folders = {m: os.path.join(output_dir, method_directory(m)) for m in methods_list}
    created = [folder for folder in [output_dir, *folders.values()] if not os.path.exists(folder)]
    try:
        with shards_lock(output_dir, files):
            sources = {path: shard_ledger.fingerprint(path) for path in files}
            redo = set()
            for method, folder in folders.items():
                ensure_directory(folder)
                remove_leftovers(folder, [os.path.basename(path) for path in files])
                entry = dict(meta["methods"][record_key(method)])
                code = entry.pop(provenance.METHOD_CODE, {})
                if claim_folder(folder, provenance.origin(provenance.with_code(
                        {"method": entry, "dtype": dtype, **common}, code),
                        model_id=loaded.model_id), overwrite, method):
                    redo.add(method)
            todo = [(path, [m for m in methods_list if not _shard_is_current(
                sources[path], os.path.join(folders[m], os.path.basename(path)),
                overwrite or m in redo)]) for path in files]
            work = [ShardWork(path, tuple(pending), records.check_file(path, "image"),
                              {m: os.path.join(folders[m], os.path.basename(path))
                               for m in pending}, sources[path])
                    for path, pending in todo if pending]
            explain_work = explain_all or functools.partial(explain_here, chosen=chosen)
            written = explain_work(work, loaded, options, progress_bar)
    except BaseException:
        for folder in reversed(created):  # a failed first run leaves no empty output behind
            if _holds_nothing_else(folder):
                shutil.rmtree(folder, ignore_errors=True)
        raise
    written["skipped"] = len(files) - written["written"]
    return written


@contextlib.contextmanager
def shards_lock(output_dir: str, files: Sequence[str]) -> Iterator[None]:
    """Claims the output shards of `files` in `output_dir` (all methods) before any work: a
    second generator whose input shards overlap this one's stops with one line, whatever its
    --num_shards; generators of disjoint shards share the folder."""
    with contextlib.ExitStack() as stack:
        for path in files:
            stack.enter_context(exclusive(os.path.join(output_dir, os.path.basename(path)),
                                          what="the saliency shards of"))
        yield


@dataclasses.dataclass(frozen=True)
class ShardWork:
    """One input shard still to explain: its path, the methods it lacks, its record count,
    each method's output path and the input's fingerprint (sealed with each output)."""

    path: str
    methods: tuple
    count: int
    outputs: dict
    source: dict  # shard_ledger.fingerprint of the input shard


def explain_here(work: Sequence, loaded: Any, options: dict, progress_bar: bool = True, *,
                 chosen: dict) -> dict:
    """Explains `work` in this process, shard by shard and method by method, with the run's
    resolved methods `chosen` ({name: `names.Resolved`})."""
    total = sum(item.count * len(item.methods) for item in work)
    started = time.time()
    images = 0
    with progress.bar(total if progress_bar else 0, "saliency", "map") as bar:
        for item in work:
            for method in item.methods:
                count = explain_shard(item.path, item.outputs[method], loaded,
                                      [chosen[method]], options, bar.update)
                shard_ledger.seal(item.outputs[method], count, item.source)
                images += count
    return {"images": images, "seconds": time.time() - started, "written": len(work)}


def run(config: Config, explain_all: Optional[Callable] = None) -> dict:
    """Runs the generator with `config`, prints a summary line and returns `generate`'s result
    (`explain_all`: see `generate`)."""
    result = generate(config, explain_all=explain_all)
    rate = result["images"] / result["seconds"] if result["seconds"] > 0 else 0.0
    print(f"wrote {result['images']} maps in {result['written']} shard(s) "
          f"({result['skipped']} already finished) in {result['seconds']:.1f} s: "
          f"{rate:.1f} images/s")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
