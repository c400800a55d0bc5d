"""ROAD at scale: `python -m roar.beam_road` (docs/scale_out.md, "ROAD on Beam").

    python -m roar.beam_road --ckpt_path=runs/clean/model --saliency_method=gradient_image \\
        --data_dir=saliency/SH --ratios=0.1,0.5,0.9 --beam_workers=8

The options, inputs and outputs of `roar.road`, with the work done in Beam workers: every test
shard is cut into ranges of --unit_records records (a multiple of --batch_size), and each range
is one work unit; a worker loads the clean model once and scores every image of its unit at
every order and fraction (correct or not, true-class probability) with `roar.road`'s
computation, which keys masks, jitter and imputation noise by the example and not by its batch.
A Beam combiner gathers the per-image values of each (order, fraction) into the mean and its
seeded bootstrap interval. The rows equal `roar.road`'s (tested to 1e-6) and carry the
intervals as `<value>_low` / `<value>_high`.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Any, Iterator, Optional

import models
from models.foundation.errors import required
from models.foundation.files import exclusive, read_json, write_json
from models.foundation.lazy import lazy_module
from roar import road
from saliency_gen import beam_support
from saliency_gen.beam_support import beam

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from saliency_gen.data import pipelines
else:
    pipelines = lazy_module("saliency_gen.data.pipelines")

VALUES = ("accuracy", "true_class_probability")


@dataclasses.dataclass(frozen=True)
class Config(road.Config, beam_support.RunnerOptions):
    """roar.road's options plus the Beam runner's."""


class ScoreRoadRange(beam.DoFn):
    """(shard, start, count) -> ((order, p, value name), (example key, value)) for every image
    of the range at every order and fraction, with the clean model loaded once per worker."""

    def __init__(self, ckpt_path: str, read: road.RoadRecords, orders: tuple, batch_size: int):
        super().__init__()
        self.ckpt_path, self.read, self.orders = ckpt_path, read, orders
        self.batch_size = batch_size
        self.model: Optional[models.LoadedModel] = None

    def setup(self) -> None:
        beam_support.start_worker()
        self.model = beam_support.per_process(("model", self.ckpt_path),
                                              lambda: models.load(self.ckpt_path))

    def process(self, unit: tuple) -> Iterator[tuple[Any, Any]]:  # (key, value) pairs
        path, start, count = unit
        for keys, found in road.image_outcomes(
                self.model, dataclasses.replace(self.read, files=[path]), orders=self.orders,
                batch_size=self.batch_size, span=(start, count)):
            for (order, p), (hits, probabilities) in found.items():
                for key, hit, probability in zip(keys, hits, probabilities):
                    yield (order, p, "accuracy"), (key, float(hit))
                    yield (order, p, "true_class_probability"), (key, float(probability))


class Gather(beam.DoFn):
    """[((order, p, value name), summary)] -> the summaries, written as one JSON file."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def process(self, summaries: list) -> Iterator[int]:
        write_json(self.path, [[list(key), summary] for key, summary in sorted(summaries)])
        yield len(summaries)


def run(config: Config) -> list:
    """The ROAD curves of `config` from a Beam pipeline: printed, written as roar.road writes
    them (rows with intervals), returned as rows."""
    road.check_flags(config)
    with exclusive(config.output + ".json", "ROAD output"):
        f = road.on_synthetic_world(config)
        (ckpt_path,) = required(f, "ckpt_path")  # (set by on_synthetic_world when not given)
        model = models.load(ckpt_path)
        read = road.inputs(f, model.input_shape[0])
        counts = road.first_records(
            f, [(path, pipelines.count_records([path])) for path in read.files])
        units = list(f.work_ranges(counts, f.batch_size))
        scratch = os.path.abspath(f.output) + ".combined.json"

        def build(root):
            _ = (root
                 | "Units" >> beam.Create(units)
                 | "Spread" >> beam.Reshuffle()
                 | "Score" >> beam.ParDo(ScoreRoadRange(ckpt_path, read, f.orders, f.batch_size))
                 | "Combine" >> beam.CombinePerKey(beam_support.MeanAndInterval(f.seed))
                 | "Collect" >> beam.combiners.ToList()
                 | "Gather" >> beam.ParDo(Gather(scratch)))

        beam_support.run(build, f.pipeline_options(len(units)))
        combined = {tuple(key): summary for key, summary in read_json(scratch, "ROAD scores")}
        os.remove(scratch)
        rows = []
        for order in f.orders:
            for p in read.ratios:
                means = {name: combined[order, p, name] for name in VALUES}
                row = road.row(f.saliency_method, order, p, means["accuracy"]["mean"],
                               means["true_class_probability"]["mean"],
                               means["accuracy"]["n"])
                for name in VALUES:
                    row[name + "_low"], row[name + "_high"] = (means[name]["low"],
                                                               means[name]["high"])
                rows.append(row)
                print(road.describe(row) + f" (accuracy 95% interval "
                      f"[{row['accuracy_low']:.4f}, {row['accuracy_high']:.4f}])")
        road.write_results(f, rows, model, read.files)
    return rows


if __name__ == "__main__":
    beam_support.main("roar.beam_road")  # DoFns pickled by name
