"""BAM's on-disk dataset layout (docs/bam.md, "The dataset layout"): class names, file names,
metadata files and masks.

Shared by the synthetic world, the real MSCOCO/MiniPlaces construction and every reader, so the
formats are defined once:

* `val.txt`: `<file name> <label>` per line, sorted, newline-terminated (a missing final newline
  is accepted when reading);
* `val_loc.txt` / `loc.txt`: `<file name> r0,c0,r1,c1` (end exclusive, image pixels);
* `val_mask`: `.npy` content without suffix, a 1-D object array of 2-D uint8 {0,1} crop masks at
  the object's native resolution (read without unpickling code: `models.formats.object_arrays`).
"""
import os
from typing import Iterable, Optional, Sequence

import numpy as np
from PIL import Image

from models.formats.object_arrays import load_object_array
from models.formats.preprocessing import input_space, load_bam_pixels
from models.foundation.errors import MissingPathError, UserError
from models.foundation.files import atomic_output

OBJECT_CLASSES = ("backpack", "bird", "dog", "elephant", "kite", "pizza", "stop_sign", "toilet",
                  "truck", "zebra")
SCENE_CLASSES = ("bamboo_forest", "bedroom", "bowling_alley", "bus_interior", "cockpit",
                 "corn_field", "laundromat", "runway", "ski_slope", "track")
OBJECT_LABEL = {name: label for label, name in enumerate(OBJECT_CLASSES)}
SCENE_LABEL = {name: label for label, name in enumerate(SCENE_CLASSES)}

# The roles the metrics need: the dog is the object of dog_bedroom and bamboo_forest.
DOG, BEDROOM, BAMBOO_FOREST = "dog", "bedroom", "bamboo_forest"


def image_name(obj: str, scene: str, index: int) -> str:
    """`<obj>-<scene>-<index:04d>.jpg`, identical in obj, scene and scene_only."""
    return f"{obj}-{scene}-{index:04d}.jpg"


def parse_image_name(name: str) -> tuple[str, str, int]:
    """(object, scene, index) from a name made by `image_name` (any extension, optional suffix)."""
    stem = os.path.splitext(os.path.basename(name))[0]
    parts = stem.split("-")
    if len(parts) < 3 or parts[0] not in OBJECT_LABEL or parts[1] not in SCENE_LABEL:
        raise UserError(f"{name} is not a BAM image name <object>-<scene>-<nnnn>")
    return parts[0], parts[1], int(parts[2].split("_")[0])


# ----------------------------------------------------------------------------------------------
# Metadata files.


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Writes text lines, newline-terminated, atomically."""
    with atomic_output(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.writelines(f"{line}\n" for line in lines)


def _read_pairs(path):
    if not os.path.isfile(path):
        raise MissingPathError(f"{path} does not exist; build the dataset first")
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise UserError(f"{path}:{number}: expected '<file name> <value>', got {line!r}")
        pairs.append(tuple(fields))
    return pairs


def write_labels(path: str, entries: Iterable[tuple[str, int]]) -> None:
    """`val.txt`: entries of (file name, label), written sorted by name."""
    write_lines(path, [f"{name} {int(label)}" for name, label in sorted(entries)])


def read_labels(path: str) -> list:
    """[(file name, label)] from a `val.txt`, in file order."""
    try:
        return [(name, int(label)) for name, label in _read_pairs(path)]
    except ValueError:
        raise UserError(f"{path}: a label is not an integer") from None


def format_box(box: Sequence[int]) -> str:
    return ",".join(str(int(v)) for v in box)


def write_locations(path: str, entries: Iterable[tuple[str, Sequence[int]]]) -> None:
    """`val_loc.txt` / `loc.txt`: entries of (file name, (r0, c0, r1, c1)), sorted by name."""
    write_lines(path, [f"{name} {format_box(box)}" for name, box in sorted(entries)])


def read_locations(path: str) -> list:
    """[(file name, (r0, c0, r1, c1))] from a `val_loc.txt`, in file order."""
    entries = []
    for name, box in _read_pairs(path):
        values = box.split(",")
        if len(values) != 4 or not all(v.lstrip("-").isdigit() for v in values):
            raise UserError(f"{path}: box of {name} is {box!r}; expected r0,c0,r1,c1")
        entries.append((name, tuple(int(v) for v in values)))
    return entries


def save_masks(path: str, masks: Sequence[np.ndarray]) -> None:
    """Saves 2-D uint8 {0,1} masks as BAM's `val_mask` (object array, no `.npy` suffix)."""
    array = np.empty(len(masks), dtype=object)
    for index, mask in enumerate(masks):
        mask = np.asarray(mask)
        if mask.ndim != 2:
            raise UserError(f"mask {index} for {path} is not 2-D (shape {mask.shape})")
        array[index] = (mask != 0).astype(np.uint8)
    with atomic_output(path) as temporary:
        with open(temporary, "wb") as handle:  # a handle, so numpy adds no ".npy"
            np.save(handle, array, allow_pickle=True)


def load_masks(path: str) -> list:
    """The list of 2-D uint8 masks in a `val_mask` file."""
    if not os.path.isfile(path):
        raise MissingPathError(f"{path} does not exist; build the dataset first")
    masks = load_object_array(path)
    for index, mask in enumerate(masks):
        if mask.ndim != 2:
            raise UserError(f"{path}: mask {index} is not 2-D (shape {mask.shape})")
    return masks


# ----------------------------------------------------------------------------------------------
# Boxes and masks at the model's resolution (docs/bam.md, "Region score", steps 3-4).


def scale_box(box: Sequence[int], image_size: int, target_size: int) -> tuple:
    """A box (r0, c0, r1, c1) in `image_size` pixels scaled to `target_size`, each value floored."""
    return tuple(int(v) * target_size // image_size for v in box)


def mask_in_box(mask: np.ndarray, height: int, width: int) -> np.ndarray:
    """The crop mask resized to the box with PIL bilinear on uint8 {0,1}: still {0,1}.

    This is the one mask routine for scoring, patches and record masks, so all use the same pixels.
    """
    if height <= 0 or width <= 0:
        raise UserError(f"empty box ({height}x{width}) for a mask")
    resized = Image.fromarray(np.asarray(mask, np.uint8)).resize((width, height), Image.BILINEAR)
    return np.asarray(resized, np.uint8)


def mask_in_frame(mask: np.ndarray, box: Sequence[int], frame_size: int) -> np.ndarray:
    """A `frame_size` x `frame_size` uint8 {0,1} mask with the object's mask placed in `box`."""
    r0, c0, r1, c1 = box
    frame = np.zeros((frame_size, frame_size), np.uint8)
    frame[r0:r1, c0:c1] = mask_in_box(mask, r1 - r0, c1 - c0)
    return frame


# ----------------------------------------------------------------------------------------------
# Listings.


def load_pixels(paths: Sequence[str], size: Optional[int] = None) -> np.ndarray:
    """uint8 [N, size, size, 3] of the images at `paths`, BAM geometry (PIL bilinear)."""
    return np.stack([load_bam_pixels(path, size) for path in paths])


def model_inputs(paths: Sequence[str], size: int, preprocessing: str) -> np.ndarray:
    """Model inputs [N, size, size, 3] of the images at `paths` in the input space named by
    `preprocessing` (BAM geometry, then the model's normalisation)."""
    return input_space(preprocessing).from_uint8(load_pixels(paths, size))


def sorted_files(directory: str, suffixes: tuple = (".jpg", ".jpeg", ".png")) -> list:
    """Sorted file names in `directory` with one of `suffixes` (BAM sorts every listing)."""
    if not os.path.isdir(directory):
        raise MissingPathError(f"directory {directory} does not exist; build the dataset first")
    return sorted(name for name in os.listdir(directory) if name.lower().endswith(suffixes))


def train_listing(dataset_dir: str) -> list:
    """[(path, label)] of `<dataset>/train/<class>/*`, classes labelled in sorted folder order."""
    root = os.path.join(dataset_dir, "train")
    if not os.path.isdir(root):
        raise MissingPathError(f"{root} does not exist; build the dataset first")
    classes = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))
    return [(os.path.join(root, name, file), label)
            for label, name in enumerate(classes)
            for file in sorted_files(os.path.join(root, name))]


def val_listing(dataset_dir: str) -> list:
    """[(path, label)] of `<dataset>/val/` in `val.txt` order (sorted by file name)."""
    return [(os.path.join(dataset_dir, "val", name), label)
            for name, label in read_labels(os.path.join(dataset_dir, "val.txt"))]
