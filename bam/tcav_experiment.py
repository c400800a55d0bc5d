"""TCAV of one BAM model on the dataset's TCAV sets (docs/bam.md, "TCAV"): the dog concept on
dog_bedroom against random sets, per bottleneck, and the obj - scene contrast."""
import os
from typing import Optional, Sequence

import numpy as np

import models
from bam import tcav
from models.formats import tf1_models
from models.foundation.errors import UserError
from saliency_gen.data.world import dataset

TARGET, CONCEPT, COUNTERPART = "dog_bedroom", "dog_scene", "random_counter_part"


def target_class(data_dir: str, model_name: str) -> int:
    """The logit of `dog_bedroom` for a model: from obj_categories.txt for obj, else
    scene_categories.txt."""
    kind = "obj" if model_name == "obj" else "scene"
    path = os.path.join(data_dir, "tcav", f"{kind}_categories.txt")
    if not os.path.isfile(path):
        raise UserError(f"{path} does not exist; build the TCAV sets of the dataset first")
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, _, label = line.strip().rpartition(" ")
            if name == TARGET:
                return int(label)
    raise UserError(f"{path} has no {TARGET} line")


def load_set(data_dir: str, name: str, size: int, preprocessing: str, max_examples: int,
             raw: bool = False) -> np.ndarray:
    """Model inputs [n, size, size, 3] of the first `max_examples` sorted images of a TCAV set
    (`raw`: 0-255 RGB, as the original fed them)."""
    folder = os.path.join(data_dir, "tcav", name)
    files = dataset.sorted_files(folder)[:max_examples]
    if not files:
        raise UserError(f"{folder} holds no images")
    paths = [os.path.join(folder, f) for f in files]
    if raw:
        return dataset.load_pixels(paths, size).astype(np.float32)
    return dataset.model_inputs(paths, size, preprocessing)


def model_tcav(data_dir: str, model_dir: str, model_name: str,
               bottlenecks: Optional[Sequence[str]] = None, num_random_exp: int = 2,
               max_examples: int = 100, seed: int = 0, alpha: float = 0.1, batch_size: int = 64,
               raw: bool = False) -> dict:
    """{bottleneck: TcavResult.summary()} of one model."""
    path = os.path.join(model_dir, model_name)
    info = models.read_info(path)
    # TF1 SavedModels (BAM's released models) are read by tensor names; exports are rebuilt
    # as Keras models so that any layer can be a bottleneck.
    keras_model = (models.load(path) if info.get("format") == tf1_models.FORMAT
                   else models.rebuild(path))
    tcav_model = tcav.TcavModel(keras_model, batch_size)
    size = info["input_shape"][0]

    def images(name):
        return load_set(data_dir, name, size, info["preprocessing"], max_examples, raw)

    target, concept, counterpart = images(TARGET), images(CONCEPT), images(COUNTERPART)
    randoms = [images(f"random500_{r}") for r in range(num_random_exp)]
    klass = target_class(data_dir, model_name)
    results = {}
    for bottleneck in bottlenecks or tcav.default_bottlenecks(keras_model):
        result = tcav.run_tcav(tcav_model, bottleneck, target, klass, concept, randoms,
                               counterpart, seed=seed, alpha=alpha)
        results[bottleneck] = result.summary()
    return results


def contrast(obj_results: dict, scene_results: dict) -> dict:
    """TCAV model contrast per bottleneck both models have: obj score - scene score."""
    return {name: obj_results[name]["score"] - scene_results[name]["score"]
            for name in obj_results if name in scene_results}


def table(model_name: str, results: dict) -> str:
    """The printed table of one model's TCAV results."""
    lines = [f"TCAV of {model_name} (concept {CONCEPT}, target {TARGET})",
             f"{'bottleneck':<14} {'score':>6} {'std':>6} {'random':>7} {'p-value':>8}  sig."]
    for name, r in results.items():
        lines.append(f"{name:<14} {r['score']:>6.3f} {r['std']:>6.3f} {r['random_score']:>7.3f} "
                     f"{r['p_value']:>8.3g}  {'yes' if r['significant'] else 'no'}")
    return "\n".join(lines)
