"""Region scores of BAM's methods for a (model, data set) pair, from scratch.

`load_val_set(data_dir, name)` reads a set's sorted val listing, labels, boxes and masks (BAM's
index rules); `score_pair(model, val_set, indices, methods)` explains the sampled images with
`saliency_gen` (each image's own prediction, SmoothGrad noise keyed by the file stem, so the same
image gets the same noise in every set) and returns predictions and g values per method.
"""
import functools
import os
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

import models
import saliency_gen
from bam import region
from models.formats.preprocessing import load_bam_pixels
from models.foundation.errors import UserError
from saliency_gen.attribution import names
from saliency_gen.data.world import dataset


@dataclass
class ValSet:
    """A BAM evaluation set: sorted val files with labels, boxes and crop masks."""

    name: str
    paths: list
    labels: np.ndarray
    boxes: list
    masks: list
    image_size: int

    @functools.cached_property
    def stems(self) -> list:
        """The files' names without folder and extension (computed once: callers index it
        image by image)."""
        return [os.path.splitext(os.path.basename(p))[0] for p in self.paths]


class Sources:
    """A BAM world's exported models and validation sets, each loaded once, when first asked
    for."""

    def __init__(self, data_dir: str, model_dir: Optional[str]):
        self.data_dir, self.model_dir = data_dir, model_dir
        self._models: dict = {}
        self._sets: dict = {}

    def model(self, name: str) -> models.LoadedModel:
        if name not in self._models:
            if self.model_dir is None:
                raise UserError(f"the model {name} needs --model_dir")
            self._models[name] = models.load(os.path.join(self.model_dir, name))
        return self._models[name]

    def val_set(self, name: str) -> "ValSet":
        if name not in self._sets:
            self._sets[name] = load_val_set(self.data_dir, name)
        return self._sets[name]


def _mask_indices(names, num_masks):
    """BAM's mask index rule: in obj/scene/scene_only, image <o>-<s>-<i> uses mask
    label(o) * V + (i - T) (V masks per class, T the first val index); in the derived sets
    (as many masks as images) the k-th image uses mask k."""
    if num_masks == len(names):
        return list(range(len(names)))
    parsed = [dataset.parse_image_name(n) for n in names]
    first = min(index for _, _, index in parsed)
    per_class = num_masks // len(dataset.OBJECT_CLASSES)
    return [dataset.OBJECT_LABEL[obj] * per_class + index - first for obj, _, index in parsed]


def load_val_set(data_dir: str, name: str) -> ValSet:
    """Reads `<data_dir>/<name>` (val/, val.txt, val_loc.txt, val_mask)."""
    root = os.path.join(data_dir, name)
    if not os.path.isdir(root):
        raise UserError(f"{root} does not exist; build the dataset (or the delta patch) first")
    labels = dataset.read_labels(os.path.join(root, "val.txt"))
    locations = dict(dataset.read_locations(os.path.join(root, "val_loc.txt")))
    masks = dataset.load_masks(os.path.join(root, "val_mask"))
    files = dataset.sorted_files(os.path.join(root, "val"))
    names = [n for n, _ in labels]
    if names != files:
        raise UserError(f"{root}/val.txt does not list exactly the sorted files of {root}/val")
    missing = [n for n in names if n not in locations]
    if missing:
        raise UserError(f"{root}/val_loc.txt has no box for {missing[0]}")
    first = load_bam_pixels(os.path.join(root, "val", names[0]))
    indices = _mask_indices(names, len(masks))
    if max(indices) >= len(masks):
        raise UserError(f"{root}/val_mask holds {len(masks)} masks; the val images need "
                        f"{max(indices) + 1}")
    chosen_masks = [masks[k] for k in indices]
    return ValSet(name, [os.path.join(root, "val", n) for n in names],
                  np.array([label for _, label in labels]), [locations[n] for n in names],
                  chosen_masks, first.shape[0])


def stem_ids(stems: Sequence[str]) -> np.ndarray:
    """Noise keys: CRC32 of the image's `<obj>-<scene>-<nnnn>` stem, identical across sets."""
    return np.array([zlib.crc32(stem.split("_")[0].encode()) for stem in stems], np.int64)


def resolved_methods(methods: Union[Sequence[str], dict]) -> dict:
    """{method: its `saliency_gen.attribution.names.Resolved`}, each name resolved once (an unknown
    one stops here with one line): BAM's abbreviations (`GC`) as `bam:GC`, any other name (a
    built-in, a registered or a "package.module:function" method) as it is. A dict of resolved
    methods is returned as it is."""
    if isinstance(methods, dict):
        return methods
    return {method: names.resolved(
        f"bam:{method}" if method in names.BAM or f"bam:{method}" in names.PRODUCTS else method)
        for method in methods}


def score_pair(model: Any, val_set: ValSet, indices: Sequence[int],
               methods: Union[Sequence[str], dict], noise_seed: int = 0, batch_size: int = 64,
               progress: Optional[Callable[[int], None]] = None) -> tuple:
    """(predictions [n], {method: g [n]}, {method: constant-map count}) on `indices`;
    `methods` are names or `resolved_methods`; `progress(n)` is called after every n explained
    images."""
    chosen = resolved_methods(methods)
    input_size = (model.input_shape[0] if isinstance(model, models.LoadedModel)
                  else model.input_shape[1])
    images = dataset.model_inputs([val_set.paths[i] for i in indices], input_size, "caffe_rgb")
    predictions = np.argmax(saliency_gen.predict(model, images, batch_size), axis=1)
    names = [val_set.stems[i] for i in indices]
    frames = region.object_masks([val_set.masks[i] for i in indices],
                                 [val_set.boxes[i] for i in indices], val_set.image_size,
                                 input_size, names)
    ids = stem_ids(names)
    scores, constants = {}, {}
    for method, resolved in chosen.items():
        maps = saliency_gen.attribute(model, images, resolved, predictions,
                                      batch_size=batch_size, seed=noise_seed, ids=ids,
                                      progress=progress)
        scores[method], constant = region.region_scores(maps, frames)
        constants[method] = int(constant.sum())
    return predictions, scores, constants


def _load_array(path, what):
    """The .npy array of `path` (memory-mapped), refused unless it holds real numbers: no
    complex, string or object arrays."""
    if not os.path.isfile(path):
        raise UserError(f"{path} does not exist; --maps_dir needs {what}")
    try:
        array = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as error:
        raise UserError(f"{path} is not a .npy array: {error}") from None
    if array.dtype.kind not in "iubf":
        raise UserError(f"{path} holds {array.dtype} values; {what} must be real numbers")
    return array


def available_maps(maps_dir: str, pair_name: str) -> list:
    """The method names (file stems) of `<maps_dir>/<pair_name>/*.npy`, predictions excluded."""
    folder = os.path.join(maps_dir, pair_name)
    if not os.path.isdir(folder):
        raise UserError(f"{folder} does not exist; --maps_dir needs one folder per "
                        "<model>-<data> pair (e.g. obj-obj, scene-scene)")
    return sorted(os.path.splitext(n)[0] for n in os.listdir(folder)
                  if n.endswith(".npy") and n != "predictions.npy")


def score_saved_maps(maps_dir: str, pair_name: str, val_set: ValSet, indices: Sequence[int],
                     methods: Sequence[str], input_size: int) -> tuple:
    """Like `score_pair`, from maps computed elsewhere (`--maps_dir`, docs/bam.md).

    `<maps_dir>/<pair_name>/<method>.npy` holds [num_val, H, W] or [num_val, H, W, C] maps in
    the order of the set's sorted val.txt; `predictions.npy` the model's labels [num_val]. Maps
    at another resolution than `input_size` are resized bilinearly (per channel) to it.
    """
    import tensorflow as tf

    folder = os.path.join(maps_dir, pair_name)
    count = len(val_set.paths)
    predictions = _load_array(os.path.join(folder, "predictions.npy"), "the model's predictions")
    if predictions.shape != (count,):
        raise UserError(f"{folder}/predictions.npy has shape {predictions.shape}; expected "
                        f"({count},), one label per image of {val_set.name}")
    if predictions.dtype.kind not in "iub":
        raise UserError(f"{folder}/predictions.npy holds {predictions.dtype} values; the model's "
                        "predictions must be whole numbers (an integer dtype)")
    classes = int(max(val_set.labels)) + 1
    outside = np.flatnonzero((np.asarray(predictions) < 0) | (np.asarray(predictions) >= classes))
    if outside.size:
        raise UserError(f"{folder}/predictions.npy: image {outside[0]} is predicted as class "
                        f"{predictions[outside[0]]}, outside the {classes} classes of "
                        f"{val_set.name}")
    names = [val_set.stems[i] for i in indices]
    frames = region.object_masks([val_set.masks[i] for i in indices],
                                 [val_set.boxes[i] for i in indices], val_set.image_size,
                                 input_size, names)
    scores, constants = {}, {}
    for method in methods:
        path = os.path.join(folder, f"{method}.npy")
        maps = _load_array(path, f"the maps of method {method}")
        if maps.ndim not in (3, 4) or maps.shape[0] != count:
            raise UserError(f"{path} has shape {maps.shape}; expected [{count}, H, W] or "
                            f"[{count}, H, W, C] in the order of {val_set.name}/val.txt")
        if maps.shape[1] != maps.shape[2]:
            raise UserError(f"{path} holds {maps.shape[2]}x{maps.shape[1]} maps; BAM's images "
                            "are square, so their maps must be too (H = W); save the maps at "
                            "the images' resolution")
        chosen = np.asarray(maps[np.asarray(indices)], np.float32)
        chosen = chosen[..., None] if chosen.ndim == 3 else chosen
        if not np.isfinite(chosen).all():
            raise UserError(f"{path}: a sampled map contains NaN or infinite values")
        if chosen.shape[1:3] != (input_size, input_size):
            chosen = tf.image.resize(chosen, [input_size, input_size], method="bilinear").numpy()
        scores[method], constant = region.region_scores(chosen, frames)
        constants[method] = int(constant.sum())
    return np.asarray(predictions[np.asarray(indices)]), scores, constants


# Method index of BAM's 12-vector of g values (docs/bam.md, "Methods").
METHOD_INDEX = {"VG": 0, "SG": 1, "GB": 2, "GB-SG": 3, "IG": 4, "IG-SG": 5, "GC": 6, "GC-SG": 7,
                "GGC": 8, "GGC-SG": 9, "GxI": 10, "SG-GxI": 11}


def _image_key(stem):
    """The `<obj>-<scene>-<nnnn>` part of a stem (original patches append `_<L2>`)."""
    return "-".join(stem.split("-")[:2] + [stem.split("-")[2].split("_")[0]]) \
        if stem.count("-") >= 2 else stem


def score_precomputed(attr_dir: str, pair_name: str, val_set: ValSet, indices: Sequence[int],
                      methods: Sequence[str]) -> tuple:
    """Like `score_pair`, from the original precomputed layout (`--scratch=0`, docs/bam.md, "The
    original precomputed g vectors").

    `<attr_dir>/<pair_name>/<stem>_<pred>` is .npy content without suffix: 12 g values in
    method-index order. Files are matched to images by the `<obj>-<scene>-<nnnn>` stem (never by
    position, fix D6); the prediction is the text after the last `_`.
    """
    folder = os.path.join(attr_dir, pair_name)
    if not os.path.isdir(folder):
        raise UserError(f"{folder} does not exist; --scratch=0 reads <attr_dir>/<model>-<data>/")
    unknown = [m for m in methods if m not in METHOD_INDEX]
    if unknown:
        raise UserError(f"precomputed g vectors hold no method {unknown[0]!r}")
    files: dict[str, tuple[str, int]] = {}
    for name in sorted(os.listdir(folder)):
        stem, _, prediction = name.rpartition("_")
        if stem and prediction.lstrip("-").isdigit():
            files[_image_key(stem)] = (os.path.join(folder, name), int(prediction))
    predictions, vectors = [], []
    for i in indices:
        key = _image_key(val_set.stems[i])
        if key not in files:
            raise UserError(f"{folder} has no g vector for image {val_set.stems[i]}")
        path, predicted = files[key]
        try:
            vector = np.load(path, allow_pickle=False).astype(np.float64).ravel()
        except (ValueError, OSError) as error:
            raise UserError(f"{path} is not a .npy g vector: {error}") from None
        if vector.shape != (12,) or not np.isfinite(vector).all():
            raise UserError(f"{path} holds {vector.shape} values; expected 12 finite g values")
        predictions.append(predicted)
        vectors.append(vector)
    table = np.array(vectors).reshape(len(indices), 12)
    return (np.array(predictions), {m: table[:, METHOD_INDEX[m]] for m in methods},
            {m: 0 for m in methods})
