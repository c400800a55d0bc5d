"""IDSDS on the synthetic world across the model zoo (docs/model_zoo.md, "IDSDS on the synthetic
world"): trains the small variant of every IDSDS architecture on the world's object labels,
then scores every explainer that applies to it (CAMs on CNNs, Rollout on the ViT, Bcos on the
B-cos network, BagNet on the BagNet) with the single deletion score (Spearman correlation,
higher is better) and incremental deletion (ascending order, mean true-class probability, higher
is better), and prints / writes the table.

    python scripts/idsds_zoo_table.py [--models=resnet18,vit_b_16] [--nr_images=32] [--epochs=2]
"""
import dataclasses
import os
import time
from typing import TYPE_CHECKING

import models
from faithfulness import evaluate
from models.foundation import files, progress, results
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.training import recipes

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from models.training import loop
    from saliency_gen.data import pipelines, records
    from saliency_gen.data.world import cache
else:
    loop = lazy_module("models.training.loop")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    records = lazy_module("saliency_gen.data.records")
    cache = lazy_module("saliency_gen.data.world.cache")

MODELS = ("small_cnn", "resnet18", "resnet50_tv", "wide_resnet50_2", "fixup_resnet50",
          "x_resnet50", "vgg11", "vgg16_tv", "vgg16_bn", "x_vgg16", "bcos_resnet50",
          "bagnet33", "vit_b_16")
@dataclasses.dataclass(frozen=True)
class Config:
    models: tuple = option(MODELS, "Zoo architectures (their small variants) to train and score.")
    nr_images: int = option(32, "Validation images scored per model.")
    epochs: float = option(2.0, "Training epochs per model.")
    output_dir: str = option("runs/idsds_zoo", "Where each model and idsds_zoo.json go.")
    seed: int = option(0, "Seed of the world, the training and the image sample.")


def run(args: Config) -> dict:
    """Trains and scores every model of `args.models`; returns {model: top-1, scores, time}."""
    shards = cache.records_dir(seed=args.seed)
    split_files = {split: records.list_files(os.path.join(shards, f"{split}-*"), split)
                   for split in ("train", "validation")}
    recipe = recipes.with_overrides(recipes.SYNTHETIC_RECIPE, epochs=args.epochs,
                                    decay_epochs=(max(1.0, args.epochs - 1),))
    table, report = [], {}
    trained = progress.bar(len(args.models), "idsds_zoo_table: models", "model")
    for name in args.models:
        spec = models.spec(name)
        started = time.time()
        data = {split: pipelines.image_batches(
            split_files[split], training=split == "train",
            batch_size=recipe.batch_size if split == "train" else 256,
            size=cache.IMAGE_SIZE, seed=args.seed, space=spec.preprocessing)
            for split in split_files}
        metrics = loop.train_and_evaluate(
            data["train"], data["validation"], recipes.RunOptions(
                model_name=name, num_classes=10, recipe=recipe, seed=args.seed,
                model_options=dict(spec.small)),
            num_train=pipelines.count_records(split_files["train"]),
            num_eval=pipelines.count_records(split_files["validation"]), size=cache.IMAGE_SIZE,
            output_dir=os.path.join(args.output_dir, name), preprocessing=spec.preprocessing)
        loaded = models.load(os.path.join(args.output_dir, name, "model"))
        images, labels, ids = pipelines.load_images(
            os.path.join(shards, "validation-*"), loaded, args.nr_images, args.seed)
        scores: dict = {}
        for protocol, metric in (("single_deletion", "sds"), ("incremental_deletion", "id")):
            found = evaluate.evaluate(loaded, images, labels, ids, evaluate.explainers_for(name),
                                      protocol, evaluate.Options(batch_size=64))
            for explainer, summary in found.items():
                scores.setdefault(explainer, {})[metric] = next(iter(summary.values()))["mean"]
        report[name] = {"top1": metrics["top1"], "scores": scores,
                        "seconds": time.time() - started}
        for explainer, values in scores.items():
            table.append([name, f"{metrics['top1']:.3f}", explainer.split(":", 1)[1],
                          f"{values['sds']:.3f}", f"{values['id']:.3f}"])
        trained.write(f"{name}: top-1 {metrics['top1']:.3f}, {len(scores)} explainers, "
                      f"{time.time() - started:.0f} s")
        trained.update(1)
    trained.close()
    print(results.text_table(["model", "top-1", "explainer", "SDS", "ID"], table,
                             align="right"))
    files.write_json(os.path.join(args.output_dir, "idsds_zoo.json"),
                     {"nr_images": args.nr_images, "epochs": args.epochs, "models": report},
                     indent=1)
    print(results.markdown_table(["model", "top-1", "explainer", "SDS", "ID"], table))
    return report


if __name__ == "__main__":
    # The table in docs/model_zoo.md was measured with TensorFlow's reference kernels, whose
    # choice does not depend on the CPU's instruction set as oneDNN's does (oneDNN also once
    # crashed training BagNet-33 here; see docs/model_zoo.md): the program's choice, made before
    # the start-up (which keeps a value already set).
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    run_binary(Config, run)
