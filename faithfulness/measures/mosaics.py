"""Focus's mosaics from a binary's images (docs/measures.md, "Localisation"): each image of a
group becomes a mosaic of four images shrunk to its quadrants, at the image's own size so the
model takes it: the image itself and the next image of the group with its label (itself
where none has), and the next two with another label (cyclically, in the group's order; a
group with a single label gives no mosaic: NaN). Which quadrants the two of the explained
class take is drawn from a key (seed, image id), so a run is reproducible.
"""
from typing import Any

import numpy as np
import tensorflow as tf

from faithfulness import substrates
from models.foundation.metric_spec import Group

MOSAIC_SALT = 0xF0C5  # the quadrants' draws, apart from the others of a seed


def _next_with(labels: np.ndarray, same: bool) -> np.ndarray:
    """int [n, 2]: per image, the first two images after it (cyclically) whose label is
    (`same`) or is not its own; -1 where there are none (the second repeats the first where
    only one is)."""
    count = len(labels)
    offsets = (np.arange(count)[:, None] + np.arange(1, count + 1)[None]) % count  # [n, n]
    wanted = (labels[offsets] == labels[:, None]) == same
    wanted[:, -1] = False  # the last offset is the image itself
    order = np.argsort(~wanted, axis=1, kind="stable")[:, :2]
    found = np.take_along_axis(wanted, order, axis=1)
    chosen = np.take_along_axis(offsets, order, axis=1)
    if chosen.shape[1] == 1:  # a group of one image
        chosen, found = np.repeat(chosen, 2, axis=1), np.repeat(found, 2, axis=1)
    chosen[:, 1] = np.where(found[:, 1], chosen[:, 1], chosen[:, 0])
    return np.where(found[:, :1], chosen, -1)


def mosaics(images: np.ndarray, labels: np.ndarray, ids: np.ndarray,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(mosaics float32 [n, H, W, C], quadrants int [n, 4]: 1 where the explained class is;
    rows of -1 where the group has no other label)."""
    labels = np.asarray(labels)
    partner = _next_with(labels, same=True)[:, 0]
    partner = np.where(partner < 0, np.arange(len(labels)), partner)
    others = _next_with(labels, same=False)
    usable = others[:, 0] >= 0
    members = np.stack([np.arange(len(labels)), partner, *np.maximum(others, 0).T], axis=1)
    keys = substrates.noise_keys(seed, ids, salt=MOSAIC_SALT)
    places = np.argsort(np.asarray(substrates.uniform_noise(keys, [4])), axis=1)
    tiles = np.take_along_axis(members, places, axis=1)  # [n, 4]: the image of each quadrant
    quadrants = (places < 2).astype(np.int64)  # members 0, 1 are of the explained class
    height, width = images.shape[1:3]
    rows = (height // 2, height - height // 2)
    cols = (width // 2, width - width // 2)
    parts = [[tf.image.resize(images[tiles[:, 2 * row + col]], (rows[row], cols[col]),
                              method="area") for col in range(2)] for row in range(2)]
    mosaic = tf.concat([tf.concat(parts[row], axis=2) for row in range(2)], axis=1)
    return (np.asarray(mosaic, np.float32),
            np.where(usable[:, None], quadrants, -1))


def focus_of_group(function: Any, group: Group, settings: dict, seed: int) -> np.ndarray:
    """focus on the mosaics of `group`'s images, explained by the group's explainer: [n],
    NaN where the group has no image of another label."""
    mosaic, quadrants = mosaics(np.asarray(group.images), group.labels, group.ids, seed)
    usable = quadrants[:, 0] >= 0
    maps = group.explain(mosaic, group.labels, group.ids)
    values = function(group.loaded, mosaic, group.labels, maps,
                      custom_batch=np.maximum(quadrants, 0), **settings)
    return np.where(usable, values, np.nan)
