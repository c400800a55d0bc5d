"""The real BAM build (MSCOCO + MiniPlaces) on a tiny fabricated COCO instances file and a
MiniPlaces-style folder in the real formats: extraction rules, skips, layout, determinism,
index rules, relative sets, resumption and errors."""
import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

from bam import coco_miniplaces
from models.foundation.errors import UserError
from saliency_gen.data.world import compositing, construction, dataset
from saliency_gen.data.world.dataset import OBJECT_CLASSES, OBJECT_LABEL, SCENE_CLASSES, SCENE_LABEL
from tests import REPO, binaries, fabricated
from tests.conftest import tree_digests
from tests.fabricated import CATEGORY_ID, N, T, V


def _sources(root, obj):
    with open(os.path.join(root, "coco", "segments", obj, "sources.txt")) as handle:
        return [line.split() for line in handle.read().splitlines()]


def test_cutouts_follow_the_extraction_rules(real_sources, real_bam):
    _, _, content = real_sources
    root, info = real_bam
    anns = {ann["id"]: ann for ann in content["annotations"]}
    for label, obj in enumerate(OBJECT_CLASSES):
        rows = _sources(root, obj)
        # Ascending ids: the 5 lowest of 7 usable images, listed by file name.
        lowest = sorted(100000 * (label + 1) - k for k in range(7))[:N]
        assert [int(image_id) for _, image_id, _ in rows] == lowest
        for png, image_id, ann_id in rows:
            ann = anns[int(ann_id)]
            # The chosen annotation has the class's category (never the decoy "stop_sign" or
            # the larger "person"), and it is the largest of its category (crowd included).
            assert ann["category_id"] == CATEGORY_ID[obj]
            assert ann["bbox"][0] == 2.6 and png == f"{int(image_id):012d}.png"
            width = int(2.6 + ann["bbox"][2]) - 2
            with Image.open(os.path.join(root, "coco", "segments", obj, png)) as cutout:
                assert cutout.mode == "RGBA" and cutout.size == (width, int(3.4 + 24.2) - 3)
        report = info["extraction"][obj]
        assert report["category_id"] == CATEGORY_ID[obj] and report["accepted"] == N
    assert info["extraction"]["stop_sign"]["coco_name"] == "stop sign"
    assert info["extraction"]["dog"]["skipped"] == {"non_rgb": 1, "area_0": 1, "empty_crop": 1,
                                                    "empty_mask": 1}
    assert info["extraction"]["bird"]["skipped"] == dict.fromkeys(coco_miniplaces.SKIP_REASONS, 0)


def test_cutout_pixels_are_the_masked_crop(real_sources, real_bam):
    coco_dir, _, content = real_sources
    root, _ = real_bam
    coco = coco_miniplaces.load_coco(os.path.join(coco_dir, "annotations",
                                                  "instances_train2017.json"))
    png, image_id, ann_id = _sources(root, "kite")[0]
    ann = coco.loadAnns([int(ann_id)])[0]
    with Image.open(os.path.join(coco_dir, "train2017", f"{int(image_id):012d}.jpg")) as image:
        rgb = np.asarray(image)
    x, y, w, h = ann["bbox"]
    crop = (slice(int(y), int(y + h)), slice(int(x), int(x + w)))
    mask = coco.annToMask(ann)[crop]
    expected = rgb[crop] * mask[..., None]
    with Image.open(os.path.join(root, "coco", "segments", "kite", png)) as cutout:
        rgba = np.asarray(cutout)
    np.testing.assert_array_equal(rgba[..., :3], expected)
    np.testing.assert_array_equal(rgba[..., 3], np.where(expected.any(-1), 255, 0))
    assert 0 < mask.sum() < mask.size


def test_layout_counts_and_metadata(real_bam):
    root, info = real_bam
    path = lambda *parts: os.path.join(root, *parts)  # noqa: E401, E731
    for obj in OBJECT_CLASSES:
        assert len(dataset.sorted_files(path("obj", "train", obj))) == 10 * T
        assert len(dataset.sorted_files(path("coco", "segments", obj), (".png",))) == N
        assert len(dataset.load_masks(path("coco", "segments", obj, "val_mask"))) == V
    for scene in SCENE_CLASSES:
        for folder in ("scene", "scene_only"):
            assert len(dataset.sorted_files(path(folder, "train", scene))) == 10 * T
    for folder, label_of in (("obj", 0), ("scene", 1), ("scene_only", 1)):
        labels = dataset.read_labels(path(folder, "val.txt"))
        assert len(labels) == 100 * V
        assert len(dataset.load_masks(path(folder, "val_mask"))) == 10 * V
        assert len(dataset.read_locations(path(folder, "loc.txt"))) == 100 * N
        for j, (name, label) in enumerate(labels):
            parts = dataset.parse_image_name(name)
            o, s, i = OBJECT_LABEL[parts[0]], SCENE_LABEL[parts[1]], parts[2]
            assert j == o * 10 * V + s * V + (i - T)  # global val index (docs/bam.md, "The dataset layout")
            assert label == (o, s)[label_of]
    for folder in ("dog_bedroom", "bamboo_forest"):
        assert len(dataset.read_labels(path(folder, "val.txt"))) == V
    assert sorted(os.listdir(path("tcav"))) == sorted(
        ["dog_bedroom", "dog_scene", "random500_0", "random500_1", "random_counter_part",
         "obj_categories.txt", "scene_categories.txt"])
    assert info["num_train_images"] == 100 * T and info["num_val_images"] == 100 * V
    assert not os.path.exists(path(coco_miniplaces.STAGING))
    with open(path(coco_miniplaces.INFO_FILE)) as handle:
        assert json.load(handle)["seed"] == 0


def test_boxes_and_masks_match_their_images(real_sources, real_bam):
    root, _ = real_bam
    masks = dataset.load_masks(os.path.join(root, "obj", "val_mask"))
    boxes = dict(dataset.read_locations(os.path.join(root, "obj", "val_loc.txt")))
    segments = {obj: dataset.load_masks(os.path.join(root, "coco", "segments", obj, "val_mask"))
                for obj in OBJECT_CLASSES}
    for name, (r0, c0, r1, c1) in boxes.items():
        obj, scene, i = dataset.parse_image_name(name)
        mask = masks[OBJECT_LABEL[obj] * V + (i - T)]  # mask index rule
        np.testing.assert_array_equal(mask, segments[obj][i - T])
        h, w = mask.shape
        # The longer relative side drew the size; the other keeps the aspect, floored.
        if w > h:
            assert r1 - r0 == (c1 - c0) * h // w
        else:
            assert c1 - c0 == (r1 - r0) * w // h
        assert 73 <= max(r1 - r0, c1 - c0) <= 89 and r1 < 128 and c1 < 128
        # Each composite differs from its scene only inside its box.
        composite = np.asarray(Image.open(os.path.join(root, "scene", "val", name)), float)
        plain = np.asarray(Image.open(os.path.join(root, "scene_only", "val", name)), float)
        outside = np.ones((128, 128), bool)
        outside[max(0, r0 - 8):r1 + 8, max(0, c0 - 8):c1 + 8] = False
        assert np.abs(composite - plain)[outside].max() <= 24  # JPEG ringing only
        assert np.abs(composite - plain)[r0:r1, c0:c1].mean() > 10


def test_scene_only_images_are_the_miniplaces_scenes(real_sources, real_bam):
    _, miniplaces_dir, _ = real_sources
    root, _ = real_bam
    scene_path = os.path.join(miniplaces_dir, "images", "train", "t", "track", "outdoor",
                              f"{T + 1:08d}.jpg")  # the (T+1)-th file is scene image T
    with Image.open(scene_path) as image:
        expected = construction.encode_jpeg(image.convert("RGB"))
    with open(os.path.join(root, "scene_only", "val", f"zebra-track-{T:04d}.jpg"), "rb") as f:
        assert f.read() == expected


def test_relative_sets(real_bam):
    root, info = real_bam
    assert info["relative_sets"]["scene3"] == ["bedroom", "bamboo_forest", "bowling_alley"]
    for k in (1, 3, 10):
        base = os.path.join(root, f"scene{k}")
        with open(os.path.join(base, "dog_classes.txt")) as handle:
            dog_classes = handle.read().splitlines()
        assert dog_classes == list(construction.RELATIVE_DOG_ORDER[:k])
        labels = dataset.read_labels(os.path.join(base, "val.txt"))
        assert len(labels) == 10 * V == len(dataset.load_masks(os.path.join(base, "val_mask")))
        assert all(name.startswith("dog-") and label == SCENE_LABEL[name.split("-")[1]]
                   for name, label in labels)
        for scene in SCENE_CLASSES:
            names = dataset.sorted_files(os.path.join(base, "train", scene))
            assert names == [f"dog-{scene}-{i:04d}.jpg" for i in range(T)]
            source = "scene" if scene in dog_classes else "scene_only"
            for name in (names[0], f"dog-{scene}-{T:04d}.jpg"):
                split = ("train", scene) if name in names else ("val",)
                with open(os.path.join(base, *split, name), "rb") as mine, \
                        open(os.path.join(root, source, *split, name), "rb") as theirs:
                    assert mine.read() == theirs.read()


def test_same_seed_same_bytes_and_another_seed_moves_objects(real_sources, real_bam, tmp_path):
    coco_dir, miniplaces_dir, _ = real_sources
    root, _ = real_bam
    again = coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, str(tmp_path / "again"),
                                          seed=0, images_per_class=N, val_per_class=V)
    first, second = tree_digests(root), tree_digests(str(tmp_path / "again"))
    first.pop(coco_miniplaces.INFO_FILE), second.pop(coco_miniplaces.INFO_FILE)
    assert len(first) > 2000 and first == second and not again["reused"]
    reused = coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, str(tmp_path / "again"),
                                           seed=0, images_per_class=N, val_per_class=V)
    assert reused["reused"]
    with pytest.raises(UserError, match="other parameters"):
        coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, str(tmp_path / "again"),
                                      seed=1, images_per_class=N, val_per_class=V)
    other = coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, str(tmp_path / "again"),
                                          seed=1, images_per_class=N, val_per_class=V,
                                          overwrite=True)
    assert not other["reused"]
    moved = tree_digests(str(tmp_path / "again"))
    assert all(moved[key] == first[key] for key in first if key.startswith("coco"))
    assert moved["obj/val_loc.txt"] != first["obj/val_loc.txt"]


def test_interrupted_build_resumes_without_redoing_finished_stages(real_sources, real_bam,
                                                                   tmp_path, monkeypatch):
    coco_dir, miniplaces_dir, _ = real_sources
    output = str(tmp_path / "data")
    original = construction.write_relative_set

    def fail_at_scene4(layout, k):
        if k == 4:
            raise KeyboardInterrupt
        original(layout, k)

    monkeypatch.setattr(construction, "write_relative_set", fail_at_scene4)
    with pytest.raises(KeyboardInterrupt):
        coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, output, images_per_class=N,
                                      val_per_class=V)
    assert not os.path.exists(os.path.join(output, coco_miniplaces.INFO_FILE))
    assert not os.path.exists(os.path.join(output, "obj"))  # nothing looks finished
    monkeypatch.setattr(construction, "write_relative_set", original)

    def no_coco(*args):
        raise AssertionError("finished cut-out stages must not run again")

    monkeypatch.setattr(coco_miniplaces, "load_coco", no_coco)
    monkeypatch.setattr(construction, "write_composites", no_coco)
    coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, output, images_per_class=N,
                                  val_per_class=V)
    assert tree_digests(output).keys() == tree_digests(real_bam[0]).keys()


def test_bad_sources_give_clear_errors(real_sources, tmp_path):
    coco_dir, miniplaces_dir, content = real_sources
    out = str(tmp_path / "out")
    fabricated.fabricate_miniplaces(str(tmp_path / "more"), count=8)
    with pytest.raises(UserError, match=r"only 7 usable COCO images for 'backpack'.*8 are"):
        coco_miniplaces.build_dataset(coco_dir, str(tmp_path / "more"), out, images_per_class=8,
                                      val_per_class=2)
    with pytest.raises(UserError, match="holds 6 images; 7 are needed"):
        coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, out + "1", images_per_class=7,
                                      val_per_class=2)
    broken = tmp_path / "coco"
    (broken / "annotations").mkdir(parents=True)
    (broken / "train2017").mkdir()
    twice = dict(content, categories=content["categories"] + [
        {"id": 77, "name": "stop sign", "supercategory": "x"}])
    (broken / "annotations" / "instances_train2017.json").write_text(json.dumps(twice))
    with pytest.raises(UserError, match="'stop sign'.*matches 2 category ids"):
        coco_miniplaces.build_dataset(str(broken), miniplaces_dir, str(tmp_path / "o2"),
                                      images_per_class=N, val_per_class=V)
    (broken / "annotations" / "instances_train2017.json").write_text("{not json")
    with pytest.raises(UserError, match="is not a COCO instances file"):
        coco_miniplaces.build_dataset(str(broken), miniplaces_dir, str(tmp_path / "o3"),
                                      images_per_class=N, val_per_class=V)
    small = tmp_path / "small"
    fabricated.fabricate_miniplaces(str(small), size=64)
    with pytest.raises(UserError, match=r"00000001.jpg is 64x64; MiniPlaces scenes are 128x128"):
        coco_miniplaces.build_dataset(coco_dir, str(small), str(tmp_path / "o4"),
                                      images_per_class=N, val_per_class=V)
    occupied = tmp_path / "occupied"
    (occupied / "obj").mkdir(parents=True)
    with pytest.raises(UserError, match="obj already exists"):
        coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, str(occupied),
                                      images_per_class=N, val_per_class=V)


def test_script_runs_and_reports_errors_in_one_line(real_sources, tmp_path):
    coco_dir, miniplaces_dir, _ = real_sources
    script = os.path.join(REPO, "scripts", "construct_bam_dataset.py")
    result = binaries.run(
        [sys.executable, script, f"--coco_dir={coco_dir}", f"--miniplaces_dir={miniplaces_dir}",
         f"--output_dir={tmp_path / 'data'}", f"--images_per_class={N}", f"--val_per_class={V}"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "stop_sign" in result.stdout and "built" in result.stdout
    assert os.path.isfile(tmp_path / "data" / "scene10" / "dog_classes.txt")
    result = binaries.run(
        [sys.executable, script, f"--coco_dir={tmp_path / 'nowhere'}",
         f"--miniplaces_dir={miniplaces_dir}", f"--output_dir={tmp_path / 'other'}"],
        capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "instances_train2017.json does not exist" in result.stderr


def test_pasting_matches_the_rule_for_one_image(real_bam):
    root, _ = real_bam
    boxes = dict(dataset.read_locations(os.path.join(root, "obj", "loc.txt")))
    png = dataset.sorted_files(os.path.join(root, "coco", "segments", "truck"), (".png",))[1]
    with Image.open(os.path.join(root, "coco", "segments", "truck", png)) as cutout:
        size = cutout.size
    placement = compositing.draw_placement(
        compositing.placement_rng(0, OBJECT_LABEL["truck"], SCENE_LABEL["runway"], 1), 128, *size)
    new_w, new_h, row, col = placement
    assert boxes["truck-runway-0001.jpg"] == (row, col, row + new_h, col + new_w)
