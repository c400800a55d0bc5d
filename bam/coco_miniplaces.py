"""The real BAM dataset from MSCOCO 2017 train and MiniPlaces train (docs/bam.md, "The dataset
layout"), with the fixes.

    build_dataset(coco_dir, miniplaces_dir, output_dir, seed=0)

* Object cut-outs: per class, the COCO category looked up by its COCO name (`stop sign`,
  fix D1; exactly one id, and every chosen annotation must carry it), images in ascending id
  order, the largest annotation of the class (crowd included, first on a tie), mask and image
  cropped to the floored bbox, RGB * mask as RGBA with alpha 0 where exactly black. Skipped and
  counted: non-RGB images, largest area 0, empty crops, crops without mask pixels; anything
  else (a missing or unreadable image, a mask that does not fit its image) stops the build.
  Saved as `coco/segments/<obj>/<COCO stem>.png` with `sources.txt` (png, COCO image id,
  annotation id), `extraction.json` (category id, counts per skip reason) and `val_mask`.
* Scenes: the first N files of each sorted MiniPlaces train folder, 128 x 128.
* Everything else through `bam.construction`: pasting with per-image seeds (fix D2), obj / scene
  / scene_only with val.txt, val_loc.txt, loc.txt, val_mask; dog_bedroom and bamboo_forest;
  TCAV folders; the relative sets scene1..scene10.

The build runs in stages inside `<output_dir>/.bam_build/`; a finished stage is marked and
skipped when the build is re-run after an interruption. When all stages are done the folders
move into `<output_dir>` and `bam_dataset.json` (the parameters, counts and extraction report)
is written last: its presence means the dataset is complete.
"""
import collections
import contextlib
import io
import json
import os
import shutil
import time
from typing import Any, Callable, Optional

import numpy as np
from PIL import Image

from models.foundation.errors import MissingPathError, UserError
from models.foundation.files import write_json
from saliency_gen.data.world import compositing, construction, dataset
from saliency_gen.data.world.dataset import OBJECT_CLASSES, SCENE_CLASSES

FORMAT = "bam-coco-miniplaces/v1"
SCENE_SIZE = 128
INFO_FILE = "bam_dataset.json"
STAGING = ".bam_build"
COCO_NAMES = {obj: obj.replace("_", " ") for obj in OBJECT_CLASSES}  # "stop sign" (fix D1)
MINIPLACES_CATEGORIES = dict({scene: f"{scene[0]}/{scene}" for scene in SCENE_CLASSES},
                             track="t/track/outdoor")
SKIP_REASONS = ("non_rgb", "area_0", "empty_crop", "empty_mask")
# Top-level outputs, relative to the output directory.
OUTPUTS = (("obj",), ("scene",), ("scene_only",), ("dog_bedroom",), ("bamboo_forest",),
           ("tcav",)) + tuple((name,) for name in construction.RELATIVE_SETS) + tuple(
               ("coco", "segments", obj) for obj in OBJECT_CLASSES)


class _Skip(Exception):
    """An image the original would have skipped (docs/bam.md, "The dataset layout"); `args[0]` is
    the reason."""


# ----------------------------------------------------------------------------------------------
# MSCOCO cut-outs.


def coco_paths(coco_dir: str) -> tuple[str, str]:
    """(instances_train2017.json, train2017/) under `coco_dir`, checked to exist."""
    annotations = os.path.join(coco_dir, "annotations", "instances_train2017.json")
    images = os.path.join(coco_dir, "train2017")
    for path in (annotations, images):
        if not os.path.exists(path):
            raise MissingPathError(f"{path} does not exist; --coco_dir must hold MSCOCO 2017 "
                                   "annotations/instances_train2017.json and train2017/")
    return annotations, images


def load_coco(annotation_file: str) -> Any:
    """A pycocotools COCO index of `annotation_file` (its progress prints are silenced)."""
    from pycocotools.coco import COCO

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(annotation_file)
    except (ValueError, KeyError, TypeError, AssertionError) as error:
        raise UserError(f"{annotation_file} is not a COCO instances file: "
                        f"{type(error).__name__}: {error}") from None


def category_id(coco: Any, obj: str) -> int:
    """The one COCO category id of object folder `obj` (fix D1 of docs/bam.md, "The dataset
    layout")."""
    ids = coco.getCatIds(catNms=[COCO_NAMES[obj]])
    if len(ids) != 1:
        raise UserError(f"COCO category {COCO_NAMES[obj]!r} (folder {obj}) matches {len(ids)} "
                        "category ids; expected exactly one. Is this the instances file?")
    return ids[0]


def largest_annotation(coco: Any, image_id: int, cat_id: int) -> Optional[dict]:
    """The annotation of `cat_id` with the largest area in the image (first on a tie)."""
    best = None
    for ann in coco.loadAnns(coco.getAnnIds(imgIds=image_id, catIds=[cat_id], iscrowd=None)):
        if ann["category_id"] != cat_id:
            raise AssertionError(f"annotation {ann['id']} has category {ann['category_id']}, "
                                 f"not {cat_id}")
        if best is None or ann["area"] > best["area"]:
            best = ann
    return best


def crop_object(coco: Any, images_dir: str, image_info: dict,
                ann: Optional[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(crop RGB uint8, crop mask uint8 {0,1}) of `ann`, or `_Skip` for an image to skip."""
    if ann is None or not ann["area"] > 0:
        raise _Skip("area_0")
    path = os.path.join(images_dir, image_info["file_name"])
    if not os.path.isfile(path):
        raise MissingPathError(f"{path} is listed in the COCO annotations but does not exist")
    try:
        with Image.open(path) as image:
            if image.mode != "RGB":
                raise _Skip("non_rgb")
            rgb = np.asarray(image)
    except (OSError, SyntaxError) as error:
        raise UserError(f"{path} is not a readable image: {error}") from None
    mask = coco.annToMask(ann)
    if mask.shape != rgb.shape[:2]:
        raise UserError(f"{path} is {rgb.shape[1]}x{rgb.shape[0]} but its annotation says "
                        f"{mask.shape[1]}x{mask.shape[0]}; the annotation file does not match "
                        "the images")
    x, y, width, height = ann["bbox"]
    rows, cols = slice(int(y), int(y + height)), slice(int(x), int(x + width))
    crop_rgb, crop_mask = rgb[rows, cols], mask[rows, cols]
    if crop_mask.size == 0:
        raise _Skip("empty_crop")
    if not crop_mask.any():
        raise _Skip("empty_mask")
    return crop_rgb, crop_mask


def extract_class(coco: Any, images_dir: str, obj: str, output_dir: str, count: int,
                  num_train: int, progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """Writes `count` cut-outs of `obj` into `output_dir` (docs/bam.md, "The dataset layout");
    returns the report."""
    cat_id = category_id(coco, obj)
    accepted: list = []
    skipped: collections.Counter = collections.Counter()
    for image_id in sorted(coco.getImgIds(catIds=[cat_id])):
        if len(accepted) == count:
            break
        info = coco.loadImgs([image_id])[0]
        ann = largest_annotation(coco, image_id, cat_id)
        try:
            crop_rgb, crop_mask = crop_object(coco, images_dir, info, ann)
        except _Skip as skip:
            skipped[skip.args[0]] += 1
            continue
        png = os.path.splitext(info["file_name"])[0] + ".png"
        construction.write_bytes(os.path.join(output_dir, png), construction.encode_png(
            compositing.cutout_from_crop(crop_rgb, crop_mask)))
        accepted.append((png, info, ann))
        if progress:
            progress(len(accepted), count)
    if len(accepted) < count:
        raise UserError(f"only {len(accepted)} usable COCO images for {obj!r} (category "
                        f"{COCO_NAMES[obj]!r}); {count} are needed (skipped: {dict(skipped)})")
    accepted.sort(key=lambda entry: entry[0])
    dataset.write_lines(os.path.join(output_dir, "sources.txt"),
                        [f"{png} {info['id']} {ann['id']}" for png, info, ann in accepted])
    dataset.save_masks(os.path.join(output_dir, "val_mask"),
                       [crop_object(coco, images_dir, info, ann)[1]
                        for _, info, ann in accepted[num_train:]])
    report = {"coco_name": COCO_NAMES[obj], "category_id": int(cat_id),
              "accepted": len(accepted), "skipped": {r: skipped[r] for r in SKIP_REASONS}}
    write_json(os.path.join(output_dir, "extraction.json"), report, indent=2, sort_keys=True)
    return report


# ----------------------------------------------------------------------------------------------
# MiniPlaces scenes.


def scene_files(miniplaces_dir: str, count: int) -> dict:
    """{scene: [path of scene image i]} for i < count (sorted MiniPlaces train folders)."""
    root = os.path.join(miniplaces_dir, "images", "train")
    if not os.path.isdir(root):
        raise MissingPathError(f"{root} does not exist; --miniplaces_dir must hold MiniPlaces' "
                               "images/train/<letter>/<category>/")
    files = {}
    for scene in SCENE_CLASSES:
        folder = os.path.join(root, *MINIPLACES_CATEGORIES[scene].split("/"))
        names = dataset.sorted_files(folder)
        if len(names) < count:
            raise UserError(f"{folder} holds {len(names)} images; {count} are needed")
        files[scene] = [os.path.join(folder, name) for name in names[:count]]
    return files


def load_scene(path: str) -> np.ndarray:
    """A MiniPlaces scene as RGB, checked to be 128 x 128 (docs/bam.md, "The dataset layout")."""
    try:
        with Image.open(path) as image:
            scene = image.convert("RGB")
    except (OSError, SyntaxError) as error:
        raise UserError(f"{path} is not a readable image: {error}") from None
    if scene.size != (SCENE_SIZE, SCENE_SIZE):
        raise UserError(f"{path} is {scene.size[0]}x{scene.size[1]}; MiniPlaces scenes are "
                        f"{SCENE_SIZE}x{SCENE_SIZE}")
    return scene


# ----------------------------------------------------------------------------------------------
# The staged build.




def _read_json(path):
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


class _Stages:
    """Runs named stages once: a stage's outputs are cleared before it runs, and a marker file
    written after it succeeds makes a re-run skip it."""

    def __init__(self, layout):
        self.layout = layout
        os.makedirs(layout(".done"), exist_ok=True)

    def done(self, name):
        return os.path.isfile(self.layout(".done", name))

    def run(self, name, outputs, function):
        if self.done(name):
            return
        for output in outputs:
            _remove(self.layout(*output))
        function()
        with open(self.layout(".done", name), "w", encoding="utf-8") as handle:
            handle.write("done\n")


def dataset_config(seed: int, images_per_class: int, val_per_class: int) -> dict:
    """The parameters that define a build (a finished build is reused only if they match)."""
    return {"format": FORMAT, "seed": int(seed), "images_per_class": int(images_per_class),
            "val_per_class": int(val_per_class)}


def _check_arguments(images_per_class, val_per_class):
    if val_per_class < 1 or images_per_class <= val_per_class:
        raise UserError(f"--images_per_class ({images_per_class}) must exceed --val_per_class "
                        f"({val_per_class}), which must be at least 1")
    if images_per_class > 10000:
        raise UserError("--images_per_class must be at most 10000 (4-digit file names)")


def build_dataset(coco_dir: str, miniplaces_dir: str, output_dir: str = "data", seed: int = 0,
                  images_per_class: int = 1000, val_per_class: int = 100,
                  progress: Optional[Callable[[str, int, int], None]] = None,
                  overwrite: bool = False) -> dict:
    """Builds BAM from MSCOCO and MiniPlaces into `output_dir`; returns the dataset's info.

    `progress(stage, done, total)` reports the long stages. A finished build with the same
    parameters is kept (`info["reused"]`); an interrupted one resumes at its first unfinished
    stage. `overwrite` replaces existing outputs.
    """
    _check_arguments(images_per_class, val_per_class)
    config = dataset_config(seed, images_per_class, val_per_class)
    num_train = images_per_class - val_per_class
    info_path = os.path.join(output_dir, INFO_FILE)
    staging = os.path.join(output_dir, STAGING)
    existing = _read_json(info_path)
    if overwrite:
        _remove(staging)
        _remove(info_path)
    elif reused := construction.check_reusable(existing, config, output_dir, "a BAM dataset"):
        return reused
    layout = construction.Layout(staging)
    _check_staging(layout, staging, output_dir, config, overwrite)
    annotation_file, images_dir = coco_paths(coco_dir)
    scenes = scene_files(miniplaces_dir, images_per_class)
    started = time.time()
    os.makedirs(staging, exist_ok=True)
    write_json(layout("config.json"), config, indent=2, sort_keys=True)
    stages = _Stages(layout)
    report = progress or (lambda stage, done, total: None)

    coco = None
    for obj in OBJECT_CLASSES:
        def extract(obj=obj):
            nonlocal coco
            if coco is None:
                coco = load_coco(annotation_file)
                for each in OBJECT_CLASSES:  # every lookup checked before any work
                    category_id(coco, each)
            folder = layout("coco", "segments", obj)
            os.makedirs(folder)
            extract_class(coco, images_dir, obj, folder, images_per_class, num_train,
                          lambda done, total: report(f"cut-outs {obj}", done, total))
        stages.run(f"segments_{obj}", [("coco", "segments", obj)], extract)
    coco = None  # free the annotation index before compositing

    def composites():
        cutouts = {obj: [layout("coco", "segments", obj, name) for name in
                         dataset.sorted_files(layout("coco", "segments", obj), (".png",))]
                   for obj in OBJECT_CLASSES}

        def instance(index):
            return ([construction.load_rgba(cutouts[obj][index]) for obj in OBJECT_CLASSES],
                    [load_scene(scenes[scene][index]) for scene in SCENE_CLASSES])

        images = construction.write_composites(
            layout, instance, seed, SCENE_SIZE, num_train, images_per_class,
            lambda done, total: report("composites", done, total))
        val_masks = [dataset.load_masks(layout("coco", "segments", obj, "val_mask"))
                     for obj in OBJECT_CLASSES]
        construction.write_split_metadata(layout, images, val_masks)
    stages.run("composites", [("obj",), ("scene",), ("scene_only",)], composites)
    stages.run("dog_sets", [("dog_bedroom",), ("bamboo_forest",)],
               lambda: construction.write_dog_sets(layout, val_per_class))
    stages.run("tcav", [("tcav",)], lambda: construction.write_tcav_sets(layout, seed))
    for k, name in enumerate(construction.RELATIVE_SETS, start=1):
        stages.run(name, [(name,)], lambda k=k: construction.write_relative_set(layout, k))

    extraction = {obj: _read_json(layout("coco", "segments", obj, "extraction.json"))
                  for obj in OBJECT_CLASSES}
    info = dict(config, object_classes=list(OBJECT_CLASSES), scene_classes=list(SCENE_CLASSES),
                coco_annotations=os.path.abspath(annotation_file),
                miniplaces_dir=os.path.abspath(miniplaces_dir), extraction=extraction,
                num_train_images=len(OBJECT_CLASSES) * len(SCENE_CLASSES) * num_train,
                num_val_images=len(OBJECT_CLASSES) * len(SCENE_CLASSES) * val_per_class,
                relative_sets={name: list(construction.relative_dog_classes(k)) for k, name in
                               enumerate(construction.RELATIVE_SETS, start=1)})
    _publish(layout, staging, output_dir, info_path, info)
    return dict(info, reused=False, seconds=time.time() - started)


def _check_staging(layout: Any, staging: str, output_dir: str, config: dict,
                   overwrite: bool) -> None:
    """Refuses an unfinished build of other parameters in `staging`, and outputs already in
    `output_dir` (removed with `overwrite`) unless an interrupted build was moving them."""
    partial = _read_json(layout("config.json"))
    if partial is not None and partial != config:
        raise UserError(f"{staging} holds an unfinished build with other parameters ({partial}); "
                        "re-run with those, pass --overwrite, or delete it")
    moving = os.path.isfile(layout(".done", "move"))
    for output in OUTPUTS:
        target = os.path.join(output_dir, *output)
        if os.path.exists(target) and not moving:
            if not overwrite:
                raise UserError(f"{target} already exists; choose another --output_dir or pass "
                                "--overwrite to replace it")
            _remove(target)


def _publish(layout: Any, staging: str, output_dir: str, info_path: str, info: dict) -> None:
    """Moves the finished outputs from `staging` into `output_dir` (a marker first, so an
    interrupted move resumes), then writes the info file and removes the staging folder."""
    with open(layout(".done", "move"), "w", encoding="utf-8") as handle:
        handle.write("moving\n")
    for output in OUTPUTS:
        source, target = layout(*output), os.path.join(output_dir, *output)
        if os.path.exists(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
    write_json(info_path, info, indent=2, sort_keys=True)
    shutil.rmtree(staging)
