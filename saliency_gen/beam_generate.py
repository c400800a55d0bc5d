"""Saliency records from an Apache Beam pipeline: `python -m saliency_gen.beam_generate`.

    python -m saliency_gen.beam_generate --input_pattern='data/records/validation-*' \\
        --model_path=exports/obj --saliency_method=roar:IG_SG_2 --output_dir=saliency \\
        --beam_workers=8                                  # DirectRunner, 8 local processes
    python -m saliency_gen.beam_generate ... --runner=DataflowRunner \\
        --beam_options="--project=P --region=R --temp_location=gs://B/tmp"

The same options, checks, folders, manifests and record bytes as `saliency_gen.generate`
(docs/scale_out.md): the generator's set-up (method names, model, origins, which shards are
finished) runs here; the explanation runs in Beam workers. Each input shard is cut into ranges of
--batch_size records; a worker loads the model once and explains a range exactly as the
single-process generator explains that batch; the ranges of a shard are grouped back, ordered
and written as one shard under a temporary name, then renamed. Methods must be importable in the
workers: built-in names or 'package.module:function' (a method registered at run time in this
process does not exist in a worker process).
"""
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import models
from models.foundation.errors import RecordError
from models.foundation.lazy import lazy_module
from saliency_gen import beam_support, generate
from saliency_gen.beam_support import beam
from saliency_gen.data import shard_ledger

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from saliency_gen.attribution import names
    from saliency_gen.data import records
else:
    names = lazy_module("saliency_gen.attribution.names")
    records = lazy_module("saliency_gen.data.records")


@dataclasses.dataclass(frozen=True)
class Config(generate.Config, beam_support.RunnerOptions):
    """The generator's options plus the Beam runner's."""


class ExplainRange(beam.DoFn):
    """(shard, start, count, method) -> ((shard, method), (start, serialized records)): the
    saliency examples of one record range, with the model loaded and the `methods` (names)
    resolved once per worker."""

    def __init__(self, model_path: str, methods: tuple, options: dict):
        super().__init__()
        self.model_path, self.methods, self.options = model_path, methods, options
        self.loaded: Any = None  # loaded in setup, once per worker
        self.chosen: dict = {}  # resolved in setup, once per worker

    def setup(self) -> None:
        beam_support.start_worker()
        self.loaded = beam_support.per_process(("model", self.model_path),
                                               lambda: models.load(self.model_path))
        self.chosen = {method: names.resolved(method) for method in self.methods}

    def process(self, unit: Any) -> Iterator[tuple[Any, Any]]:
        path, start, count, method = unit
        examples = generate.explain_records(path, self.loaded, [self.chosen[method]],
                                            self.options, start=start, count=count)
        serialized = [example.SerializeToString(deterministic=True) for example in examples]
        if len(serialized) != count:
            raise RecordError(f"{path}: records {start}..{start + count - 1} gave "
                              f"{len(serialized)} examples; the shard changed during the run")
        yield (path, method), (start, serialized)


class WriteShard(beam.DoFn):
    """((shard, method), ranges) -> the method's output shard, written atomically from the ranges
    in record order (a shard whose ranges do not cover it exactly is an error, never written)."""

    def __init__(self, outputs: dict, counts: dict, sources: dict):
        super().__init__()
        self.outputs, self.counts, self.sources = outputs, counts, sources

    def process(self, element: Any) -> Iterator[Any]:
        (path, method), parts = element
        parts = sorted(parts, key=lambda part: part[0])
        expected = 0
        for start, serialized in parts:
            if start != expected:
                raise RecordError(f"{path}: the ranges of {method} do not cover the shard "
                                  f"(record {expected} is missing or repeated)")
            expected += len(serialized)
        if expected != self.counts[path]:
            raise RecordError(f"{path}: {method} has {expected} of {self.counts[path]} records")
        records.write_serialized(self.outputs[(path, method)],
                                 (record for _, serialized in parts for record in serialized))
        shard_ledger.seal(self.outputs[(path, method)], expected, self.sources[path])
        yield path, method, expected


def beam_explainer(runner: beam_support.RunnerOptions) -> Callable:
    """An `explain_all` for `generate.generate` that runs the work as a Beam pipeline."""

    def explain_all(work, loaded, generator_options, progress_bar=True):
        del progress_bar  # the runner reports progress (Dataflow's UI, Beam's logs)
        started = time.time()
        units = [(item.path, start, count, method)
                 for item in work for method in item.methods
                 for _, start, count in runner.work_ranges(
                     [(item.path, item.count)], generator_options["batch_size"])]
        if not units:
            return {"images": 0, "seconds": 0.0, "written": 0}
        outputs = {(item.path, method): item.outputs[method]
                   for item in work for method in item.methods}
        counts = {item.path: item.count for item in work}
        sources = {item.path: item.source for item in work}
        print(f"beam: {len(units)} ranges of at most {max(u[2] for u in units)} records "
              f"({sum(u[2] for u in units)} maps, {len(outputs)} shards)", flush=True)

        def build(root):
            _ = (root
                 | "Ranges" >> beam.Create(units)
                 | "Spread" >> beam.Reshuffle()
                 | "Explain" >> beam.ParDo(ExplainRange(
                     loaded.path, tuple(sorted({method for _, _, _, method in units})),
                     generator_options))
                 | "ByShard" >> beam.GroupByKey()
                 | "Write" >> beam.ParDo(WriteShard(outputs, counts, sources)))

        beam_support.run(build, runner.pipeline_options(len(units)))
        # every shard's ranges were checked to cover it exactly before it was written, so the
        # maps are the units' records (no runner metrics needed: Dask's runner has none)
        return {"images": sum(unit[2] for unit in units),
                "seconds": time.time() - started, "written": len(work)}

    return explain_all


def run(config: Config) -> dict:
    """Runs the generator's pipeline with `config`; prints and returns the summary."""
    return generate.run(config, explain_all=beam_explainer(config))


if __name__ == "__main__":
    beam_support.main("saliency_gen.beam_generate")  # DoFns pickled by name
