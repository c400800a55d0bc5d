"""Faithfulness scores at scale: `python -m faithfulness.beam_scoring` (docs/scale_out.md).

    python -m faithfulness.beam_scoring --input_pattern='saliency/idsds_IxG/validation-*' \\
        --model_path=exports/clean --saliency_method=idsds:IxG \\
        --evaluation_protocol=single_deletion --beam_workers=8

Reads saliency records (images and maps, as `saliency_gen.generate --explain=label
--dtype=float32` writes them), scores every image in Beam workers with the protocols of
`faithfulness.evaluate` (the model loaded once per worker), and combines the per-image values
with a Beam combiner into each metric's mean and its seeded bootstrap interval. With float32
maps the means equal `faithfulness.evaluate`'s on the same images (tested to 1e-6). Writes the
JSON report (means, intervals, per-image values by example key) and prints a table.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Iterator, Optional

import numpy as np

import models
from faithfulness import evaluate
from models.foundation import provenance
from models.foundation import results as result_files
from models.foundation.cli import flag_of, option
from models.foundation.errors import RecordError, UserError, required
from models.foundation.files import exclusive, read_json, write_json
from models.foundation.lazy import lazy_module
from saliency_gen import beam_support, generate
from saliency_gen.beam_support import beam

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from models.formats import preprocessing
    from saliency_gen.attribution import names
    from saliency_gen.data import pipelines, records
else:
    preprocessing = lazy_module("models.formats.preprocessing")
    names = lazy_module("saliency_gen.attribution.names")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")


@dataclasses.dataclass(frozen=True)
class Config(beam_support.RunnerOptions):
    """beam_scoring's options (one flag each), after the Beam runner's."""

    input_pattern: Optional[str] = option(None, "Saliency records (images and maps).",
                                          origin="data")
    model_path: Optional[str] = option(None, "The model the maps explain (models.export).",
                                       origin="model_id")
    saliency_method: Optional[str] = option(None, "The maps' method name or record key.",
                                            origin="map_key")
    evaluation_protocol: str = option("single_deletion", "Protocol (faithfulness.evaluate).",
                                      evaluate.PROTOCOLS, origin="protocol")
    geometry: str = option("auto", "How images reach the model's size (as the generator).",
                           ("auto", "center_crop", "none"))
    batch_size: int = flag_of(evaluate.Options, "batch_size", origin=True)
    seed: int = option(0, "Seed of the protocols' draws and of the bootstrap.")
    output: str = option("faithfulness_beam.json", "JSON report.", origin=False)


def map_key(method: str) -> str:
    """The record key of a method name (or the key itself)."""
    try:
        names.resolve(method)
    except UserError:
        return method
    return generate.record_key(method)


class ScoreRange(beam.DoFn):
    """(shard, start, count) -> (metric, (example key, value)) for every image of the range."""

    def __init__(self, model_path: str, key: str, formats: dict, protocol: str,
                 options: "evaluate.Options", geometry: str):
        super().__init__()
        self.model_path, self.key, self.formats = model_path, key, formats
        self.protocol = protocol
        self.options, self.geometry = options, geometry

    def setup(self) -> None:
        beam_support.start_worker()
        self.loaded = beam_support.per_process(("model", self.model_path),
                                               lambda: models.load(self.model_path))
        self.measure = beam_support.per_process(
            ("measure", self.model_path, self.protocol, repr(self.options)),
            lambda: evaluate.measure_for(self.loaded, self.protocol, self.options))

    def record_reader(self, dtype: Any, shape: Any) -> Any:
        """(default key, serialized saliency record) -> (example key, model input, label,
        map)."""
        space = preprocessing.input_space(self.loaded.preprocessing)
        size = self.loaded.input_shape[0]

        def read(default_key, serialized):
            parsed = records.parse_saliency_record(serialized, self.key, dtype, shape,
                                                   default_key)
            fitted = pipelines.fit(preprocessing.decode_image(parsed["raw_image"]), size,
                                   self.geometry)
            return (parsed["example_key"], space.from_pixels(fitted), parsed["label"],
                    parsed["saliency"])

        return read

    def process(self, unit: tuple) -> Iterator[tuple[Any, Any]]:  # (key, value) pairs
        path, start, count = unit
        dtype, shape, _ = self.formats[path]
        read = beam_support.per_process(  # one reader for every unit (docs/records.md)
            ("reader", self.model_path, self.key, repr(dtype), repr(shape), self.geometry),
            lambda: pipelines.range_reader(self.record_reader(dtype, shape)))
        keys, images, labels, maps = (t.numpy() for t in read(path, start, count))
        if len(keys) != count:
            raise RecordError(f"{path}: records {start}..{start + count - 1} gave {len(keys)} "
                              "images; the shard changed during the run")
        if not np.all(np.isfinite(maps)):
            raise RecordError(f"{path}: records {start}..{start + count - 1}: a map holds NaN "
                              "or infinite values; re-generate the saliency records")
        keys = [k.decode() for k in keys]
        values = evaluate.per_image(self.loaded, images, labels, pipelines.key_ids(keys),
                                    self.key, self.protocol, self.options, self.measure,
                                    maps=maps, group_size=len(images))
        for metric, per_image in values.items():
            for key, value in zip(keys, np.asarray(per_image, np.float64)):
                yield metric, (key, float(value))


class WriteReport(beam.DoFn):
    """[(metric, summary)] -> the JSON report, written atomically."""

    def __init__(self, output: str, header: dict):
        super().__init__()
        self.output, self.header = output, header

    def process(self, summaries: list) -> Iterator[int]:
        write_json(self.output, {**self.header, "results": dict(sorted(summaries))}, indent=1)
        yield len(summaries)


def run(config: Config) -> dict:
    """Scores the records of `config` in a Beam pipeline; prints the table, returns the report."""
    f = config
    pattern, model_path, method = required(f, "input_pattern", "model_path", "saliency_method")
    files = records.list_files(pattern)
    key = map_key(method)
    counts = [(path, records.check_file(path, "saliency", key=key)) for path in files]
    formats = {path: records.peek_saliency_format(path, key) for path in files}
    options = evaluate.Options(batch_size=f.batch_size, seed=f.seed)
    loaded = models.load(f.model_path)
    header = {"protocol": f.evaluation_protocol, "model_path": f.model_path,
              "model_id": loaded.model_id, "input_pattern": f.input_pattern, "map_key": key,
              "n_images": sum(count for _, count in counts),
              "options": dataclasses.asdict(options),
              "origin": provenance.origin(provenance.with_code(
                  {"protocol": f.evaluation_protocol, "map_key": key, "geometry": f.geometry,
                   **dataclasses.asdict(options)},
                  records.manifest_code(os.path.dirname(os.path.abspath(files[0])))),
                  model_id=loaded.model_id, data=provenance.listing_digest(files))}
    units = f.work_ranges(counts, f.batch_size)
    output = os.path.abspath(f.output)

    def build(root):
        _ = (root
             | "Ranges" >> beam.Create(units)
             | "Spread" >> beam.Reshuffle()
             | "Score" >> beam.ParDo(ScoreRange(model_path, key, formats,
                                                f.evaluation_protocol, options, f.geometry))
             | "Combine" >> beam.CombinePerKey(beam_support.MeanAndInterval(f.seed))
             | "Gather" >> beam.combiners.ToList()
             | "Write" >> beam.ParDo(WriteReport(output, header)))

    with exclusive(output, "--output"):
        beam_support.run(build, f.pipeline_options(len(units)))
    report = read_json(output, "report")
    rows = [[metric, f"{s['mean']:.4f}", f"[{s['low']:.4f}, {s['high']:.4f}]", str(s["n"])]
            for metric, s in report["results"].items()]
    print(result_files.text_table(["metric", "mean", "95% interval", "images"], rows,
                                  align="right"))
    print(f"wrote {output}")
    return report


if __name__ == "__main__":
    beam_support.main("faithfulness.beam_scoring")  # DoFns pickled by name
