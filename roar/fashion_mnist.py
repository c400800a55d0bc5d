"""ROAR and KAR with real retraining on Fashion-MNIST: `python -m roar.fashion_mnist`
(docs/roar.md, "ROAR and KAR on Fashion-MNIST").

    sudo apt-get install dataset-fashion-mnist     # the IDX files, under /usr/share/datasets
    python -m roar.fashion_mnist --output_dir=fashion_roar

One command, resumable at every step:

1. the first `--train_images` training and `--test_images` test images of the IDX files become
   image records (`saliency_gen.data.sources.idx`);
2. a small CNN is trained on them (the model to explain; `roar.train --transformation=raw_image`);
3. its saliency records are written for every image and method (`saliency_gen.generate`, ROAR's
   settings: the predicted class, SmoothGrad² and VarGrad of the gradient with 25 samples and
   spread 0.15, IG with 25 steps from a black baseline);
4. ROAR (`--modes=roar`: the top fraction replaced by the mean colour) and KAR (the rest
   replaced) runs retrain the CNN from scratch for every method, fraction and seed, in this
   process, each reusing a finished run of the same origin (`roar.train.run`);
5. `roar.report` writes the table (mean, sd and a 95% t-interval over seeds) and the curve plot.

The random control ranks the features by a random map (`--transformation=random_baseline`).
"""
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Mapping

from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.foundation.rules import UNIQUE_NUMBERS, WHOLE_PERCENTS, Checked, at_least, some_of
from roar import report, sweep, train
from saliency_gen import generate

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras

    from saliency_gen.data.sources import idx
else:
    keras = lazy_module("keras")
    idx = lazy_module("saliency_gen.data.sources.idx")

# The methods of the sweep: ROAR generator codes, and the random control.
METHODS = ("SH", "IG", "GB", "SH_SG_2", "SH_V", "random")
METHOD_NAMES = {"SH": "gradient", "IG": "integrated gradients", "GB": "guided backprop",
                "SH_SG_2": "SmoothGrad²", "SH_V": "VarGrad", "random": "random"}


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    """roar.fashion_mnist's options (one flag each), checked when built."""

    output_dir: str = option("fashion_roar", "Where records, model, maps, runs and report go.")
    idx_dir: str = option(idx.FASHION_MNIST_DIR, "Folder of the four Fashion-MNIST IDX files.")
    train_images: int = option(12000, "Training images used (the first ones of the file).",
                               rule=at_least(1))
    test_images: int = option(2000, "Test images used.", rule=at_least(1))
    methods: tuple = option(METHODS, "ROAR generator codes of the methods, and random.")
    ratios: tuple = option(("0.1", "0.3", "0.5", "0.7", "0.9"), "Fractions replaced (ROAR) or "
                           "kept replaced around the top (KAR).",
                           rule=(WHOLE_PERCENTS, UNIQUE_NUMBERS))
    modes: tuple = option(("roar", "kar"), "roar and/or kar.", rule=some_of(sweep.MODES, "mode"))
    seeds: tuple = option(("0", "1", "2"), "Training seeds of every cell.")
    epochs: float = option(3.0, "Training epochs of every retraining run.")
    base_epochs: float = option(5.0, "Training epochs of the model to explain.")
    model: str = option("small_cnn", "The CNN (a registered model).")
    batch_size: int = option(64, "Training batch.", rule=at_least(1))


def _training_flags(config: Config, epochs: float) -> dict:
    """The recipe of every run: Adam at 0.04 per 256 images, warm-up of half an epoch, one x0.1
    step two thirds through."""
    return {"model": config.model, "num_classes": 10, "epochs": epochs,
            "batch_size": config.batch_size, "optimizer": "adam", "base_learning_rate": 0.04,
            "warmup_epochs": 0.5, "lr_decay_epochs": (str(round(epochs * 2 / 3, 3)),)}


def _quiet_run(**flags) -> Mapping[str, Any]:
    """One roar.train run in this process, its progress bar off; the graph cleared after."""
    try:
        return train.run(train.Config(**flags), verbose=0)
    finally:
        keras.backend.clear_session()


def run(config: Config) -> list:
    """Runs (or resumes) the whole sweep; returns the report's summary rows."""
    started = time.time()
    root = config.output_dir
    data_dir = os.path.join(root, "records")
    idx.run(idx.Config(**{split: os.path.join(config.idx_dir, name)
                          for split, name in idx.FASHION_MNIST_FILES.items()},
                       output_dir=data_dir, train_limit=config.train_images,
                       test_limit=config.test_images))
    base = _quiet_run(transformation="raw_image", data_dir=data_dir, seed=0,
                      output_dir=os.path.join(root, "base"),
                      **_training_flags(config, config.base_epochs))
    model_path = os.path.join(train.run_directory(os.path.join(root, "base"), "raw_image", 0.0,
                                                  None, False, "element", "mean", 0), "model")
    print(f"model to explain: top-1 {base['top1']:.4f} on {base['n_eval']} test images "
          f"({time.time() - started:.0f} s so far)")
    explained = [method for method in config.methods if method != "random"]
    saliency_dir = os.path.join(root, "saliency")
    if explained:
        generate.generate(generate.Config(input_pattern=os.path.join(data_dir, "*.tfrecord"),
                                          model_path=model_path,
                                          saliency_method=",".join(f"roar:{method}"
                                                                   for method in explained),
                                          output_dir=saliency_dir, batch_size=256, chunk_size=256,
                                          seed=0))
    print(f"maps written ({time.time() - started:.0f} s so far)")
    runs = [(mode, method, float(ratio), int(seed)) for mode in config.modes
            for method in config.methods for ratio in config.ratios for seed in config.seeds]
    runs_dir = os.path.join(root, "runs")
    with progress.bar(len(runs), "ROAR / KAR retraining", "run") as bar:
        for mode, method, ratio, seed in runs:
            _train_one(config, mode, method, ratio, seed, runs_dir, data_dir, saliency_dir)
            bar.update(1)
    print(f"{len(runs)} runs finished in {time.time() - started:.0f} s in all")
    return report.run(report.Config(output_dir=runs_dir,
                                    output=os.path.join(root, "fashion_mnist_roar")))


def _train_one(config, mode, method, ratio, seed, runs_dir, data_dir, saliency_dir) -> None:
    """One ROAR or KAR retraining of the grid."""
    flags = dict(ratio=ratio, seed=seed, keep_information=mode == "kar",
                 output_dir=runs_dir, **_training_flags(config, config.epochs))
    if method == "random":
        flags.update(transformation="random_baseline", data_dir=data_dir)
    else:
        flags.update(saliency_method=method, data_dir=os.path.join(
            saliency_dir, generate.method_directory(f"roar:{method}")))
    _quiet_run(**flags)


if __name__ == "__main__":
    run_binary(Config, run)
