"""A procedural BAM world: 10 drawn object classes pasted into 10 drawn scene classes.

It stands in for MSCOCO cut-outs and MiniPlaces scenes so that every benchmark runs on a fresh
machine without a download. Objects are drawn at their own ("COCO") resolution with an exact mask;
scenes are drawn at the image size S; both vary per instance (colours, proportions, positions,
noise). Everything is drawn from generators keyed by (seed, stream, label, index), so the world is
a pure function of its parameters: the same seed gives byte-identical files.

`build_world(output_dir, seed, ...)` writes BAM's layout (docs/synthetic_world.md; obj, scene,
scene_only, dog_bedroom, bamboo_forest, coco/segments, tcav) plus image TFRecords of the composites.
With `train_per_pair` = T and `val_per_pair` = V, instance i of every object and scene image i of
every scene class exist for i < T + V; i < T is train and i >= T is val (the real dataset has T =
900, V = 100). The directory is built under a temporary name and renamed when complete; `world.json`
describes it.
"""
import json
import math
import os
import time
from typing import Callable, Optional

import numpy as np
from PIL import Image, ImageDraw

from models.foundation.errors import UserError
from models.foundation.files import atomic_output
from saliency_gen.data import records
from saliency_gen.data.world import compositing, construction, dataset
from saliency_gen.data.world.dataset import OBJECT_CLASSES, SCENE_CLASSES

FORMAT = "bam-synthetic/v1"
OBJECT_STREAM, SCENE_STREAM = 1001, 1002  # distinct from the placement seeds [seed, o, s, i]
RECORDS_PER_SHARD = 2500


# ----------------------------------------------------------------------------------------------
# Drawing helpers.


def _jitter(rng, colour, amount=25):
    values = np.asarray(colour, float) + rng.uniform(-amount, amount, 3)
    return tuple(int(v) for v in np.clip(values, 1, 255))


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


class _Painter:
    """Draws on an RGB canvas and, optionally, its object mask, in unit coordinates."""

    def __init__(self, width, height, background=(0, 0, 0), with_mask=False):
        self.width, self.height = width, height
        self.image = Image.new("RGB", (width, height), background)
        self.draw = ImageDraw.Draw(self.image)
        self.mask = Image.new("L", (width, height), 0) if with_mask else None
        self.mask_draw = ImageDraw.Draw(self.mask) if with_mask else None

    def _xy(self, points):
        return [(x * self.width, y * self.height) for x, y in points]

    def _box(self, box):
        x0, y0, x1, y1 = box
        left, top = x0 * self.width, y0 * self.height
        # At small image sizes a thin part can be under a pixel wide: draw it one pixel wide.
        return [left, top, max(left, x1 * self.width - 1), max(top, y1 * self.height - 1)]

    def _do(self, method, shape, colour, solid, **kwargs):
        getattr(self.draw, method)(shape, fill=colour, **kwargs)
        if solid and self.mask_draw is not None:
            getattr(self.mask_draw, method)(shape, fill=1, **kwargs)

    def rect(self, box, colour, solid=True):
        self._do("rectangle", self._box(box), colour, solid)

    def rounded(self, box, radius, colour, solid=True):
        self._do("rounded_rectangle", self._box(box), colour, solid,
                 radius=radius * min(self.width, self.height))

    def ellipse(self, box, colour, solid=True):
        self._do("ellipse", self._box(box), colour, solid)

    def polygon(self, points, colour, solid=True):
        self._do("polygon", self._xy(points), colour, solid)

    def line(self, points, colour, width, solid=True):
        self._do("line", self._xy(points), colour, solid,
                 width=max(1, int(round(width * min(self.width, self.height)))))

    def arrays(self):
        rgb = np.asarray(self.image, np.uint8)
        if self.mask is None:
            return rgb
        return rgb, np.asarray(self.mask, np.uint8)


# ----------------------------------------------------------------------------------------------
# Objects: each returns a drawn painter; `render_object` adds size, aspect and the mask.

ASPECTS = {  # height / width of the object's own canvas
    "backpack": 1.25, "bird": 0.8, "dog": 0.8, "elephant": 0.85, "kite": 1.3, "pizza": 1.0,
    "stop_sign": 1.45, "toilet": 1.3, "truck": 0.6, "zebra": 0.8,
}


def _backpack(p, rng):
    body = _jitter(rng, _pick(rng, [(40, 60, 150), (170, 40, 40), (90, 110, 40), (110, 50, 140)]))
    p.line([(0.35, 0.22), (0.4, 0.04), (0.6, 0.04), (0.65, 0.22)], body, 0.08)
    p.rounded((0.08, 0.18, 0.92, 1.0), 0.22, body)
    pocket = tuple(min(255, c + 60) for c in body)
    p.rounded((0.24, 0.56, 0.76, 0.9), 0.1, pocket, solid=False)
    p.line([(0.24, 0.62), (0.76, 0.62)], (230, 220, 60), 0.04, solid=False)


def _bird(p, rng):
    body = _jitter(rng, _pick(rng, [(230, 200, 40), (60, 120, 220), (200, 50, 50)]))
    p.polygon([(0.0, 0.42), (0.25, 0.55), (0.0, 0.72)], tuple(c // 2 + 20 for c in body))
    p.ellipse((0.12, 0.32, 0.74, 0.82), body)
    p.ellipse((0.58, 0.12, 0.9, 0.52), body)
    p.polygon([(0.87, 0.26), (1.0, 0.34), (0.87, 0.42)], (245, 140, 20))
    p.ellipse((0.25, 0.45, 0.58, 0.7), tuple(c // 2 + 30 for c in body), solid=False)
    p.ellipse((0.74, 0.24, 0.8, 0.32), (15, 15, 15), solid=False)
    p.line([(0.42, 0.8), (0.42, 1.0)], (245, 140, 20), 0.04)
    p.line([(0.52, 0.8), (0.52, 1.0)], (245, 140, 20), 0.04)


def _dog(p, rng):
    fur = _jitter(rng, _pick(rng, [(150, 95, 50), (200, 160, 100), (95, 60, 35)]), 20)
    dark = tuple(max(1, c - 55) for c in fur)
    p.line([(0.22, 0.42), (0.04, 0.18)], fur, 0.07)
    for x in (0.24, 0.36, 0.6, 0.72):
        p.rect((x, 0.55, x + 0.08, 0.98), fur)
    p.ellipse((0.15, 0.32, 0.82, 0.72), fur)
    p.ellipse((0.64, 0.1, 0.96, 0.48), fur)
    p.ellipse((0.62, 0.06, 0.74, 0.38), dark)
    p.ellipse((0.86, 0.26, 1.0, 0.44), dark)
    p.ellipse((0.78, 0.2, 0.84, 0.27), (15, 15, 15), solid=False)


def _elephant(p, rng):
    skin = _jitter(rng, (130, 130, 135), 15)
    dark = tuple(c - 35 for c in skin)
    for x in (0.16, 0.3, 0.5, 0.64):
        p.rect((x, 0.5, x + 0.12, 1.0), skin)
    p.ellipse((0.05, 0.15, 0.78, 0.75), skin)
    p.ellipse((0.6, 0.1, 0.92, 0.5), skin)
    p.line([(0.86, 0.35), (0.94, 0.6), (0.9, 0.92)], skin, 0.09)
    p.ellipse((0.52, 0.12, 0.74, 0.52), dark, solid=False)
    p.line([(0.78, 0.45), (0.96, 0.52)], (240, 240, 230), 0.04)


def _kite(p, rng):
    first = _pick(rng, [(230, 40, 40), (40, 90, 230), (250, 140, 20)])
    second = _pick(rng, [(250, 220, 40), (40, 200, 80), (240, 240, 240)])
    first, second = _jitter(rng, first, 15), _jitter(rng, second, 15)
    top, right, bottom, left, centre = (0.5, 0.0), (0.95, 0.3), (0.5, 0.72), (0.05, 0.3), (0.5, 0.3)
    p.polygon([top, right, centre], first)
    p.polygon([right, bottom, centre], second)
    p.polygon([bottom, left, centre], first)
    p.polygon([left, top, centre], second)
    p.line([(0.5, 0.72), (0.42, 0.82), (0.58, 0.9), (0.5, 1.0)], (60, 60, 60), 0.025)


def _pizza(p, rng):
    p.ellipse((0.0, 0.0, 1.0, 1.0), _jitter(rng, (200, 140, 70), 15))
    p.ellipse((0.09, 0.09, 0.91, 0.91), _jitter(rng, (245, 200, 70), 15), solid=False)
    for _ in range(int(rng.integers(5, 9))):
        angle, radius = rng.uniform(0, 2 * math.pi), rng.uniform(0.08, 0.3)
        x, y = 0.5 + radius * math.cos(angle), 0.5 + radius * math.sin(angle)
        p.ellipse((x - 0.08, y - 0.08, x + 0.08, y + 0.08), _jitter(rng, (180, 30, 30), 15),
                  solid=False)


def _stop_sign(p, rng):
    p.rect((0.44, 0.6, 0.56, 1.0), _jitter(rng, (120, 120, 120), 10))
    def octagon(inset):
        points = []
        for k in range(8):
            angle = math.pi / 8 + k * math.pi / 4
            points.append((0.5 + (0.5 - inset) * math.cos(angle),
                           0.345 + (0.345 - inset * 0.69) * math.sin(angle)))
        return points
    p.polygon(octagon(0.0), (240, 240, 240))
    p.polygon(octagon(0.05), _jitter(rng, (210, 25, 30), 15), solid=False)
    p.rect((0.22, 0.3, 0.78, 0.39), (245, 245, 245), solid=False)


def _toilet(p, rng):
    white = _jitter(rng, (235, 235, 235), 12)
    shade = tuple(c - 45 for c in white)
    p.rect((0.12, 0.0, 0.88, 0.34), white)
    p.polygon([(0.32, 0.7), (0.68, 0.7), (0.74, 1.0), (0.26, 1.0)], white)
    p.ellipse((0.04, 0.3, 0.96, 0.78), white)
    p.ellipse((0.16, 0.36, 0.84, 0.6), shade, solid=False)
    p.line([(0.12, 0.34), (0.88, 0.34)], shade, 0.03, solid=False)


def _truck(p, rng):
    cargo = _jitter(rng, _pick(rng, [(220, 220, 220), (200, 60, 40), (40, 120, 190)]))
    cab = _jitter(rng, _pick(rng, [(230, 180, 30), (60, 160, 70), (180, 40, 40)]))
    p.rect((0.0, 0.05, 0.66, 0.78), cargo)
    p.polygon([(0.66, 0.3), (0.9, 0.3), (1.0, 0.55), (1.0, 0.78), (0.66, 0.78)], cab)
    p.polygon([(0.72, 0.36), (0.87, 0.36), (0.94, 0.54), (0.72, 0.54)], (170, 210, 240),
              solid=False)
    for x in (0.08, 0.36, 0.76):
        p.ellipse((x, 0.64, x + 0.2, 1.0), (25, 25, 25))
        p.ellipse((x + 0.06, 0.75, x + 0.14, 0.89), (150, 150, 150), solid=False)


def _zebra(p, rng):
    white, black = (240, 240, 235), (20, 20, 20)
    for x in (0.16, 0.3, 0.54, 0.68):
        p.rect((x, 0.5, x + 0.1, 1.0), white)
    p.ellipse((0.08, 0.22, 0.78, 0.7), white)
    p.polygon([(0.66, 0.36), (0.8, 0.02), (0.98, 0.12), (0.86, 0.46)], white)
    phase, spacing = rng.uniform(0, 0.08), rng.uniform(0.07, 0.1)
    x = phase
    while x < 1.0:
        p.line([(x, 0.0), (x + rng.uniform(-0.06, 0.06), 1.0)], black, 0.035, solid=False)
        x += spacing
    p.line([(0.79, 0.04), (0.64, 0.38)], black, 0.05, solid=False)


OBJECT_PAINTERS = {"backpack": _backpack, "bird": _bird, "dog": _dog, "elephant": _elephant,
                   "kite": _kite, "pizza": _pizza, "stop_sign": _stop_sign, "toilet": _toilet,
                   "truck": _truck, "zebra": _zebra}


def render_object(name: str, rng: np.random.Generator) -> tuple:
    """(crop RGB uint8 [h, w, 3], crop mask uint8 {0,1} [h, w]) of one object instance.

    The crop is tight around the mask, like a COCO box crop; object pixels are never exactly black,
    so BAM's alpha rule (transparent where RGB == 0) keeps exactly the mask.
    """
    width = int(rng.integers(56, 97))
    height = max(8, int(round(width * ASPECTS[name] * rng.uniform(0.9, 1.1))))
    painter = _Painter(width, height, with_mask=True)
    OBJECT_PAINTERS[name](painter, rng)
    rgb, mask = painter.arrays()
    rows, cols = np.nonzero(mask)
    r0, r1, c0, c1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    rgb, mask = rgb[r0:r1, c0:c1], mask[r0:r1, c0:c1]
    rgb = np.where(mask[..., None] != 0, np.maximum(rgb, 1), 0).astype(np.uint8)
    return rgb, mask


# ----------------------------------------------------------------------------------------------
# Scenes: drawn at the image size in unit coordinates, then textured with pixel noise.


def _sky(p, rng, horizon):
    p.rect((0, 0, 1, horizon), _jitter(rng, _pick(rng, [(120, 170, 230), (170, 200, 235)]), 15))


def _bamboo_forest(p, rng):
    p.rect((0, 0, 1, 1), _jitter(rng, (30, 70, 30), 12))
    for _ in range(int(rng.integers(5, 9))):
        x, w = rng.uniform(0, 1), rng.uniform(0.035, 0.07)
        stem = _jitter(rng, (120, 170, 60), 20)
        p.rect((x, 0, x + w, 1), stem)
        y = rng.uniform(0, 0.2)
        while y < 1:
            p.rect((x, y, x + w, y + 0.02), tuple(c - 50 for c in stem))
            y += rng.uniform(0.15, 0.25)
    for _ in range(6):
        x, y = rng.uniform(0, 1), rng.uniform(0, 1)
        p.line([(x, y), (x + 0.12, y - 0.06)], _jitter(rng, (50, 120, 40), 15), 0.02)


def _bedroom(p, rng):
    floor_y = rng.uniform(0.7, 0.82)
    p.rect((0, 0, 1, floor_y), _jitter(rng, _pick(rng, [(225, 205, 170), (205, 190, 220),
                                                        (200, 220, 205)]), 12))
    p.rect((0, floor_y, 1, 1), _jitter(rng, (130, 85, 50), 12))
    x0 = rng.uniform(0.05, 0.3)
    blanket = _jitter(rng, _pick(rng, [(170, 40, 60), (50, 80, 160), (60, 140, 90)]))
    p.rect((x0, 0.4, x0 + 0.1, 0.85), (100, 60, 35))
    p.rect((x0 + 0.05, 0.55, x0 + 0.7, 0.85), blanket)
    p.rect((x0 + 0.08, 0.48, x0 + 0.28, 0.57), (245, 245, 245))
    wx = rng.uniform(0.4, 0.75)
    p.rect((wx, 0.1, wx + 0.2, 0.35), (90, 60, 40))
    p.rect((wx + 0.02, 0.12, wx + 0.18, 0.33), _jitter(rng, (150, 200, 240), 15))


def _bowling_alley(p, rng):
    p.rect((0, 0, 1, 1), _jitter(rng, (40, 30, 60), 10))
    top = rng.uniform(0.28, 0.4)
    wood = _jitter(rng, (210, 165, 100), 15)
    p.polygon([(0.4, top), (0.6, top), (1.2, 1), (-0.2, 1)], wood)
    for k in range(-3, 4):
        x_top, x_bottom = 0.5 + k * 0.035, 0.5 + k * 0.27
        p.line([(x_top, top), (x_bottom, 1)], (90, 60, 35), 0.02)
    for k in range(5):
        p.ellipse((0.41 + k * 0.04, top - 0.06, 0.44 + k * 0.04, top), (245, 245, 245))
    for k in range(7):
        p.ellipse((k * 0.15 + 0.02, 0.05, k * 0.15 + 0.06, 0.09), _jitter(rng, (250, 200, 90), 5))


def _bus_interior(p, rng):
    p.rect((0, 0, 1, 1), _jitter(rng, (150, 150, 155), 12))
    p.rect((0, 0.15, 1, 0.4), _jitter(rng, (205, 225, 240), 12))
    p.rect((0.45, 0, 0.55, 0.12), (250, 250, 230))
    seat = _jitter(rng, _pick(rng, [(40, 60, 150), (160, 40, 50), (50, 110, 70)]), 15)
    for row in range(4):
        y = 0.4 + row * 0.15
        w = 0.16 + row * 0.05
        p.rect((0.0, y, w + 0.1, y + 0.12), seat)
        p.rect((0.9 - w, y, 1.0, y + 0.12), seat)
    p.polygon([(0.45, 0.4), (0.55, 0.4), (0.7, 1), (0.3, 1)], _jitter(rng, (70, 70, 75), 8))


def _cockpit(p, rng):
    _sky(p, rng, 0.55)
    frame = _jitter(rng, (50, 50, 55), 8)
    p.rect((0, 0.5, 1, 1), frame)
    p.line([(0.5, 0.0), (0.5, 0.55)], frame, 0.05)
    p.line([(0.0, 0.1), (0.2, 0.55)], frame, 0.05)
    p.line([(1.0, 0.1), (0.8, 0.55)], frame, 0.05)
    for _ in range(int(rng.integers(8, 14))):
        x, y = rng.uniform(0.02, 0.9), rng.uniform(0.58, 0.92)
        colour = _pick(rng, [(60, 220, 90), (250, 170, 30), (240, 240, 240), (40, 60, 160)])
        p.ellipse((x, y, x + 0.07, y + 0.07), colour)


def _corn_field(p, rng):
    horizon = rng.uniform(0.2, 0.38)
    _sky(p, rng, horizon)
    p.rect((0, horizon, 1, 1), _jitter(rng, (150, 160, 50), 15))
    stalk = _jitter(rng, (70, 120, 30), 15)
    for k in range(-6, 7):
        p.line([(0.5 + k * 0.06, horizon), (0.5 + k * 0.3, 1.05)], stalk, 0.03)
    for _ in range(12):
        x, y = rng.uniform(0, 1), rng.uniform(horizon, 1)
        p.ellipse((x, y, x + 0.03, y + 0.03), (240, 210, 70))


def _laundromat(p, rng):
    p.rect((0, 0, 1, 1), _jitter(rng, (225, 230, 235), 10))
    p.rect((0, 0.82, 1, 1), _jitter(rng, (120, 120, 130), 10))
    size = rng.uniform(0.22, 0.3)
    offset = rng.uniform(0, 0.05)
    for row in range(2):
        for col in range(4):
            x, y = offset + col * (size + 0.02), 0.2 + row * (size + 0.05)
            p.rect((x, y, x + size, y + size), (250, 250, 250))
            p.ellipse((x + 0.15 * size, y + 0.2 * size, x + 0.85 * size, y + 0.9 * size),
                      (70, 80, 95))
            p.ellipse((x + 0.25 * size, y + 0.3 * size, x + 0.75 * size, y + 0.8 * size),
                      _jitter(rng, (110, 160, 200), 10))


def _runway(p, rng):
    horizon = rng.uniform(0.3, 0.45)
    _sky(p, rng, horizon)
    p.rect((0, horizon, 1, 1), _jitter(rng, (80, 140, 60), 12))
    p.polygon([(0.45, horizon), (0.55, horizon), (0.95, 1), (0.05, 1)],
              _jitter(rng, (95, 95, 100), 8))
    y = horizon + 0.03
    while y < 1:
        length = 0.03 + (y - horizon) * 0.15
        p.line([(0.5, y), (0.5, min(1.0, y + length))], (245, 245, 245), 0.01 + (y - horizon) * 0.03)
        y += length * 2.2
    p.line([(0.46, horizon), (0.08, 1)], (240, 240, 240), 0.015)
    p.line([(0.54, horizon), (0.92, 1)], (240, 240, 240), 0.015)


def _ski_slope(p, rng):
    _sky(p, rng, 1.0)
    left, right = rng.uniform(0.1, 0.4), rng.uniform(0.45, 0.8)
    p.polygon([(0, left), (1, right), (1, 1), (0, 1)], _jitter(rng, (240, 245, 250), 8))
    for _ in range(int(rng.integers(4, 8))):
        x = rng.uniform(0, 1)
        y = left + (right - left) * x + rng.uniform(0.05, 0.5)
        h = rng.uniform(0.1, 0.2)
        p.polygon([(x, y - h), (x + h / 2.5, y), (x - h / 2.5, y)], _jitter(rng, (20, 80, 40), 10))


def _track(p, rng):
    p.rect((0, 0, 1, 1), _jitter(rng, (190, 70, 50), 15))
    cx, cy, radius = rng.uniform(0.3, 0.7), rng.uniform(-0.6, -0.3), rng.uniform(0.75, 0.95)
    p.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), _jitter(rng, (60, 150, 60), 12))
    for k in range(1, 6):
        r = radius + k * 0.09
        p.draw.arc([(cx - r) * p.width, (cy - r) * p.height, (cx + r) * p.width,
                    (cy + r) * p.height], 0, 180, fill=(245, 245, 245), width=1)


SCENE_PAINTERS = {"bamboo_forest": _bamboo_forest, "bedroom": _bedroom,
                  "bowling_alley": _bowling_alley, "bus_interior": _bus_interior,
                  "cockpit": _cockpit, "corn_field": _corn_field, "laundromat": _laundromat,
                  "runway": _runway, "ski_slope": _ski_slope, "track": _track}


def render_scene(name: str, rng: np.random.Generator, size: int) -> Image.Image:
    """One scene image of class `name`: PIL RGB, `size` x `size`, with mild pixel noise."""
    painter = _Painter(size, size)
    SCENE_PAINTERS[name](painter, rng)
    noisy = painter.arrays().astype(np.float32) + rng.normal(0, 6, (size, size, 3))
    return Image.fromarray(np.clip(np.round(noisy), 0, 255).astype(np.uint8), "RGB")


# ----------------------------------------------------------------------------------------------
# The world.


def _instance_renderer(layout, seed, image_size, crop_masks):
    """`instance(i)` for `construction.write_composites`: draws the 10 objects and 10 scenes of
    instance i, writes the cut-out PNGs and keeps every crop mask in `crop_masks[o, i]`."""

    def instance(index):
        cutouts = []
        for label, obj in enumerate(OBJECT_CLASSES):
            rng = np.random.default_rng([seed, OBJECT_STREAM, label, index])
            rgb, mask = render_object(obj, rng)
            cutout = compositing.cutout_from_crop(rgb, mask)
            construction.write_bytes(layout("coco", "segments", obj, f"{obj}_{index:06d}.png"),
                                     construction.encode_png(cutout))
            crop_masks[label, index] = mask
            cutouts.append(cutout)
        scenes = [render_scene(scene, np.random.default_rng([seed, SCENE_STREAM, label, index]),
                               image_size)
                  for label, scene in enumerate(SCENE_CLASSES)]
        return cutouts, scenes

    return instance


def _write_records(layout, images, crop_masks, image_size, seed):
    """Image TFRecords of the composites: train shards in a seeded order, validation sorted."""
    os.makedirs(layout("records"))
    shards = {}
    train = [im for im in images if not im.is_val]
    order = np.random.default_rng([seed, 7]).permutation(len(train))
    splits = {"train": [train[k] for k in order],
              "validation": sorted((im for im in images if im.is_val), key=lambda im: im.name)}
    for split, members in splits.items():
        count = max(1, math.ceil(len(members) / RECORDS_PER_SHARD))
        for shard in range(count):
            chunk = members[shard::count]
            path = layout("records", f"{split}-{shard:05d}-of-{count:05d}.tfrecord")
            examples = (records.image_example(
                im.jpeg, im.object_label, filename=im.name, image_format="jpeg",
                height=image_size, width=image_size, scene_label=im.scene_label,
                box=np.asarray(im.box, float) / image_size,  # (ymin, xmin, ymax, xmax)
                mask=dataset.mask_in_frame(crop_masks[im.object_label, im.index], im.box,
                                           image_size))
                        for im in chunk)
            records.write_records(path, examples)
        shards[split] = count
    return shards


def world_config(seed: int, image_size: int, train_per_pair: int, val_per_pair: int) -> dict:
    """The parameters that define a world (and must match for a cached world to be reused)."""
    return {"format": FORMAT, "seed": int(seed), "image_size": int(image_size),
            "train_per_pair": int(train_per_pair), "val_per_pair": int(val_per_pair)}


def read_world_info(output_dir: str) -> Optional[dict]:
    """The `world.json` of a finished world, or None if `output_dir` holds none."""
    path = os.path.join(output_dir, "world.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def build_world(output_dir: str, seed: int = 0, image_size: int = 64, train_per_pair: int = 100,
                val_per_pair: int = 100, progress: Optional[Callable] = None,
                overwrite: bool = False) -> dict:
    """Builds the synthetic world in `output_dir` (see the module docstring); returns its info.

    If `output_dir` already holds a finished world with the same parameters it is kept as is
    (`info["reused"]` is True). `progress(done, total)` is called after each instance.
    """
    config = world_config(seed, image_size, train_per_pair, val_per_pair)
    if image_size < 32:
        raise UserError(f"--image_size must be at least 32; got {image_size}")
    if train_per_pair < 1 or val_per_pair < 1:
        raise UserError("--train_per_pair and --val_per_pair must be at least 1")
    if train_per_pair + val_per_pair > 10000:
        raise UserError("train_per_pair + val_per_pair must be at most 10000 (4-digit names)")
    existing = read_world_info(output_dir)
    if not overwrite:
        reused = construction.check_reusable(existing, config, output_dir, "a synthetic world")
        if reused:
            return reused
    if existing is None and os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise UserError(f"{output_dir} exists and is not a synthetic BAM world; choose an empty "
                        "or new --output_dir, or pass --overwrite")
    progress = progress or (lambda done, total: None)
    started = time.time()
    num_instances = train_per_pair + val_per_pair
    with atomic_output(output_dir) as root:
        layout = construction.Layout(root)
        for obj in OBJECT_CLASSES:
            os.makedirs(layout("coco", "segments", obj))
        crop_masks: dict = {}
        images = construction.write_composites(
            layout, _instance_renderer(layout, seed, image_size, crop_masks), seed, image_size,
            train_per_pair, num_instances, progress, keep_jpeg=True)
        val_indices = range(train_per_pair, num_instances)
        val_masks = [[crop_masks[o, index] for index in val_indices]
                     for o in range(len(OBJECT_CLASSES))]
        for obj, masks in zip(OBJECT_CLASSES, val_masks):
            dataset.save_masks(layout("coco", "segments", obj, "val_mask"), masks)
        construction.write_split_metadata(layout, images, val_masks)
        construction.write_dog_sets(layout, val_per_pair)
        construction.write_tcav_sets(layout, seed)
        shards = _write_records(layout, images, crop_masks, image_size, seed)
        num_val = sum(1 for im in images if im.is_val)
        info = dict(config, object_classes=list(OBJECT_CLASSES), scene_classes=list(SCENE_CLASSES),
                    num_train_images=len(images) - num_val, num_val_images=num_val,
                    record_shards=shards)
        with open(layout("world.json"), "w", encoding="utf-8") as handle:
            json.dump(info, handle, indent=2, sort_keys=True)
    return dict(info, reused=False, seconds=time.time() - started)
