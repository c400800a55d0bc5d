"""Trained weights of the default synthetic world's models, shipped with the package
(docs/synthetic_world.md, "Shipped models").

Training the world's four small models (BAM's obj, scene and scene_only, and the clean model the
other benchmarks explain) takes about 12 minutes on 2 cores, and the trained weights differ from
one CPU to another with its kernels. So `scripts/train_shipped_models.py` trains them once and
stores, per model, under `shipped_models/seed<seed>/<name>/`:

* `model_info.json`: the export's info (zoo name, input shape, classes, builder options,
  preprocessing, feature layer, model id and the training origin);
* `model.weights.h5`: its Keras weights (arrays only; nothing in it can run code);
* `report.json`: what its training reported (accuracy, seconds, recipe, origin).

`manifest.json` beside them records the world they were trained on (its `world.json`
parameters), the SHA-256 of every file and where and how they were made. `install` rebuilds a
model from its files, checks the weights against the recorded model id and exports it where a
trained one would be, so the default run loads the same weights on every machine.

Data derived from a shipped model that is costly to remake ships the same way, as a folder of
files (`store_folder`, `shipped_folder`) with the inputs it was made with (`made_with`, e.g. the
model id): BAM's delta patch (two minutes of gradient steps with scene_only) is one.
"""
import hashlib
import os
import shutil
from typing import Optional

from models.formats.exporting import (
    INFO_PATH,
    WEIGHTS_PATH,
    build_with_weights,
    export,
    weights_digest,
)
from models.foundation.errors import UserError
from models.foundation.files import atomic_output, file_sha256, read_json, write_json
from saliency_gen.data.world import synthetic

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipped_models")
MANIFEST = "manifest.json"
INFO, WEIGHTS, REPORT = "model_info.json", "model.weights.h5", "report.json"
REBUILD_COMMAND = "python scripts/train_shipped_models.py"


def folder(seed: int, root: Optional[str] = None) -> str:
    """The folder of the models shipped for the world with `seed`."""
    return os.path.join(root or ROOT, f"seed{int(seed)}")


def manifest(seed: int, root: Optional[str] = None) -> Optional[dict]:
    """The manifest of the models shipped for `seed`, or None when none are."""
    path = os.path.join(folder(seed, root), MANIFEST)
    return read_json(path, "shipped models' manifest") if os.path.isfile(path) else None


def _entry(part: str, name: str, world_dir: str, root: Optional[str]) -> Optional[tuple]:
    """(folder, manifest entry) of shipped `name` in the manifest's `part` ("models" or
    "folders") for the world in `world_dir`, or None when nothing is shipped for that world
    (another seed or size, or an older world format)."""
    world = synthetic.read_world_info(world_dir)
    shipped = manifest(world["seed"], root) if world else None
    entry = (shipped or {}).get(part, {}).get(name)
    if entry is None or world is None or shipped is None or any(
            world.get(key) != value for key, value in shipped["world"].items()):
        return None
    return os.path.join(folder(world["seed"], root), name), entry


def _world(world_dir: str) -> dict:
    """The `world.json` of the synthetic world in `world_dir` (one line if there is none)."""
    world = synthetic.read_world_info(world_dir)
    if world is None:
        raise UserError(f"{world_dir} is not a synthetic world (no world.json)")
    return world


def install(name: str, world_dir: str, export_path: str, root: Optional[str] = None
            ) -> Optional[dict]:
    """Exports the shipped model `name` of the world in `world_dir` at `export_path` (as
    `models.export` writes a trained one) and returns its training report; None when nothing
    is shipped for that world. Damaged files stop with one line."""
    found = _entry("models", name, world_dir, root)
    if found is None:
        return None
    source, recorded = found
    for file_name, digest in recorded["sha256"].items():
        if file_sha256(os.path.join(source, file_name)) != digest:
            raise UserError(f"shipped file {os.path.join(source, file_name)} does not match its "
                            f"recorded SHA-256; reinstall the package or retrain the models "
                            f"with {REBUILD_COMMAND}")
    info = read_json(os.path.join(source, INFO), "shipped model info")
    model = build_with_weights(info, os.path.join(source, WEIGHTS), source)
    model_id = f"{info['name']}-{weights_digest(model)}"
    if model_id != info["model_id"]:
        raise UserError(f"shipped weights in {source} give model id {model_id}, not the "
                        f"recorded {info['model_id']}; retrain them with {REBUILD_COMMAND}")
    export(model, export_path, preprocessing=info["preprocessing"],
           feature_layer=info["feature_layer"], model_id=model_id,
           extra=dict(info["extra"], shipped=os.path.relpath(source, root or ROOT)),
           overwrite=True)
    return read_json(os.path.join(source, REPORT), "shipped training report")


def store(name: str, export_path: str, report: dict, world_dir: str, made_by: dict,
          root: Optional[str] = None) -> str:
    """Stores the trained export at `export_path` (and its `report`) as shipped model `name`
    of the world in `world_dir`, and records it in the manifest; returns its folder."""
    world = _world(world_dir)
    base = folder(world["seed"], root)
    os.makedirs(base, exist_ok=True)
    destination = os.path.join(base, name)
    with atomic_output(destination) as temporary:
        os.makedirs(temporary)
        shutil.copyfile(os.path.join(export_path, INFO_PATH),
                        os.path.join(temporary, INFO))
        shutil.copyfile(os.path.join(export_path, WEIGHTS_PATH),
                        os.path.join(temporary, WEIGHTS))
        write_json(os.path.join(temporary, REPORT), report, indent=2, sort_keys=True)
    _record(world, "models", name, dict(made_by, sha256={
        file_name: file_sha256(os.path.join(destination, file_name))
        for file_name in (INFO, WEIGHTS, REPORT)}), root)
    return destination


def _record(world: dict, part: str, name: str, entry: dict, root: Optional[str]) -> None:
    """Records `entry` as `name` in the manifest's `part` for `world`."""
    recorded = manifest(world["seed"], root) or {}
    recorded["world"] = synthetic.world_config(world["seed"], world["image_size"],
                                               world["train_per_pair"], world["val_per_pair"])
    recorded.setdefault(part, {})[name] = entry
    write_json(os.path.join(folder(world["seed"], root), MANIFEST), recorded, indent=2,
               sort_keys=True)


def _tree_digest(root: str) -> str:
    """The SHA-256 of the files under `root`: each one's relative path and bytes, in order."""
    digest = hashlib.sha256()
    for path in sorted(os.path.relpath(os.path.join(here, name), root)
                       for here, _, names in os.walk(root) for name in names):
        digest.update(f"{path}\0{file_sha256(os.path.join(root, path))}\n".encode())
    return digest.hexdigest()


def store_folder(name: str, source_dir: str, world_dir: str, made_with: dict, made_by: dict,
                 root: Optional[str] = None, exclude: tuple = ()) -> str:
    """Stores the files under `source_dir` (but the top-level names in `exclude`) as shipped
    folder `name` of the world in `world_dir`, made from the inputs `made_with`."""
    world = _world(world_dir)
    destination = os.path.join(folder(world["seed"], root), name)
    with atomic_output(destination) as temporary:
        shutil.copytree(source_dir, temporary, ignore=lambda here, names: [
            n for n in names if here == source_dir and n in exclude])
    _record(world, "folders", name, dict(made_by, made_with=made_with,
                                         sha256=_tree_digest(destination)), root)
    return destination


def shipped_folder(name: str, world_dir: str, made_with: dict, root: Optional[str] = None
                   ) -> Optional[str]:
    """The shipped folder `name` for the world in `world_dir` when it was made from the same
    inputs `made_with` (and its files are intact), else None."""
    found = _entry("folders", name, world_dir, root)
    if found is None or found[1]["made_with"] != made_with:
        return None
    source, entry = found
    if _tree_digest(source) != entry["sha256"]:
        raise UserError(f"shipped folder {source} does not match its recorded SHA-256; "
                        f"reinstall the package or remake it with {REBUILD_COMMAND}")
    return source


def is_installed_copy(export_path: str) -> bool:
    """Whether the export at `export_path` was installed from shipped weights (not trained
    here)."""
    info_path = os.path.join(export_path, INFO_PATH)
    return os.path.isfile(info_path) and "shipped" in read_json(info_path)["extra"]
