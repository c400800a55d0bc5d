"""The delta patch in segments of steps (so a bar can follow it) equals one traced loop, byte
for byte, and reports its progress."""
import os
import shutil

import keras

import models
from bam import delta_patch
from tests.conftest import tree_digests


def test_segments_give_the_patch_of_one_loop_and_report_progress(tiny_world, tmp_path,
                                                                 monkeypatch):
    root = str(tmp_path / "world")
    shutil.copytree(tiny_world[0], root)  # the session's world stays as it was
    keras.utils.set_random_seed(0)
    path = str(tmp_path / "scene_only")
    models.export(models.build("small_cnn", 10, (64, 64, 3), width=4), path,
                  preprocessing="caffe_rgb")
    model = models.load(path)
    monkeypatch.setattr(delta_patch, "SEGMENT", 3)
    reports = []
    delta_patch.construct_patches(root, model, num_steps=7, output_name="segmented",
                                  progress=lambda done, total: reports.append((done, total)))
    monkeypatch.setattr(delta_patch, "SEGMENT", 1000)
    delta_patch.construct_patches(root, model, num_steps=7, output_name="one_loop")
    assert reports[0] == (0, 3) and reports[-1] == (3, 3)  # SEGMENT 3 -> segments 3, 3, 1
    segmented = tree_digests(os.path.join(root, "segmented"))
    assert segmented == tree_digests(os.path.join(root, "one_loop")) and len(segmented) > 3
