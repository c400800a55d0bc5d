"""Xplique 2.0.2's values of its metrics on fixed inputs, stored for the cross-checks
(docs/measures.md, "Xplique"): `python -m scripts.xplique_reference`.

Runs in Xplique's own environment (it pins TensorFlow <= 2.20), started in the repository's
root, e.g.

    python3 -m venv /tmp/xenv && /tmp/xenv/bin/pip install tensorflow-cpu==2.20.0 \\
        xplique==2.0.2
    /tmp/xenv/bin/python -m scripts.xplique_reference

The model is the one the Quantus cases use (its weights from tests/data/quantus_reference.json,
in Keras on both sides); the explainer is its plain input gradient. MeGe and ReCo get four
fold models (the stored weights, the dense layer's shifted by its own draw) through a
`learning_algorithm` that hands them back in fold order; AverageStability and MuFidelity draw
their noise with TensorFlow's global generator, so their means over the images agree with the
project's in distribution only. The inputs and values go to --output (JSON).
"""
import dataclasses
import datetime
import json
import os
from typing import Any

import numpy as np

from models.foundation.cli import option, run_binary
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import Checked

# (scripts/ is a folder of scripts, not a package the type checker follows)
# run as `python -m scripts.xplique_reference` or as `python scripts/xplique_reference.py`
measures_agreement: Any = lazy_module(
    f"{__package__}.measures_agreement" if __package__ else "measures_agreement")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    output: str = option("tests/data/xplique_reference.json", "Where the values go (JSON).")
    quantus_cases: str = option("tests/data/quantus_reference.json",
                                "The stored Quantus cases (their model's weights).")
    seed: int = option(0, "Seed of the inputs and the fold models' factors.")


class Gradient:
    """An explainer as Xplique calls one: the input gradient of the target's logit (targets
    one-hot), NHWC."""

    def __init__(self, model, batch_size=64):
        self.model = model

    def __call__(self, inputs, targets):
        import tensorflow as tf

        images = tf.convert_to_tensor(inputs, tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(images)
            chosen = tf.reduce_sum(self.model(images) * tf.convert_to_tensor(targets, tf.float32))
        return tape.gradient(chosen, images).numpy()


def run(config: Config) -> dict:
    import tensorflow as tf
    import xplique
    from xplique.metrics import AverageStability, MeGe, MuFidelity

    with open(config.quantus_cases) as handle:
        weights = {key: np.asarray(value, np.float32)
                   for key, value in json.load(handle)["inputs"].items()}
    rng = np.random.default_rng(config.seed)
    x = rng.normal(size=(16, 8, 8, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=16)
    shifts = rng.normal(scale=1.0, size=(4, 4, 3)).astype(np.float32)
    one_hot = np.eye(3, dtype=np.float32)[labels]
    folds = [measures_agreement.stored_model(weights, (8, 8, 3), shift) for shift in shifts]
    handed = iter(folds)
    mege, reco = MeGe(lambda *_: next(handed), x, one_hot, k_splits=4).evaluate(Gradient)
    model = measures_agreement.stored_model(weights, (8, 8, 3))
    tf.random.set_seed(config.seed)
    gradient = Gradient(model)(x, one_hot)
    stability = AverageStability(model, x, one_hot, nb_samples=200, radius=0.1).evaluate(
        Gradient(model))
    fidelity = MuFidelity(model, x, one_hot, grid_size=2, subset_percent=0.3,
                          nb_samples=400).evaluate(gradient)
    result = {"xplique": xplique.__version__, "tensorflow": tf.__version__,
              "seed": config.seed, "date": datetime.date.today().isoformat(),
              "inputs": {"x": x.tolist(), "y": labels.tolist(), "shifts": shifts.tolist()},
              "cases": [
                  {"measure": "mege", "settings": {"k_splits": 4}, "value": float(mege)},
                  {"measure": "reco", "settings": {"k_splits": 4}, "value": float(reco)},
                  # means over the 16 images; the draws differ (TensorFlow's global generator)
                  {"measure": "average_stability", "settings": {"nb_samples": 200,
                                                                "radius": 0.1},
                   "value": float(stability), "drawn": True},
                  {"measure": "mu_fidelity", "settings": {"grid_size": 2, "subset_percent": 0.3,
                                                          "nb_samples": 400},
                   "value": float(fidelity), "drawn": True}]}
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    write_json(config.output, result)
    print(f"{len(result['cases'])} cases -> {config.output}")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
