"""BAM metrics: region scores on hand-made maps, metric known answers, the pipeline sign check,
and the bam.metrics binary end to end on a small synthetic world."""
import dataclasses
import json
import os
import sys

import numpy as np
import pytest

import models
from bam import metric_definitions, metrics, region, val_set_scores
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags

# ----------------------------------------------------------------------------------------------
# Region scores g on hand-made maps.


def _mask_frame(size=32, box=(4, 6, 20, 26)):
    mask = np.zeros((8, 10), np.uint8)
    mask[1:7, 2:9] = 1
    return [mask], [box], region.object_masks([mask], [box], size, size)


def test_a_map_lighting_only_the_object_scores_one():
    _, _, frames = _mask_frame()
    maps = np.repeat(frames[..., None].astype(np.float32), 3, -1) * 0.7
    g, constant = region.region_scores(maps, frames)
    assert g[0] == pytest.approx(1.0) and not constant[0]
    assert frames.sum() > 0.01 * frames.size


def test_constant_and_negative_maps_score_zero():
    _, _, frames = _mask_frame()
    g, constant = region.region_scores(np.full((1, 32, 32, 3), 3.0, np.float32), frames)
    assert g[0] == 0.0 and constant[0]  # the original divided by zero here
    negative = np.where(frames[..., None] > 0, -5.0, 1.0).repeat(3, -1).astype(np.float32)
    g, _ = region.region_scores(negative, frames)
    assert g[0] == 0.0  # only the positive part counts, never the absolute value


def test_percentile_normalisation_and_box_scaling():
    rng = np.random.default_rng(0)
    maps = rng.uniform(0, 1, (2, 32, 32, 1)).astype(np.float32)
    normalised, _ = region.normalise_maps(maps)
    flat = maps[0, ..., 0].ravel()
    expected = np.clip((maps[0, ..., 0] - flat.min()) / (np.percentile(flat, 99) - flat.min()),
                       0, 1)
    np.testing.assert_allclose(normalised[0], expected, rtol=1e-5)
    from saliency_gen.data.world import dataset
    assert dataset.scale_box((10, 3, 51, 127), 128, 224) == (17, 5, 89, 222)


def test_empty_mask_is_a_named_error():
    with pytest.raises(models.UserError, match="dog-bedroom-0901: its object mask is empty"):
        region.object_masks([np.zeros((5, 5), np.uint8)], [(0, 0, 10, 10)], 32, 32,
                            ["dog-bedroom-0901"])


# ----------------------------------------------------------------------------------------------
# Metric known answers on constructed g values and maps.


def test_oracle_maps_give_the_maximal_mcs_and_random_maps_about_zero():
    rng = np.random.default_rng(1)
    masks, boxes, frames = [], [], []
    for _ in range(40):
        r0, c0 = rng.integers(0, 12, 2)
        box = (int(r0), int(c0), int(r0) + 16, int(c0) + 18)
        mask = (rng.uniform(size=(12, 12)) > 0.3).astype(np.uint8)
        masks.append(mask)
        boxes.append(box)
    frames = region.object_masks(masks, boxes, 32, 32)
    oracle = np.repeat(frames[..., None].astype(np.float32), 3, -1)
    g_obj, _ = region.region_scores(oracle, frames)
    g_scene, _ = region.region_scores(np.zeros_like(oracle), frames)
    assert metric_definitions.metric_value("MCS", g_obj, g_scene) == pytest.approx(1.0)
    noise = [region.region_scores(rng.uniform(-1, 1, oracle.shape).astype(np.float32),
                                  frames)[0] for _ in range(2)]
    assert abs(metric_definitions.metric_value("MCS", *noise)) < 0.05


def test_idr_and_iir_use_strict_and_relative_thresholds():
    assert metric_definitions.metric_value("IDR", [0.5, 0.4, 0.3], [0.4, 0.4, 0.5]) == pytest.approx(1 / 3)
    g1 = np.array([0.5, 0.5, 0.0, 0.2])
    g2 = np.array([0.54, 0.55, 0.0, 0.2])
    # |0.04| < 0.05 counts; |0.05| < 0.05 does not; g = 0 never counts; equal non-zero counts.
    assert metric_definitions.metric_value("IIR", g1, g2) == pytest.approx(2 / 4)
    with pytest.raises(models.UserError, match="IIR: no image is classified correctly by both"):
        metric_definitions.metric_value("IIR", [], [])


def test_sampling_is_the_originals_and_bounded():
    import random
    random.seed(4)
    assert metric_definitions.sample_indices(100, 7, 4) == sorted(random.sample(range(100), 7))
    with pytest.raises(models.UserError, match="--num_imgs=101 exceeds the 100 images"):
        metric_definitions.sample_indices(100, 101, 0)
    assert list(metric_definitions.correct_set([1, 2, 3], [1, 0, 3], [5, 5, 5], [5, 5, 4])) == [0]


def test_pair_metrics_score_each_pair_once_over_the_correct_set():
    """The one per-image computation of bam.metrics and the card, on constructed scores: the
    correct set drops the images either model gets wrong, and (scene, scene) serves MCS and
    IDR with one computation."""
    labels = {"obj": np.array([0, 1, 2, 3]), "scene": np.array([5, 5, 6, 6])}
    predictions = {("obj", "obj"): np.array([0, 1, 9, 3]),  # image 2 wrong
                   ("scene", "scene"): np.array([5, 5, 6, 0]),  # image 3 wrong
                   ("scene", "scene_only"): np.array([5, 5, 6, 6])}
    g = {("obj", "obj"): np.array([0.9, 0.8, 0.7, 0.6]),
         ("scene", "scene"): np.array([0.1, 0.5, 0.2, 0.3]),
         ("scene", "scene_only"): np.array([0.2, 0.1, 0.1, 0.3])}
    asked = []

    def scores_of(model, data, indices, names):
        asked.append((model, data))
        key = (model, data)
        return predictions[key][indices], {name: g[key][indices] for name in names}, {}

    pair_metrics = metric_definitions.PairMetrics(
        ("MCS", "IDR"), scores_of, lambda name: labels["obj" if name == "obj" else "scene"],
        lambda metric: [0, 1, 2, 3])
    assert [spec.name for spec in pair_metrics.metrics] == ["MCS", "IDR"]
    assert all(spec.higher_is_better for spec in pair_metrics.metrics)
    found = pair_metrics.score("m")
    np.testing.assert_allclose(found["MCS"], [0.8, 0.3])  # images 0 and 1 only
    # IDR: scene on scene_only vs scene on scene; image 3 is wrong on scene: images 0, 1, 2
    np.testing.assert_array_equal(found["IDR"], [1.0, 0.0, 0.0])
    assert sorted(asked) == [("obj", "obj"), ("scene", "scene"), ("scene", "scene_only")]
    value, used, sampled, _ = pair_metrics.values("MCS", ["m"])["m"]
    assert (used, sampled) == (2, 4) and metric_definitions.average("MCS", value) == \
        pytest.approx(0.55)


# ----------------------------------------------------------------------------------------------
# The pipeline on a small trained world.


def test_object_model_attributes_more_to_the_object_than_the_scene_model(trained_world):
    """The original pipeline test's sign check, for GC and VG."""
    data_dir, model_dir, reports = trained_world
    assert reports["obj"]["val_accuracy"] > 0.5 and reports["scene"]["val_accuracy"] > 0.9
    results = metrics.compute(metrics.Config(data_dir=data_dir, model_dir=model_dir,
                                             metrics=("MCS",), methods=("GC", "VG"), num_imgs=100))
    for method in ("GC", "VG"):
        value, used, sampled, _ = results["MCS"][method]
        assert used >= 40 and sampled == 100
        assert value > 0, (method, value)  # the original test's sign check
    assert results["MCS"]["GC"][0] > results["MCS"]["VG"][0]  # GC has the highest MCS (paper)


def test_patch_set_is_complete_and_lossless(trained_world):
    data_dir, model_dir, _ = trained_world
    patch = val_set_scores.load_val_set(data_dir, "bamboo_forest_patch")
    source = val_set_scores.load_val_set(data_dir, "bamboo_forest")
    assert [s.split(".")[0] for s in patch.stems] == source.stems
    assert patch.boxes == source.boxes and list(patch.labels) == [0] * len(source.paths)
    with open(os.path.join(data_dir, "bamboo_forest_patch", "patch_stats.csv")) as handle:
        rows = handle.read().splitlines()
    assert len(rows) == 1 + len(source.paths)
    from PIL import Image
    original = np.asarray(Image.open(source.paths[0]).convert("RGB"), np.int16)
    patched = np.asarray(Image.open(patch.paths[0]), np.int16)
    frame = region.object_masks([source.masks[0]], [source.boxes[0]], 64, 64)[0]
    changed = np.any(patched != original, axis=-1)
    assert changed.any() and not changed[frame == 0].any()  # only masked pixels change


def test_metrics_binary_writes_json_and_csv(trained_world, tmp_path, monkeypatch):
    """The binary with two BAM methods and a user method from a module outside the package
    (tests/data/user_methods), whose values equal the Python API's."""
    data_dir, model_dir, _ = trained_world
    output = tmp_path / "out.json"
    user_methods = os.path.join(REPO, "tests", "data", "user_methods")
    user = "blob_attribution:gradient_times_blob"
    done = binaries.run(
        [sys.executable, "-m", "bam.metrics", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
         "--metrics=MCS,IDR,IIR", f"--methods=GC,VG,{user}", "--num_imgs=10",
         f"--output={output}"], cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=user_methods))
    assert done.returncode == 0, done.stderr
    values = json.loads(output.read_text())
    origin = values.pop("origin")  # what made the file: flags, model ids, data
    assert origin["settings"]["num_imgs"] == 10 and origin["settings"]["seed"] == 0
    assert set(origin["inputs"]["models"]) == {"obj", "scene", "scene_only"}
    assert_origin_covers_the_flags(metrics.Config, origin)
    assert set(values) == {"MCS", "IDR", "IIR"} and set(values["MCS"]) == {"GC", "VG", user}
    assert all(np.isfinite(v) for rows in values.values() for v in rows.values())
    monkeypatch.syspath_prepend(user_methods)
    in_python = metrics.compute(metrics.Config(data_dir=data_dir, model_dir=model_dir,
                                               methods=(user,), num_imgs=10))
    for metric in ("MCS", "IDR", "IIR"):
        assert values[metric][user] == pytest.approx(in_python[metric][user][0], abs=1e-12)
    assert not done.stderr.startswith(("WARNING: All log messages", "I0000"))  # quiet start
    assert "Results for IIR:" in done.stdout and "GradCam," in done.stdout
    assert (tmp_path / "out.csv").read_text().startswith("metric,method,value,images_used")
    bad = binaries.run(
        [sys.executable, "-m", "bam.metrics", f"--data_dir={tmp_path}/none",
         f"--model_dir={model_dir}", "--num_imgs=10"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert bad.returncode == 2 and len(errors) == 1 and "does not exist" in errors[0]


def test_saved_maps_are_scored_without_models(trained_world, tmp_path):
    """--maps_dir: oracle maps from elsewhere (any library) give MCS = 1 and IIR's known answer."""
    data_dir, _, _ = trained_world
    maps_dir = tmp_path / "maps"
    for model_name, data_name in (("obj", "obj"), ("scene", "scene")):
        val_set = val_set_scores.load_val_set(data_dir, data_name)
        folder = maps_dir / f"{model_name}-{data_name}"
        folder.mkdir(parents=True)
        if model_name == "obj":  # the object lit at the model's 64 px, as [N, H, W]
            maps = region.object_masks(val_set.masks, val_set.boxes, 64, 64).astype(np.float32)
        else:  # nothing lit, at 32 px: resized to 64 px
            maps = np.zeros((len(val_set.paths), 32, 32, 3), np.float32)
        np.save(folder / "oracle.npy", maps)
        np.save(folder / "predictions.npy", val_set.labels)  # every image "correct"
    saved = metrics.Config(data_dir=data_dir, metrics=("MCS",), methods=("oracle",), num_imgs=20,
                           maps_dir=str(maps_dir))
    results = metrics.compute(saved)
    value, used, sampled, constant = results["MCS"]["oracle"]
    assert used == sampled == 20 and constant == 20  # the scene maps are all zero
    assert value == pytest.approx(1.0, abs=1e-6)  # the maximal MCS
    np.save(maps_dir / "obj-obj" / "predictions.npy", np.zeros(3))
    with pytest.raises(models.UserError, match=r"obj-obj/predictions.npy has shape \(3,\); "
                                               r"expected \(10000,\)"):
        metrics.compute(saved)


def test_precomputed_g_vectors_are_matched_by_stem(tiny_world, tmp_path):
    """--scratch=0: the original attr_reprod layout, every image, matched by file stem (D6)."""
    root, _ = tiny_world
    attr = tmp_path / "attr_reprod"
    for pair, g_gc in (("obj-obj", 0.6), ("scene-scene", 0.1)):
        val_set = val_set_scores.load_val_set(root, pair.split("-")[1])
        (attr / pair).mkdir(parents=True)
        for stem, label in zip(val_set.stems[::-1], val_set.labels[::-1]):  # any write order
            vector = np.zeros(12)
            vector[val_set_scores.METHOD_INDEX["GC"]] = g_gc
            vector[val_set_scores.METHOD_INDEX["VG"]] = 0.3
            with open(attr / pair / f"{stem}_{label}", "wb") as handle:
                np.save(handle, vector)
    with open(attr / "obj-obj" / "zebra-track-9999_9", "wb") as handle:  # a stale file
        np.save(handle, np.ones(12))
    precomputed = metrics.Config(data_dir=root, metrics=("MCS",), methods=("GC", "VG"),
                                 scratch=False, attr_dir=str(attr))
    results = metrics.compute(precomputed)
    assert results["MCS"]["GC"][0] == pytest.approx(0.5)
    assert results["MCS"]["VG"][0] == pytest.approx(0.0)
    assert results["MCS"]["GC"][1:3] == (300, 300)  # all images, num_imgs ignored
    os.remove(attr / "scene-scene" / f"{val_set_scores.load_val_set(root, 'scene').stems[5]}_"
                                     f"{val_set_scores.load_val_set(root, 'scene').labels[5]}")
    with pytest.raises(models.UserError, match="scene-scene has no g vector for image backpack-bedroom-0004"):
        metrics.compute(dataclasses.replace(precomputed, methods=("GC",)))


def test_kept_region_scores_are_keyed_by_the_sampled_images_bytes_and_regions(tmp_path):
    from bam import score_cache
    from bam.val_set_scores import ValSet

    paths = [str(tmp_path / f"{index}.jpg") for index in range(4)]
    for path in paths:
        with open(path, "wb") as handle:
            handle.write(b"x" * 100)
    masks = [np.zeros((3, 3), np.uint8) for _ in paths]
    val_set = ValSet("obj", paths, np.zeros(4, np.int64), [(0, 0, 3, 3)] * 4, masks, 3)

    def key():
        return score_cache._path(str(tmp_path), "model-1", val_set, [0, 2], 0)

    def rewrite(path):  # at its size, later (file times are coarse)
        with open(path, "wb") as handle:
            handle.write(b"y" * 100)
        os.utime(path, ns=(10 ** 9, 10 ** 9))

    first = key()
    rewrite(paths[1])  # an image not sampled: the same scores
    assert key() == first
    rewrite(paths[2])  # a sampled image
    rewritten = key()
    assert rewritten != first
    masks[0][1, 1] = 1  # a sampled image's object mask
    assert key() != rewritten
