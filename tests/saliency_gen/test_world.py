"""The synthetic BAM world: determinism, BAM's layout, label files, index rules, masks and boxes."""
import io
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from saliency_gen.data import records
from saliency_gen.data.world import compositing, construction, dataset, synthetic
from saliency_gen.data.world.dataset import OBJECT_CLASSES, OBJECT_LABEL, SCENE_CLASSES, SCENE_LABEL
from tests import REPO, binaries
from tests.conftest import TINY_WORLD, tree_digests

T, V, S = TINY_WORLD["train_per_pair"], TINY_WORLD["val_per_pair"], TINY_WORLD["image_size"]


def test_same_seed_gives_byte_identical_world(tiny_world, tmp_path):
    root, _ = tiny_world
    again = synthetic.build_world(str(tmp_path / "again"), **TINY_WORLD)
    assert not again["reused"]
    first, second = tree_digests(root), tree_digests(str(tmp_path / "again"))
    assert len(first) > 1000 and first == second
    other = synthetic.build_world(str(tmp_path / "other"), **dict(TINY_WORLD, seed=4))
    assert other["num_val_images"] == 100 * V
    changed = tree_digests(str(tmp_path / "other"))
    untouched = {key for key in first if not key.startswith("tcav")}  # TCAV draws depend on seed
    assert untouched <= changed.keys()
    same = [key for key in untouched if first[key] == changed[key]]
    # Every image, mask and box differs; only seed-independent text files may stay equal.
    assert all(key.endswith(("val.txt", "categories.txt")) for key in same), same


def test_layout_and_counts_follow_bam(tiny_world):
    root, info = tiny_world
    path = lambda *parts: os.path.join(root, *parts)  # noqa: E731
    for obj in OBJECT_CLASSES:
        assert len(dataset.sorted_files(path("obj", "train", obj))) == 10 * T
        pngs = dataset.sorted_files(path("coco", "segments", obj), (".png",))
        assert pngs == [f"{obj}_{i:06d}.png" for i in range(T + V)]
        assert len(dataset.load_masks(path("coco", "segments", obj, "val_mask"))) == V
    for scene in SCENE_CLASSES:
        assert len(dataset.sorted_files(path("scene", "train", scene))) == 10 * T
        assert len(dataset.sorted_files(path("scene_only", "train", scene))) == 10 * T
    for folder in ("obj", "scene", "scene_only"):
        names = dataset.sorted_files(path(folder, "val"))
        assert len(names) == 100 * V
        for meta in ("val.txt", "val_loc.txt", "loc.txt", "val_mask"):
            assert os.path.isfile(path(folder, meta))
        assert len(dataset.read_locations(path(folder, "loc.txt"))) == 100 * (T + V)
    for folder in ("dog_bedroom", "bamboo_forest"):
        assert len(dataset.sorted_files(path(folder, "val"))) == V
    tcav_sizes = {name: len(os.listdir(path("tcav", name))) for name in
                  ("dog_bedroom", "dog_scene", "random500_0", "random500_1", "random_counter_part")}
    assert tcav_sizes == {"dog_bedroom": V, "dog_scene": 10 * V, "random500_0": 100,
                          "random500_1": 100, "random_counter_part": 100}
    assert set(os.listdir(path("tcav", "random500_0"))).isdisjoint(
        os.listdir(path("tcav", "random500_1")))
    with open(path("tcav", "obj_categories.txt")) as handle:
        assert handle.read().splitlines()[2] == "dog_bedroom 2"
    with open(path("tcav", "scene_categories.txt")) as handle:
        lines = handle.read().splitlines()
    assert lines[1] == "dog_bedroom 1" and lines[9] == "track 9"
    assert info["num_train_images"] == 100 * T and info["num_val_images"] == 100 * V


def test_label_files_and_index_rules(tiny_world):
    root, _ = tiny_world
    names = dataset.sorted_files(os.path.join(root, "obj", "val"))
    obj_labels = dataset.read_labels(os.path.join(root, "obj", "val.txt"))
    scene_labels = dataset.read_labels(os.path.join(root, "scene", "val.txt"))
    only_labels = dataset.read_labels(os.path.join(root, "scene_only", "val.txt"))
    assert [n for n, _ in obj_labels] == names == [n for n, _ in scene_labels]
    assert scene_labels == only_labels
    for j, ((name, obj_label), (_, scene_label)) in enumerate(zip(obj_labels, scene_labels)):
        obj, scene, index = dataset.parse_image_name(name)
        assert (obj_label, scene_label) == (OBJECT_LABEL[obj], SCENE_LABEL[scene])
        assert T <= index < T + V
        assert j == OBJECT_LABEL[obj] * 10 * V + SCENE_LABEL[scene] * V + (index - T)
    with open(os.path.join(root, "obj", "val.txt"), "rb") as handle:
        assert handle.read().endswith(b"\n")
    assert dataset.read_labels(os.path.join(root, "dog_bedroom", "val.txt")) == [
        (dataset.image_name("dog", "bedroom", i), 1) for i in range(T, T + V)]
    assert dataset.read_labels(os.path.join(root, "bamboo_forest", "val.txt")) == [
        (dataset.image_name("dog", "bamboo_forest", i), 0) for i in range(T, T + V)]


def _box_matches_mask(box, mask):
    r0, c0, r1, c1 = box
    new_h, new_w = r1 - r0, c1 - c0
    h, w = mask.shape
    low, high = int(S / math.sqrt(3)), int(S / math.sqrt(2)) - 1
    if w > h:
        return low <= new_w <= high and new_h == max(1, new_w * h // w)
    return low <= new_h <= high and new_w == max(1, new_h * w // h)


def test_boxes_follow_the_pasting_rule_and_match_their_masks(tiny_world):
    root, _ = tiny_world
    masks = dataset.load_masks(os.path.join(root, "obj", "val_mask"))
    assert len(masks) == 10 * V and all(m.dtype == np.uint8 and set(np.unique(m)) <= {0, 1}
                                        for m in masks)
    for name, box in dataset.read_locations(os.path.join(root, "obj", "val_loc.txt")):
        obj, _, index = dataset.parse_image_name(name)
        mask = masks[OBJECT_LABEL[obj] * V + (index - T)]  # BAM's mask index rule
        assert _box_matches_mask(box, mask), (name, box, mask.shape)
        r0, c0, r1, c1 = box
        assert 0 <= r0 and r1 <= S - 1 and 0 <= c0 and c1 <= S - 1  # U{0..S-new-1}
    dog_masks = dataset.load_masks(os.path.join(root, "dog_bedroom", "val_mask"))
    for k, (_, box) in enumerate(
            dataset.read_locations(os.path.join(root, "bamboo_forest", "val_loc.txt"))):
        np.testing.assert_array_equal(dog_masks[k], masks[OBJECT_LABEL["dog"] * V + k])
        assert _box_matches_mask(box, dog_masks[k])


def test_composites_differ_from_scene_only_only_at_the_object(tiny_world):
    root, _ = tiny_world
    masks = dataset.load_masks(os.path.join(root, "obj", "val_mask"))
    mcu = 16  # JPEG 4:2:0 coding unit; chroma upsampling reaches into neighbouring units
    for name, box in dataset.read_locations(os.path.join(root, "obj", "val_loc.txt"))[::7]:
        composite = np.asarray(Image.open(os.path.join(root, "obj", "val", name)), np.int16)
        scene_only = np.asarray(Image.open(os.path.join(root, "scene_only", "val", name)), np.int16)
        r0, c0, r1, c1 = box
        touched = np.zeros((S // mcu, S // mcu), bool)
        touched[r0 // mcu:(r1 - 1) // mcu + 1, c0 // mcu:(c1 - 1) // mcu + 1] = True
        near = np.zeros_like(touched)
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                near |= np.roll(np.roll(touched, dr, 0), dc, 1)
        far = ~np.kron(near, np.ones((mcu, mcu), bool))
        np.testing.assert_array_equal(composite[far], scene_only[far])
        obj, _, index = dataset.parse_image_name(name)
        inside = dataset.mask_in_frame(masks[OBJECT_LABEL[obj] * V + index - T], box, S) > 0
        assert np.abs(composite - scene_only)[inside].mean() > 10  # the object is really there


def test_compositing_keeps_the_scene_outside_the_alpha():
    rng = np.random.default_rng(0)
    crop, mask = synthetic.render_object("zebra", rng)
    scene = synthetic.render_scene("runway", rng, S)
    cutout = compositing.cutout_from_crop(crop, mask)
    np.testing.assert_array_equal(np.asarray(cutout)[..., 3] > 0, mask > 0)
    placement = compositing.draw_placement(rng, S, crop.shape[1], crop.shape[0])
    composite, (r0, c0, r1, c1) = compositing.paste(scene, cutout, placement)
    alpha = np.zeros((S, S), bool)
    alpha[r0:r1, c0:c1] = np.asarray(cutout.resize((c1 - c0, r1 - r0), Image.BILINEAR))[..., 3] > 0
    np.testing.assert_array_equal(np.asarray(composite)[~alpha], np.asarray(scene)[~alpha])
    assert np.any(np.asarray(composite)[alpha] != np.asarray(scene)[alpha])


def test_image_records_carry_labels_boxes_and_masks(tiny_world):
    root, info = tiny_world
    files = records.list_files(os.path.join(root, "records", "*.tfrecord"))
    assert [os.path.basename(f) for f in files] == ["train-00000-of-00001.tfrecord",
                                                    "validation-00000-of-00001.tfrecord"]
    masks = dataset.load_masks(os.path.join(root, "obj", "val_mask"))
    boxes = dict(dataset.read_locations(os.path.join(root, "obj", "loc.txt")))
    seen = []
    for path in files:
        records.check_file(path, "image")
        for record in tf.data.TFRecordDataset(path):
            parsed = records.parse_image_record(record)
            name = parsed["filename"].numpy().decode()
            obj, scene, index = dataset.parse_image_name(name)
            assert parsed["label"].numpy() == OBJECT_LABEL[obj]
            assert parsed["scene_label"].numpy() == SCENE_LABEL[scene]
            split = "val" if index >= T else os.path.join("train", obj)
            with open(os.path.join(root, "obj", split, name), "rb") as handle:
                assert parsed["encoded"].numpy() == handle.read()
            np.testing.assert_allclose(parsed["box"].numpy()[0] * S, boxes[name], atol=1e-4)
            mask = records.decode_mask(parsed["mask_png"]).numpy()
            r0, c0, r1, c1 = boxes[name]
            assert mask.sum() > 0 and mask[r0:r1, c0:c1].sum() == mask.sum()
            if index >= T:
                expected = dataset.mask_in_frame(masks[OBJECT_LABEL[obj] * V + index - T],
                                                 boxes[name], S)
                np.testing.assert_array_equal(mask, expected > 0)
            seen.append((path, name))
    assert len(seen) == 100 * (T + V) and len({name for _, name in seen}) == len(seen)
    train_names = [name for path, name in seen if "train-" in path]
    assert train_names != sorted(train_names)  # shuffled by the seed, so shards mix classes


def test_rebuild_reuses_or_refuses(tiny_world, tmp_path):
    root, _ = tiny_world
    assert synthetic.build_world(root, **TINY_WORLD)["reused"]
    with pytest.raises(synthetic.UserError, match="holds a synthetic world with other parameters"):
        synthetic.build_world(root, **dict(TINY_WORLD, seed=99))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(synthetic.UserError, match="exists and is not a synthetic BAM world"):
        synthetic.build_world(str(tmp_path / "busy"), **TINY_WORLD)
    with pytest.raises(synthetic.UserError, match="--image_size must be at least 32"):
        synthetic.build_world(str(tmp_path / "small"), image_size=16)


def test_interrupted_build_leaves_nothing_that_looks_finished(tmp_path):
    def interrupt(done, total):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        synthetic.build_world(str(tmp_path / "world"), progress=interrupt, **TINY_WORLD)
    assert list(tmp_path.iterdir()) == []


def test_script_builds_the_same_bytes_and_reports_errors_in_one_line(tmp_path):
    script = os.path.join(REPO, "scripts", "construct_synthetic_bam.py")
    run = lambda *args: binaries.run([sys.executable, script, *args],  # noqa: E731
                                     capture_output=True, text=True, timeout=300)
    out = str(tmp_path / "w")
    done = run(f"--output_dir={out}", "--seed=1", "--train_per_pair=1", "--val_per_pair=1")
    assert done.returncode == 0, done.stderr
    assert "built" in done.stdout and os.path.isfile(os.path.join(out, "world.json"))
    # Another process builds the same bytes, records included (no per-process hash order).
    synthetic.build_world(str(tmp_path / "here"), seed=1, train_per_pair=1, val_per_pair=1)
    assert tree_digests(out) == tree_digests(str(tmp_path / "here"))
    clash = run(f"--output_dir={out}", "--seed=2", "--train_per_pair=1", "--val_per_pair=1")
    assert clash.returncode == 2
    errors = [line for line in clash.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "other parameters" in errors[0]
    assert "Traceback" not in clash.stderr


def test_jpegs_are_pil_default_quality():
    image = synthetic.render_scene("bedroom", np.random.default_rng(5), S)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=75)
    assert construction.encode_jpeg(image) == buffer.getvalue()


def test_the_smallest_world_builds(tmp_path):
    info = synthetic.build_world(str(tmp_path / "w32"), seed=0, image_size=32, train_per_pair=1,
                                 val_per_pair=1)
    assert info["num_val_images"] == 100 and info["image_size"] == 32
