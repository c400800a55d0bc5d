"""Tiny fabricated inputs in the real formats: an MSCOCO 2017 instances file with its images
and a MiniPlaces train folder (used to test the real BAM build and training on it)."""
import json
import os

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from bam import coco_miniplaces
from saliency_gen.world.dataset import OBJECT_CLASSES, SCENE_CLASSES

N, V = 5, 2  # images per class, of which val
T = N - V
COCO_NAME = {obj: obj.replace("_", " ") for obj in OBJECT_CLASSES}
CATEGORY_ID = {obj: 10 + 3 * label for label, obj in enumerate(OBJECT_CLASSES)}
DECOY_ID = 1  # a "person" category, and a "stop_sign" one that must not be picked (fix D1)


def polygon(x, y, w, h):
    """A diamond inside the box, as a COCO polygon (area about half the box)."""
    return [[x + w / 2, y, x + w, y + h / 2, x + w / 2, y + h, x, y + h / 2]]


def fabricate_coco(root):
    """COCO 2017 layout: per class 7 usable images (ids descending in file order, so ascending
    iteration matters) and, for the dog, one image per skip reason. Returns the annotations."""
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "train2017"))
    os.makedirs(os.path.join(root, "annotations"))
    images, annotations = [], []
    next_ann = [1000]

    def add_image(image_id, width=48, height=40, mode="RGB"):
        name = f"{image_id:012d}.jpg"
        pixels = rng.integers(20, 250, (height, width, 3), dtype=np.uint8)
        image = Image.fromarray(pixels, "RGB")
        if mode != "RGB":
            image = image.convert(mode)
        image.save(os.path.join(root, "train2017", name), quality=95)
        images.append({"id": image_id, "file_name": name, "width": width, "height": height})

    def add_ann(image_id, cat, box, area=None, crowd=False, size=(40, 48)):
        x, y, w, h = box
        ann = {"id": next_ann[0], "image_id": image_id, "category_id": cat, "bbox": list(box),
               "iscrowd": int(crowd), "area": w * h / 2 if area is None else area}
        if crowd:
            full = np.zeros(size, np.uint8)
            full[int(y):int(y + h), int(x):int(x + w)] = 1
            rle = mask_utils.encode(np.asfortranarray(full))
            ann["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
        else:
            ann["segmentation"] = polygon(*box)
        next_ann[0] += 1
        annotations.append(ann)
        return ann

    for label, obj in enumerate(OBJECT_CLASSES):
        cat = CATEGORY_ID[obj]
        for k in range(7):
            image_id = 100000 * (label + 1) - k  # later files have lower ids
            add_image(image_id)
            add_ann(image_id, cat, (4, 5, 20 + k, 16))  # smaller one first
            add_ann(image_id, cat, (2.6, 3.4, 30.5 + k, 24.2), crowd=(k == 1))  # the largest
            add_ann(image_id, DECOY_ID, (0, 0, 47, 39))  # larger, other category
    dog = CATEGORY_ID["dog"]
    add_image(5, mode="L")  # grayscale: non_rgb
    add_ann(5, dog, (2, 2, 30, 30))
    add_image(6)  # largest area 0
    add_ann(6, dog, (2, 2, 30, 30), area=0)
    add_image(7)  # bbox thinner than a pixel: empty crop
    add_ann(7, dog, (3.2, 2, 0.5, 30))
    add_image(8)  # mask outside its bbox: no mask pixels in the crop
    ann = add_ann(8, dog, (30, 20, 10, 10))
    ann["segmentation"] = polygon(2, 2, 10, 10)
    categories = [{"id": DECOY_ID, "name": "person", "supercategory": "person"},
                  {"id": 99, "name": "stop_sign", "supercategory": "decoy"}]
    categories += [{"id": CATEGORY_ID[obj], "name": COCO_NAME[obj], "supercategory": "thing"}
                   for obj in OBJECT_CLASSES]
    content = {"info": {}, "licenses": [], "images": images, "annotations": annotations,
               "categories": categories}
    with open(os.path.join(root, "annotations", "instances_train2017.json"), "w") as handle:
        json.dump(content, handle)
    return content


def fabricate_miniplaces(root, count=N + 1, size=128):
    for label, scene in enumerate(SCENE_CLASSES):
        folder = os.path.join(root, "images", "train",
                              *coco_miniplaces.MINIPLACES_CATEGORIES[scene].split("/"))
        os.makedirs(folder)
        for n in range(count):
            ramp = np.linspace(0, 200, size, dtype=np.float32)
            pixels = np.stack([ramp[:, None] + 0 * ramp, 0 * ramp[:, None] + ramp,
                               np.full((size, size), 10.0 * label + n)], -1)
            Image.fromarray(pixels.astype(np.uint8)).save(
                os.path.join(folder, f"{n + 1:08d}.jpg"))
