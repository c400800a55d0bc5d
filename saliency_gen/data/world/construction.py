"""Writing BAM's on-disk layout (docs/bam.md, "The dataset layout") from object cut-outs and scene
images.

One writer for both worlds: the procedural synthetic world (`bam.synthetic`) and the real
MSCOCO + MiniPlaces build (`bam.coco_miniplaces`). A world supplies, per instance index i, the
10 RGBA cut-outs (label order) and the 10 RGB scene images of size S; this module pastes them
(`bam.compositing`), writes obj / scene / scene_only with their metadata, and derives the
evaluation sets (dog_bedroom, bamboo_forest), the TCAV folders and the relative sets
scene1..scene10 from the files already written. Instances i < T are train, T <= i < T + V val.

Derived sets hard-link their images to the composites when the file system allows it (the bytes
are identical and never modified in place), and copy them otherwise.
"""
import collections
import io
import os
import random
import shutil
from typing import Callable, Optional, Sequence

from PIL import Image

from models.foundation.errors import UserError
from saliency_gen.data.world import compositing, dataset
from saliency_gen.data.world.dataset import OBJECT_CLASSES, SCENE_CLASSES, SCENE_LABEL

TCAV_SET_SIZE = 100

# Dog order of the relative sets (docs/bam.md, "The dataset layout", relative sets): bedroom first,
# then the others in label order.
RELATIVE_DOG_ORDER = (dataset.BEDROOM,) + tuple(s for s in SCENE_CLASSES if s != dataset.BEDROOM)
RELATIVE_SETS = tuple(f"scene{k}" for k in range(1, len(SCENE_CLASSES) + 1))

# One composite: its file name, labels, instance index, box (r0, c0, r1, c1), split and JPEG bytes
# (None unless the writer was asked to keep them).
Composite = collections.namedtuple(
    "Composite", "name object_label scene_label index box is_val jpeg")


class Layout:
    """Paths under a dataset root: `layout("obj", "val")` -> `<root>/obj/val`."""

    def __init__(self, root: str):
        self.root = root

    def __call__(self, *parts):
        return os.path.join(self.root, *parts)


def encode_jpeg(image: Image.Image) -> bytes:
    """PIL JPEG with default settings (quality 75), as the original writes every image."""
    buffer = io.BytesIO()
    image.save(buffer, "JPEG")
    return buffer.getvalue()


def encode_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def check_reusable(existing: Optional[dict], config: dict, output_dir: str,
                   what: str) -> Optional[dict]:
    """`existing` (a finished build's info, or None) marked reused if its parameters equal
    `config`; None if there is none; a UserError naming `output_dir` if they differ."""
    if existing is None:
        return None
    found = {key: existing.get(key) for key in config}
    if found == config:
        return dict(existing, reused=True)
    raise UserError(f"{output_dir} holds {what} with other parameters ({found}); choose "
                    "another --output_dir or pass --overwrite")


def link_or_copy(source: str, target: str) -> None:
    """Hard-links `target` to `source`, or copies it where links are not possible."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


# ----------------------------------------------------------------------------------------------
# obj, scene and scene_only.


def _make_split_dirs(layout):
    for obj in OBJECT_CLASSES:
        os.makedirs(layout("obj", "train", obj), exist_ok=True)
    for scene in SCENE_CLASSES:
        os.makedirs(layout("scene", "train", scene), exist_ok=True)
        os.makedirs(layout("scene_only", "train", scene), exist_ok=True)
    for folder in ("obj", "scene", "scene_only"):
        os.makedirs(layout(folder, "val"), exist_ok=True)


def write_composites(layout: "Layout", instance: Callable, seed: int, image_size: int,
                     num_train: int, num_instances: int, progress: Optional[Callable] = None,
                     keep_jpeg: bool = False) -> list:
    """Pastes every object instance into every scene image and writes obj, scene, scene_only.

    `instance(i)` returns (10 RGBA cut-outs, 10 RGB scene images of `image_size`), both in label
    order. Returns the list of `Composite`s in writing order. `progress(done, total)` is called
    after each instance.
    """
    _make_split_dirs(layout)
    images = []
    for index in range(num_instances):
        cutouts, scenes = instance(index)
        is_val = index >= num_train
        scene_bytes = [encode_jpeg(scene) for scene in scenes]
        for o, (obj, cutout) in enumerate(zip(OBJECT_CLASSES, cutouts)):
            for s, scene_name in enumerate(SCENE_CLASSES):
                placement = compositing.draw_placement(
                    compositing.placement_rng(seed, o, s, index), image_size, *cutout.size)
                composite, box = compositing.paste(scenes[s], cutout, placement)
                name = dataset.image_name(obj, scene_name, index)
                data = encode_jpeg(composite)
                if is_val:
                    targets = [layout("obj", "val", name), layout("scene", "val", name)]
                    only = layout("scene_only", "val", name)
                else:
                    targets = [layout("obj", "train", obj, name),
                               layout("scene", "train", scene_name, name)]
                    only = layout("scene_only", "train", scene_name, name)
                for target in targets:
                    write_bytes(target, data)
                write_bytes(only, scene_bytes[s])
                images.append(Composite(name, o, s, index, box, is_val,
                                        data if keep_jpeg else None))
        if progress:
            progress(index + 1, num_instances)
    return images


def write_split_metadata(layout: "Layout", images: Sequence, val_masks: Sequence) -> None:
    """val.txt, val_loc.txt, val_mask and loc.txt of obj, scene and scene_only.

    `val_masks[o]` holds object o's crop masks of the val instances, in index order; the shared
    val_mask is them for the 10 classes in label order (the mask index rule, docs/bam.md, "The
    dataset layout").
    """
    val = [image for image in images if image.is_val]
    shared = [mask for o in range(len(OBJECT_CLASSES)) for mask in val_masks[o]]
    for folder, label_of in (("obj", "object_label"), ("scene", "scene_label"),
                             ("scene_only", "scene_label")):
        dataset.write_labels(layout(folder, "val.txt"),
                             [(im.name, getattr(im, label_of)) for im in val])
        dataset.write_locations(layout(folder, "val_loc.txt"), [(im.name, im.box) for im in val])
        dataset.write_locations(layout(folder, "loc.txt"), [(im.name, im.box) for im in images])
        dataset.save_masks(layout(folder, "val_mask"), shared)


# ----------------------------------------------------------------------------------------------
# Sets derived from the files written above.


def _dog_masks(layout):
    return dataset.load_masks(layout("coco", "segments", dataset.DOG, "val_mask"))


def write_dog_sets(layout: "Layout", num_val: int) -> None:
    """dog_bedroom (composites, label bedroom) and bamboo_forest (scene only, label 0).

    Each holds exactly `num_val` images; the k-th in sorted order uses the dog's val mask k.
    """
    dog_masks = _dog_masks(layout)
    for folder, source, scene in (("dog_bedroom", "scene", dataset.BEDROOM),
                                  ("bamboo_forest", "scene_only", dataset.BAMBOO_FOREST)):
        prefix = f"{dataset.DOG}-{scene}-"
        chosen = [(name, box) for name, box in
                  dataset.read_locations(layout(source, "val_loc.txt")) if name.startswith(prefix)]
        if len(chosen) != num_val or len(dog_masks) != num_val:
            raise AssertionError(f"{folder} would hold {len(chosen)} images and "
                                 f"{len(dog_masks)} masks; expected {num_val}")
        os.makedirs(layout(folder, "val"), exist_ok=True)
        for name, _ in chosen:
            link_or_copy(layout(source, "val", name), layout(folder, "val", name))
        dataset.write_labels(layout(folder, "val.txt"),
                             [(name, SCENE_LABEL[scene]) for name, _ in chosen])
        dataset.write_locations(layout(folder, "val_loc.txt"), chosen)
        dataset.save_masks(layout(folder, "val_mask"), dog_masks)


def write_tcav_sets(layout: "Layout", seed: int) -> None:
    """The TCAV folders (docs/bam.md, "The dataset layout"), drawn with `random.Random(seed)` from
    sorted listings."""
    draw = random.Random(seed)
    scene_val = dataset.sorted_files(layout("scene", "val"))
    only_val = dataset.sorted_files(layout("scene_only", "val"))
    dog_images = [name for name in scene_val if name.startswith(f"{dataset.DOG}-")]
    dog_scene = draw.sample(dog_images, min(TCAV_SET_SIZE, len(dog_images)))
    randoms = draw.sample(only_val, min(2 * TCAV_SET_SIZE, len(only_val)))
    half = len(randoms) // 2
    counterpart = draw.sample(only_val, min(TCAV_SET_SIZE, len(only_val)))
    sets = {
        "dog_bedroom": [("dog_bedroom", name) for name in
                        dataset.sorted_files(layout("dog_bedroom", "val"))],
        "dog_scene": [("scene", name) for name in dog_scene],
        "random500_0": [("scene_only", name) for name in randoms[:half]],
        "random500_1": [("scene_only", name) for name in randoms[half:]],
        "random_counter_part": [("scene_only", name) for name in counterpart],
    }
    for folder, members in sets.items():
        os.makedirs(layout("tcav", folder))
        for source, name in members:
            link_or_copy(layout(source, "val", name), layout("tcav", folder, name))
    rename = {dataset.DOG: "dog_bedroom", dataset.BEDROOM: "dog_bedroom"}
    dataset.write_lines(layout("tcav", "obj_categories.txt"),
                        [f"{rename.get(n, n)} {label}" for label, n in enumerate(OBJECT_CLASSES)])
    dataset.write_lines(layout("tcav", "scene_categories.txt"),
                        [f"{rename.get(n, n)} {label}" for label, n in enumerate(SCENE_CLASSES)])


def relative_dog_classes(k: int) -> tuple:
    """D_k: the scene classes that show the dog in the relative set scene<k>."""
    if not 1 <= k <= len(RELATIVE_DOG_ORDER):
        raise ValueError(f"relative sets are scene1..scene{len(RELATIVE_DOG_ORDER)}; got {k}")
    return RELATIVE_DOG_ORDER[:k]


def write_relative_set(layout: "Layout", k: int) -> None:
    """scene<k> (docs/bam.md, "The dataset layout", relative sets): `dog-<c>-<n>` from scene if c is
    in D_k, else from scene_only.

    Train images go to `scene<k>/train/<c>/`, val images to `scene<k>/val/` with val.txt (scene
    labels), val_loc.txt (where the dog is or would be), val_mask (the dog's masks, aligned by
    sorted order) and dog_classes.txt (D_k, one class per line).
    """
    dog_classes = relative_dog_classes(k)
    root = f"scene{k}"
    val_names = set(dataset.sorted_files(layout("scene", "val")))
    dog_masks = _dog_masks(layout)
    os.makedirs(layout(root, "val"))
    val_entries = []
    for name, box in dataset.read_locations(layout("scene", "loc.txt")):
        obj, scene, _ = dataset.parse_image_name(name)
        if obj != dataset.DOG:
            continue
        source = "scene" if scene in dog_classes else "scene_only"
        if name in val_names:
            link_or_copy(layout(source, "val", name), layout(root, "val", name))
            val_entries.append((name, box))
        else:
            os.makedirs(layout(root, "train", scene), exist_ok=True)
            link_or_copy(layout(source, "train", scene, name), layout(root, "train", scene, name))
    val_entries.sort()
    dataset.write_labels(layout(root, "val.txt"),
                         [(name, SCENE_LABEL[dataset.parse_image_name(name)[1]])
                          for name, _ in val_entries])
    dataset.write_locations(layout(root, "val_loc.txt"), val_entries)
    if len(val_entries) != len(SCENE_CLASSES) * len(dog_masks):
        raise AssertionError(f"{root} has {len(val_entries)} val images for "
                             f"{len(dog_masks)} dog masks per class")
    dataset.save_masks(layout(root, "val_mask"), [dog_masks[position % len(dog_masks)]
                                                  for position in range(len(val_entries))])
    dataset.write_lines(layout(root, "dog_classes.txt"), dog_classes)


def load_rgba(path: str) -> Image.Image:
    """A cut-out PNG as a loaded RGBA image (the original reads cut-outs back this way)."""
    with Image.open(path) as image:
        return image.convert("RGBA")
