"""The shipped weights of the default world's models (saliency_gen.data.world.shipped): what the
package holds is complete and intact, and a stored model comes back as the same model."""
import json
import os
import shutil

import numpy as np
import pytest

import models
from models.foundation.errors import UserError
from models.foundation.files import file_sha256, read_json
from saliency_gen.data.world import cache, shipped, synthetic

SHIPPED = ("obj", "scene", "scene_only", "clean")


def test_the_package_ships_the_default_worlds_four_models_intact():
    recorded = shipped.manifest(0)
    assert recorded is not None, "run python scripts/train_shipped_models.py"
    # the world the default run builds (saliency_gen.data.world.cache with its defaults)
    assert recorded["world"] == synthetic.world_config(0, cache.IMAGE_SIZE, 100, 100)
    assert sorted(recorded["models"]) == sorted(SHIPPED)
    total = 0
    for name, entry in recorded["models"].items():
        for file_name, digest in entry["sha256"].items():
            path = os.path.join(shipped.folder(0), name, file_name)
            assert file_sha256(path) == digest, path
            total += os.path.getsize(path)
        info = read_json(os.path.join(shipped.folder(0), name, shipped.INFO))
        assert info["name"] == "small_cnn" and info["input_shape"] == [64, 64, 3]
        assert info["preprocessing"] == ("imagenet" if name == "clean" else "caffe_rgb")
        assert entry["cpu"] and entry["tensorflow"] and entry["date"]
    assert total < 4e6  # the weights; the patch's images add 0.8 MB
    # the delta patch, made with the shipped scene_only: 100 images, intact
    patch = recorded["folders"]["bamboo_forest_patch"]
    scene_only = read_json(os.path.join(shipped.folder(0), "scene_only", shipped.INFO))
    assert patch["made_with"] == {"model_id": scene_only["model_id"]}
    assert shipped._tree_digest(os.path.join(shipped.folder(0), "bamboo_forest_patch")) == \
        patch["sha256"]
    assert len(os.listdir(os.path.join(shipped.folder(0), "bamboo_forest_patch", "val"))) == 100
    reports = {name: read_json(os.path.join(shipped.folder(0), name, shipped.REPORT))
               for name in SHIPPED}
    assert reports["clean"]["top1"] > 0.8
    assert min(reports[name]["val_accuracy"] for name in ("obj", "scene", "scene_only")) > 0.8


@pytest.fixture(scope="module")
def stored(trained_world, tmp_path_factory):
    """The default world's obj model stored again as a shipped model under a temporary root."""
    data_dir, model_dir, _ = trained_world
    root = str(tmp_path_factory.mktemp("shipped"))
    report = read_json(os.path.join(model_dir, "obj.json"))
    shipped.store("obj", os.path.join(model_dir, "obj"), report, data_dir, {"cpu": "test"}, root)
    return data_dir, model_dir, root


def test_an_installed_model_is_the_trained_model(stored, tmp_path):
    data_dir, model_dir, root = stored
    report = shipped.install("obj", data_dir, str(tmp_path / "obj"), root)
    assert report == read_json(os.path.join(model_dir, "obj.json"))
    trained, installed = models.load(os.path.join(model_dir, "obj")), models.load(
        str(tmp_path / "obj"))
    assert installed.model_id == trained.model_id
    images = np.random.RandomState(0).uniform(-100, 100, (4, 64, 64, 3)).astype(np.float32)
    np.testing.assert_array_equal(installed(images).numpy(), trained(images).numpy())
    assert installed.info["extra"]["shipped"] == os.path.join("seed0", "obj")
    assert shipped.install("scene", data_dir, str(tmp_path / "scene"), root) is None


def test_nothing_is_installed_for_another_world(stored, tmp_path):
    data_dir, _, root = stored
    other = tmp_path / "world"
    other.mkdir()
    info = read_json(os.path.join(data_dir, "world.json"))
    (other / "world.json").write_text(json.dumps(dict(info, val_per_pair=11)))
    assert shipped.install("obj", str(other), str(tmp_path / "obj"), root) is None
    assert not (tmp_path / "obj").exists()


def test_a_shipped_folder_serves_only_the_inputs_it_was_made_with(stored, tmp_path):
    data_dir, _, root = stored
    made = tmp_path / "made"
    (made / "val").mkdir(parents=True)
    (made / "val" / "a.png").write_bytes(b"pixels")
    (made / "skip").write_text("not shipped")
    shipped.store_folder("patch", str(made), data_dir, {"model_id": "m1"}, {}, root,
                         exclude=("skip",))
    found = shipped.shipped_folder("patch", data_dir, {"model_id": "m1"}, root)
    assert sorted(os.listdir(found)) == ["val"]
    assert shipped.shipped_folder("patch", data_dir, {"model_id": "m2"}, root) is None
    with open(os.path.join(found, "val", "a.png"), "wb") as handle:
        handle.write(b"pixelz")
    with pytest.raises(UserError, match="does not match its recorded SHA-256"):
        shipped.shipped_folder("patch", data_dir, {"model_id": "m1"}, root)


def test_a_damaged_weights_file_is_refused_by_name(stored, tmp_path):
    data_dir, _, root = stored
    damaged = str(tmp_path / "root")
    shutil.copytree(root, damaged)
    weights = os.path.join(shipped.folder(0, damaged), "obj", shipped.WEIGHTS)
    with open(weights, "r+b") as handle:
        handle.seek(os.path.getsize(weights) - 100)
        handle.write(b"\x00\x01\x02\x03")
    with pytest.raises(UserError, match="model.weights.h5 does not match its recorded SHA-256"):
        shipped.install("obj", data_dir, str(tmp_path / "obj"), damaged)
    assert not (tmp_path / "obj").exists()
