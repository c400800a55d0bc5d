"""Tiny fabricated inputs in the real formats: an MSCOCO 2017 instances file with its images
and a MiniPlaces train folder (used to test the real BAM build and training on it)."""
import json
import os

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from bam import coco_miniplaces
from saliency_gen.data.world.dataset import OBJECT_CLASSES, SCENE_CLASSES

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



def fabricate_bam_tf1_model(path, seed=0, classes=10, keras_model=None):
    """A TF1 SavedModel (tag serve) with the tensor names of BAM's released models: input
    `input_tensor:0` with the batch fixed at 1, stage outputs `resnet_model/block_layer1..4:0`,
    logits `resnet_model/final_dense:0`, built with graph code and reference variables as TF1
    wrote them. Without `keras_model`: a random small conv net on 224 x 224 inputs; with a
    trained plain Keras CNN (conv / max-pool / global-average-pool / dense layers, such as
    small_cnn): the same network and weights, so the TF1 model classifies as it does."""
    import tensorflow as tf

    rng = np.random.RandomState(seed)
    graph = tf.Graph()
    stages = {"block1_conv2": 1, "block2_conv2": 2, "block3_conv2": 3, "gradcam_features": 4}
    plan = [] if keras_model is None else [  # read eagerly, before the graph is entered
        (type(layer).__name__, layer.name, layer.get_weights(),
         getattr(getattr(layer, "activation", None), "__name__", "")) for layer in
        keras_model.layers]
    with graph.as_default():
        side = 224 if keras_model is None else int(keras_model.inputs[0].shape[1])
        images = tf.compat.v1.placeholder(tf.float32, [1, side, side, 3], name="input_tensor")

        def variable(name, value):
            return tf.compat.v1.get_variable(name, use_resource=False,
                                             initializer=np.asarray(value, np.float32))

        h = images
        with tf.compat.v1.variable_scope("resnet_model"):
            if keras_model is None:
                for stage, (channels, stride) in enumerate(((4, 4), (6, 2), (8, 2), (8, 2)), 1):
                    kernel = variable(f"conv{stage}/kernel", rng.randn(
                        3, 3, int(h.shape[-1]), channels) * (0.05 if stage == 1 else 0.3))
                    bias = variable(f"conv{stage}/bias", rng.randn(channels) * 0.1)
                    h = tf.nn.relu(tf.nn.conv2d(h, kernel, [1, stride, stride, 1], "SAME") + bias)
                    h = tf.identity(h, name=f"block_layer{stage}")
                h = tf.reduce_mean(h, axis=[1, 2])
                logits = tf.matmul(h, variable("dense/kernel", rng.randn(8, classes) * 0.5)) \
                    + variable("dense/bias", rng.randn(classes) * 0.1)
            else:
                for kind, name, weights, activation in plan:
                    if kind == "Conv2D":
                        h = tf.nn.conv2d(h, variable(f"{name}/kernel", weights[0]), 1, "SAME")
                        h = h + variable(f"{name}/bias", weights[1])
                        h = tf.nn.relu(h) if activation == "relu" else h
                    elif kind == "MaxPooling2D":
                        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
                    elif kind == "GlobalAveragePooling2D":
                        h = tf.reduce_mean(h, axis=[1, 2])
                    elif kind == "Dense":
                        h = tf.matmul(h, variable(f"{name}/kernel", weights[0])) \
                            + variable(f"{name}/bias", weights[1])
                    if name in stages:
                        h = tf.identity(h, name=f"block_layer{stages[name]}")
                logits = h
            logits = tf.identity(logits, name="final_dense")
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(path)
            signature = tf.compat.v1.saved_model.predict_signature_def({"input": images},
                                                                       {"logits": logits})
            builder.add_meta_graph_and_variables(session, ["serve"],
                                                 signature_def_map={"serving_default": signature})
            builder.save()
    return path


def legacy_saliency_example(raw_image, label, key, saliency):
    """A record in the original ROAR layout: `raw_image`, `label` and a float list under `key`
    (docs/records.md)."""
    import tensorflow as tf

    feature = {"raw_image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[raw_image])),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
               key: tf.train.Feature(float_list=tf.train.FloatList(
                   value=np.asarray(saliency, np.float32).ravel()))}
    return tf.train.Example(features=tf.train.Features(feature=feature))
