"""Measures how well compact saliency maps (rank8, float16) keep the rankings ROAR and ROAD use.

    python scripts/measure_compact_maps.py [--world_dir=/tmp/bam_world --num_images=1000]

Builds (or reuses) the default synthetic world, trains small_cnn on object labels for one epoch,
computes maps for --num_images validation images per method, stores each map as rank8 and as
float16 through the record codec, decodes it, and compares the selected sets with those of the
float32 map at ROAR's ratios (10..90%):

* element |e| (ROAR's default: squared values, per channel element);
* element signed (`--squared_value=false`);
* pixel sum of squares (ROAR `--ranking_unit=pixel`);
* pixel signed sum (ROAD).

Selection is ROAR's: the top k = int(q * N) scores, the lower flat index first on ties. Prints the
mean and minimum IoU over images and ratios, and the map bytes per element.
"""
import dataclasses
import os
from typing import TYPE_CHECKING

import numpy as np

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
import saliency_gen
from models.foundation import progress
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.training.recipes import RunOptions

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from bam import train
    from models.formats import preprocessing
    from saliency_gen.data import records
    from saliency_gen.data.world import dataset, synthetic
else:
    train = lazy_module("bam.train")
    preprocessing = lazy_module("models.formats.preprocessing")
    records = lazy_module("saliency_gen.data.records")
    dataset = lazy_module("saliency_gen.data.world.dataset")
    synthetic = lazy_module("saliency_gen.data.world.synthetic")

PERCENTS = (10, 20, 30, 40, 50, 60, 70, 80, 90)


def _selected(scores, k):
    return np.argsort(-scores.ravel(), kind="stable")[:k]


def _iou(first, second):
    first, second = set(first.tolist()), set(second.tolist())
    return len(first & second) / max(1, len(first | second))


RANKINGS = {
    "element |e|": lambda m: np.abs(m),
    "element signed": lambda m: m,
    "pixel sum of squares": lambda m: np.square(m).sum(-1),
    "pixel signed sum": lambda m: m.sum(-1),
}


def agreement(maps, dtype):
    """{ranking: (mean IoU, min IoU)} of decoded `dtype` maps against the float32 maps."""
    scores: dict[str, list] = {name: [] for name in RANKINGS}
    for saliency in maps:
        encoded, scale = records.encode_map(saliency, dtype)
        decoded = records.decode_map(encoded, dtype, saliency.shape, scale)
        for name, rank in RANKINGS.items():
            truth, approx = rank(saliency), rank(decoded)
            for percent in PERCENTS:
                k = records.ranking_cut(percent, truth.size)
                scores[name].append(_iou(_selected(truth, k), _selected(approx, k)))
    return {name: (float(np.mean(v)), float(np.min(v))) for name, v in scores.items()}


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each)."""

    world_dir: str = option("/tmp/bam_world", 'Synthetic world (built if missing).')
    num_images: int = option(1000, 'Validation images per method.')
    methods: str = option(
        "gradient,integrated_gradients,guided_backprop,"
        "smoothgrad_sq(gradient),vargrad(gradient)",
        'Methods to measure.')


def run(config: Config):
    synthetic.build_world(config.world_dir, seed=0)
    model, report = train.train_classifier(config.world_dir, "obj",
                                           RunOptions(recipe=train.BamRecipe(epochs=1)))
    listing = dataset.val_listing(os.path.join(config.world_dir, "obj"))[:config.num_images]
    pixels = dataset.load_pixels([path for path, _ in listing])
    images = preprocessing.INPUT_SPACES["caffe_rgb"].from_uint8(pixels)
    print(f"small_cnn, 1 epoch (val accuracy {report['val_accuracy']:.3f}); {len(images)} "
          f"images of {images.shape[1]}x{images.shape[2]}; IoU of ROAR's selected sets vs "
          f"float32 at {PERCENTS[0]}..{PERCENTS[-1]}%: mean / min over images and ratios")
    print(f"{'method':<26}{'dtype':<9}" + "".join(f"{name:>24}" for name in RANKINGS))
    methods = config.methods.split(",")
    measured = progress.bar(len(methods), "measure_compact_maps: methods", "method")
    for method in methods:
        maps = saliency_gen.attribute(model, images, method, batch_size=128)
        for dtype in ("rank8", "float16"):
            result = agreement(maps, dtype)
            cells = "".join(f"{mean:>16.5f} / {low:.3f}" for mean, low in result.values())
            measured.write(f"{method:<26}{dtype:<9}{cells}")
        measured.update(1)
    measured.close()
    size = int(np.prod(images.shape[1:]))
    print(f"\nbytes per element: rank8 1 ({size} per map, a quarter of float32), float16 2, "
          "float32 4")


if __name__ == "__main__":
    run_binary(Config, run)
