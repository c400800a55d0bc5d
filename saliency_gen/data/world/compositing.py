"""BAM's pasting rule (docs/bam.md, "The dataset layout", pasting rule): size, position and
compositing of an object cut-out.

Every composite draws from its own generator `default_rng([seed, label(o), label(s), i])`, in
the order size, row, col, so results do not depend on parallelism or loop order. The rule is
stated for S = 128 and scales with the image size S:

* the longer side (the width if w/S > h/S strictly) becomes
  U{floor(S/sqrt 3) .. floor(S/sqrt 2) - 1} and the other side keeps the aspect ratio (floored, at
  least 1 px);
* row ~ U{0 .. S - new_h - 1}, col ~ U{0 .. S - new_w - 1};
* the RGBA cut-out is PIL-bilinear resized and pasted with its own alpha as mask.
"""
import math
from typing import Any

import numpy as np
from PIL import Image

from models.foundation.errors import UserError


def placement_rng(seed: int, object_label: int, scene_label: int,
                  index: int) -> np.random.Generator:
    """The generator for one composite (fix D2, docs/bam.md, "The dataset layout")."""
    return np.random.default_rng([seed, object_label, scene_label, index])


def draw_placement(rng: np.random.Generator, image_size: int, cut_width: int,
                   cut_height: int) -> tuple:
    """(new_w, new_h, row, col) for a cut-out of `cut_width` x `cut_height` on an S x S scene."""
    size = image_size
    low, high = int(size / math.sqrt(3)), int(size / math.sqrt(2))
    if cut_width <= 0 or cut_height <= 0:
        raise UserError(f"an object cut-out has an empty side ({cut_width}x{cut_height})")
    if cut_width / size > cut_height / size:
        new_w = int(rng.integers(low, high))
        new_h = max(1, new_w * cut_height // cut_width)
    else:
        new_h = int(rng.integers(low, high))
        new_w = max(1, new_h * cut_width // cut_height)
    row = int(rng.integers(0, size - new_h))
    col = int(rng.integers(0, size - new_w))
    return new_w, new_h, row, col


def cutout_from_crop(crop_rgb: Any, crop_mask: Any) -> Image.Image:
    """BAM's RGBA cut-out: RGB * mask, alpha 0 where the result is exactly black, else 255."""
    rgb = np.asarray(crop_rgb, np.uint8) * (np.asarray(crop_mask) != 0)[..., None].astype(np.uint8)
    alpha = np.where(rgb.any(axis=-1), 255, 0).astype(np.uint8)
    return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")


def paste(scene: Image.Image, cutout: Image.Image, placement: tuple) -> tuple:
    """(composite RGB image, box (r0, c0, r1, c1)) for an RGBA `cutout` pasted on `scene`.

    `scene` (PIL RGB) is not modified; it is the scene-only image.
    """
    new_w, new_h, row, col = placement
    resized = cutout.resize((new_w, new_h), Image.BILINEAR)
    composite = scene.copy()
    composite.paste(resized, (col, row), resized)
    return composite, (row, col, row + new_h, col + new_w)
