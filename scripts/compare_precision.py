"""What the report card's --precision changes: the card's classifier in float32 against the same
weights computing in mixed precision, on the card's own images, measured in one run.

    python scripts/compare_precision.py                                   # the synthetic world
    python scripts/compare_precision.py --pretrained=efficientnet_lite0   # the real network

Loads the card's inputs as `scripts/report_card.py` does (model and first --nr_images images),
exports the model in --precision (`models.formats.exporting.export_in_precision`, into a
temporary folder) and prints, for both: the forward and gradient rates at --batch_size (bare
traced passes, best of --repeats, as `scripts/profile_card.py` measures its ceilings), the
largest logit difference and the share of equal top-1 predictions; per method, the mean
Spearman correlation between the two precisions' maps (absolute values summed over channels);
per Deletion / Insertion metric and method, the largest and mean absolute per-image difference
(docs/models.md, "Precision"). Shows its progress by step (rates, maps, scores). Writes
<output>.json.
"""
import dataclasses
import os
import tempfile
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from faithfulness import card as faithfulness_card
from faithfulness import stats
from models.foundation import progress, provenance, results
from models.foundation.cli import option, run_binary, script_module
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import PRECISIONS, at_least

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from faithfulness import randomisation
    from models.formats import exporting
    from models.formats import pretrained as pretrained_models
    from saliency_gen.attribution import engine
else:
    randomisation = lazy_module("faithfulness.randomisation")
    exporting = lazy_module("models.formats.exporting")
    pretrained_models = lazy_module("models.formats.pretrained")
    engine = lazy_module("saliency_gen.attribution.engine")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    pretrained: Optional[str] = option(None, "The real network (as report_card.py --pretrained).",
                                       choices=tuple(pretrained_models.PRETRAINED))
    precision: str = option("mixed_bfloat16", "The precision compared with float32.",
                            PRECISIONS[1:])
    nr_images: int = option(16, "Images compared.", rule=at_least(2))
    methods: tuple = option(("gradient", "bam:GC", "integrated_gradients"), "Methods compared.")
    batch_size: int = option(32, "Images per model call.", rule=at_least(1))
    repeats: int = option(3, "Timings of each rate (the best counts).", rule=at_least(1))
    output: str = option("precision_comparison", "Output stem: <output>.json.")


def _scores(loaded, inputs, methods) -> dict:
    """{(metric, method): per-image values} of Deletion and Insertion."""
    found = {}
    for benchmark in faithfulness_card.benchmarks(
            loaded, inputs.images, inputs.labels, inputs.ids, data={},
            names=("Deletion", "Insertion")):
        for method in methods:
            for metric, values in benchmark.score(method).items():
                found[(f"{benchmark.name} {metric}", method)] = np.asarray(values, np.float64)
    return found


def run(config: Config) -> dict:
    card = script_module(os.path.join(REPO, "scripts", "report_card.py"))
    profile = script_module(os.path.join(REPO, "scripts", "profile_card.py"))
    card_config = card.resolved(card.Config(pretrained=config.pretrained,
                                            nr_images=config.nr_images, methods=config.methods))
    inputs = card.load_inputs(card_config, card.resolved_methods(card_config))
    with tempfile.TemporaryDirectory() as folder:
        mixed = models.load(exporting.export_in_precision(inputs.model_path, config.precision,
                                                          folder))
        twins = {"float32": inputs.loaded, config.precision: mixed}
        report: dict = {"date": time.strftime("%Y-%m-%d"), "machine": provenance.machine(),
                        "model": inputs.loaded.model_id, "precision": config.precision,
                        "images": len(inputs.images)}
        steps = progress.bar(2 + 3 * len(config.methods), "precision comparison", "step")
        report["rates"] = {}
        for name, model in twins.items():
            # (the passes alone: ROAD's solver does not depend on the model's precision)
            report["rates"][name] = profile.rates(model, np.asarray(inputs.images),
                                                  config.batch_size, config.repeats,
                                                  profile.PASSES)
            steps.update()
        logits = {name: np.asarray(model(inputs.images)) for name, model in twins.items()}
        report["logits_max_difference"] = float(np.abs(logits["float32"]
                                                       - logits[config.precision]).max())
        report["top1_agreement"] = float(np.mean(logits["float32"].argmax(1)
                                                 == logits[config.precision].argmax(1)))
        report["maps_spearman"] = {}
        for method in config.methods:
            report["maps_spearman"][method] = float(np.mean(stats.spearman(*(
                randomisation.flat_abs(engine.attribute(model, inputs.images, method, inputs.labels,
                                                 ids=inputs.ids))
                for model in twins.values()))))
            steps.update()
        scores = {}
        for name, model in twins.items():
            scores[name] = _scores(model, inputs, config.methods)
            steps.update(len(config.methods))
        steps.close()
    report["scores"] = [
        {"metric": metric, "method": method,
         "max_difference": float(np.nanmax(np.abs(values - scores[config.precision][key]))),
         "mean_difference": float(np.nanmean(np.abs(values - scores[config.precision][key])))}
        for key, values in scores["float32"].items() for metric, method in [key]]
    print_report(report)
    write_json(config.output + ".json", report, indent=1)
    print(f"wrote {config.output}.json")
    return report


def print_report(report: dict) -> None:
    rates = report["rates"]
    names = list(rates)
    print(f"{report['model']}, {report['images']} images: {names[1]} against float32")
    print(results.text_table(["pass"] + names + ["ratio"], [
        [kind, *(f"{rates[name][kind]:.0f}" for name in names),
         f"{rates[names[1]][kind] / rates[names[0]][kind]:.2f}"]
        for kind in ("forward", "gradient")]))
    print(f"logits: largest difference {report['logits_max_difference']:.4f}; top-1 equal on "
          f"{100 * report['top1_agreement']:.0f}% of the images")
    print(results.text_table(["method", "maps' Spearman"], [
        [method, f"{value:.3f}"] for method, value in report["maps_spearman"].items()]))
    print(results.text_table(["metric", "method", "largest |difference|", "mean |difference|"], [
        [row["metric"], row["method"], f"{row['max_difference']:.4f}",
         f"{row['mean_difference']:.4f}"] for row in report["scores"]]))
    print(f"{report['date']}, {report['machine']}")


if __name__ == "__main__":
    run_binary(Config, run)
