"""PyTorch checkpoints into zoo models: `python -m models.formats.torch_checkpoints`
(docs/model_zoo.md).

    python -m models.formats.torch_checkpoints --model=resnet50 \\
        --checkpoint=resnet50_lr0.001.pth.tar --output=exports/idsds_resnet50

Reads a torchvision / timm / IDSDS state dict (`.pth`, `.pth.tar`; a `state_dict` entry and the
`module.model.`, `module.` or `model.` prefixes of IDSDS' training script are handled), builds
the matching zoo model (IDSDS model names are accepted: `resnet50` -> `resnet50_tv`,
`vgg16` -> `vgg16_tv`, `vit_base_patch16_224` -> `vit_b_16`), copies every tensor by name and
exports a SavedModel. Keras layer names are the PyTorch module paths with "." -> "_" (and no
leading underscore, `keras_name`); each tensor is transposed to Keras' layout (convolutions
OIHW -> HWIO, linear layers [out, in] -> [in, out]); layers with their own layout say so in a
`from_torch` method. Every Keras weight must be filled and every PyTorch tensor used, else the
conversion stops naming the first few.
Checkpoints are read without torch (`models.formats.torch_pickle`: a restricted unpickler that
rebuilds tensors only and refuses any other global in the pickle).
"""
from __future__ import annotations

import collections
import dataclasses
import os
from typing import TYPE_CHECKING, Optional

import numpy as np

from models.formats.torch_pickle import read_checkpoint
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError, required
from models.foundation.files import build_lock, file_sha256, project_cache_dir
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import keras

    from models.architectures import zoo
    from models.formats import exporting
else:
    keras = lazy_module("keras")
    zoo = lazy_module("models.architectures.zoo")
    exporting = lazy_module("models.formats.exporting")

# IDSDS' --model names whose zoo model has another name (the zoo's resnet50 / vgg16 are ROAR's
# and Keras' layouts).
IDSDS_NAMES = {"resnet50": "resnet50_tv", "vgg16": "vgg16_tv",
               "vit_base_patch16_224": "vit_b_16"}
PREFIXES = ("module.model.", "module.", "model.")
IGNORED = ("num_batches_tracked",)


def zoo_name(name: str) -> str:
    """The zoo model of an IDSDS or zoo model name."""
    return IDSDS_NAMES.get(name, name)


def read_state_dict(path: str) -> dict:
    """{name: float32 array} of the PyTorch checkpoint at `path`, prefixes stripped. Read without
    torch and without running code from the file (`models.formats.torch_pickle`)."""
    state = read_checkpoint(path)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not state:
        raise UserError(f"{path}: holds no state dict")
    names = list(state)
    for name in names:
        if not isinstance(name, str):
            raise UserError(f"{path}: state dict key {name!r} is not a name (a state dict maps "
                            "parameter names to tensors)")
    for prefix in PREFIXES:
        if names[0].startswith(prefix):
            state = {(k[len(prefix):] if k.startswith(prefix) else k): v
                     for k, v in state.items()}
            break
    return {key: np.asarray(value, np.float32) for key, value in state.items()
            if isinstance(value, np.ndarray) and not str(key).endswith(IGNORED)}


def keras_name(path: str) -> str:
    """The Keras layer name of a PyTorch module path: "." -> "_", leading underscores dropped
    (a SavedModel refuses names that start with one: `_blocks.3._bn0` -> `blocks_3__bn0`)."""
    return path.replace(".", "_").lstrip("_")


def num_classes_of(state: dict) -> int:
    """The class count of a state dict: the leading size of its last matrix or kernel."""
    for value in reversed(list(state.values())):
        if value.ndim >= 2:
            return int(value.shape[0])
    raise UserError("the checkpoint has no weight matrix to read the class count from")


def _standard(layer):
    """(PyTorch tensor names, how each becomes the Keras weight) of a standard layer, in the
    order of `layer.weights`; None for a layer without a standard conversion."""
    def same(value):
        return value

    if isinstance(layer, keras.layers.Conv2D):
        names = ["weight"] + (["bias"] if layer.use_bias else [])
        return names, [lambda w: w.transpose(2, 3, 1, 0), same][:len(names)]
    if isinstance(layer, keras.layers.DepthwiseConv2D):  # [C, 1, k, k] -> [k, k, C, 1]
        return ["weight"], [lambda w: w.transpose(2, 3, 0, 1)]
    if isinstance(layer, keras.layers.Dense):
        names = ["weight"] + (["bias"] if layer.use_bias else [])
        return names, [lambda w: w.T, same][:len(names)]
    if isinstance(layer, keras.layers.BatchNormalization):
        return ["weight", "bias", "running_mean", "running_var"], [same] * 4
    if isinstance(layer, keras.layers.LayerNormalization):
        return ["weight", "bias"], [same] * 2
    return None


def load_state_dict(model: keras.Model, state: dict, source: str = "the checkpoint") -> dict:
    """Copies `state` into `model` by name (see the module docstring); returns {"tensors",
    "weights"} counts. Raises a `UserError` naming missing, unused or mis-shaped tensors."""
    grouped: dict[str, dict] = collections.defaultdict(dict)
    modules: dict = {}
    for key, value in state.items():
        module, _, parameter = key.rpartition(".")
        grouped[keras_name(module)][parameter] = value
        modules[keras_name(module)] = module
    flat = {keras_name(key): key for key in state}
    used, missing, copied = set(), [], 0
    for layer in model.layers:
        if not layer.weights:
            continue
        if hasattr(layer, "from_torch"):
            values, keys = layer.from_torch(state, flat)
        elif layer.name in flat and len(layer.weights) == 1:  # a bare parameter (Fixup's bias)
            keys = [flat[layer.name]]
            values = [state[keys[0]]]
        else:
            standard = _standard(layer)
            if standard is None:
                raise UserError(f"layer {layer.name!r} ({type(layer).__name__}) has no PyTorch "
                                "conversion")
            tensors = grouped.get(layer.name, {})
            absent = [name for name in standard[0] if name not in tensors]
            if absent:
                missing.append(f"{modules.get(layer.name, layer.name)}.{absent[0]}")
                continue
            keys = [f"{modules[layer.name]}.{name}" for name in standard[0]]
            values = []
            for key, name, change in zip(keys, *standard):
                try:
                    values.append(change(np.asarray(tensors[name])))
                except ValueError:  # e.g. a transpose of a tensor of another rank
                    raise UserError(f"{source}: the tensor {key} has shape "
                                    f"{np.shape(tensors[name])}, which layer {layer.name} "
                                    f"({type(layer).__name__}) cannot take (wrong --model?)"
                                    ) from None
        if not values:
            missing.append(layer.name)
            continue
        for weight, value in zip(layer.weights, values):
            if tuple(weight.shape) != tuple(np.shape(value)):
                raise UserError(f"{source}: the tensor for {layer.name}/{weight.name} has shape "
                                f"{tuple(np.shape(value))}; the model wants "
                                f"{tuple(weight.shape)} (wrong --model or --num_classes?)")
            weight.assign(np.asarray(value, np.float32).reshape(weight.shape))
            copied += 1
        used.update(keys)
    unused = sorted(set(state) - used)
    if missing or unused:
        problems = []
        if missing:
            problems.append(f"no tensor for {', '.join(missing[:4])}")
        if unused:
            problems.append(f"unused tensors {', '.join(unused[:4])}")
        raise UserError(f"{source} does not match the model {model.name}: "
                        f"{'; '.join(problems)} (check --model)")
    return {"tensors": len(used), "weights": copied}


def convert(checkpoint: str, model: str, output: str, *, image_size: int = 224,
            num_classes: Optional[int] = None, overwrite: bool = False,
            digest: Optional[str] = None, options: Optional[dict] = None) -> dict:
    """Converts the PyTorch `checkpoint` of the zoo (or IDSDS) model `model` (built with the
    builder `options`, e.g. a small variant's width) and exports it to `output`; returns the
    export's info (its `extra` records the checkpoint and its digest, `digest` when the caller
    already computed it)."""
    name = zoo_name(model)
    spec = zoo.spec(name)
    state = read_state_dict(checkpoint)
    classes = num_classes or num_classes_of(state)
    built = zoo.build(name, classes, (image_size, image_size, 3), **(options or {}))
    counts = load_state_dict(built, state, checkpoint)
    extra = {"torch_checkpoint": os.path.abspath(checkpoint),
             "torch_checkpoint_sha256_16": digest or file_sha256(checkpoint)[:16], **counts}
    return exporting.export(built, output, preprocessing=spec.preprocessing, extra=extra,
                  overwrite=overwrite)


# The conversions' exports compute with their batch norms folded since v2 (docs/models.md,
# "Folded inference"): a cached export of v1 computed otherwise and is not reused.
EXPORT_VERSION = "v2"


def converted_model(checkpoint: str, model: str, cache_dir: Optional[str] = None, *,
                    image_size: int = 224, num_classes: Optional[int] = None) -> str:
    """The export of `checkpoint` as `model` under `cache_dir` (default: the project's cache,
    `converted/`), converted once and reused while the checkpoint's bytes, the model, the input
    size and the export's way of computing (`EXPORT_VERSION`) are the same."""
    if not os.path.isfile(checkpoint):
        raise UserError(f"{checkpoint}: no such checkpoint file")
    cache_dir = cache_dir or project_cache_dir("converted")
    digest = file_sha256(checkpoint)[:16]
    key = f"{zoo_name(model)}-{image_size}-{num_classes or 'auto'}-{digest}-{EXPORT_VERSION}"
    path = os.path.join(cache_dir, key)
    with build_lock(path, f"the conversion of {checkpoint}"):  # one converter at a time
        if not os.path.isfile(os.path.join(path, exporting.INFO_PATH)):
            convert(checkpoint, model, path, image_size=image_size, num_classes=num_classes,
                    digest=digest)
    return path


@dataclasses.dataclass(frozen=True)
class Config:
    """models.formats.torch_checkpoints' options (one flag each)."""

    model: Optional[str] = option(None, "Zoo model or IDSDS model name (resnet50, vgg16_bn, ...).")
    checkpoint: Optional[str] = option(None, "PyTorch state dict (.pth, .pth.tar).")
    output: Optional[str] = option(None, "Export directory (must not exist).")
    image_size: int = option(224, "Input side of the exported model.")
    num_classes: int = option(0, "Classes (0: read from the checkpoint).")


def run(config: Config) -> dict:
    """Converts and exports; prints one line."""
    model, checkpoint, output = required(config, "model", "checkpoint", "output")
    info = convert(checkpoint, model, output,
                   image_size=config.image_size, num_classes=config.num_classes or None)
    print(f"wrote {config.output}: {info['name']}, {info['num_classes']} classes, "
          f"{info['extra']['tensors']} tensors copied")
    return info


if __name__ == "__main__":
    run_binary(Config, run)
