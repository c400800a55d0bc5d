"""RMCS: known answers on constructed region scores, the accuracy-drop ground truth and the
`--metrics=RMCS` binary on a copy of the tiny world with ten scene models."""
import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest

import models
from bam import rmcs
from saliency_gen.data.world import construction
from tests import REPO, binaries


def test_relative_curves_known_answer():
    predictions = {k: np.array([1, 1, 1, 0]) for k in range(1, 11)}
    predictions[3] = np.array([1, 0, 1, 1])  # image 1 leaves C_3; image 3 never in (scene10)
    g = {k: {"A": np.array([0.1 * k, 0.2, 0.3, 0.9]), "B": np.full(4, 0.5)}
         for k in range(1, 11)}
    curves, used = rmcs.relative_curves(g, predictions)
    expected = [(0.1 * k + 0.2 + 0.3) / 3 - (1.0 + 0.2 + 0.3) / 3 for k in rmcs.KS]
    expected[2] = ((0.3 + 0.3) - (1.0 + 0.3)) / 2
    np.testing.assert_allclose(curves["A"], expected, atol=1e-12)
    assert curves["B"] == [0.0] * 9
    assert used == [3, 3, 2, 3, 3, 3, 3, 3, 3]
    predictions[10] = np.zeros(4)  # scene10 never says bedroom: no image counts
    assert np.isnan(rmcs.relative_curves(g, predictions)[0]["A"]).all()


def test_correlation_known_answer():
    drops = [0.9, 0.8, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
    assert rmcs.correlation(drops, drops) == pytest.approx(1.0)
    assert rmcs.correlation([-d for d in drops], drops) == pytest.approx(-1.0)
    assert np.isnan(rmcs.correlation([0.1] * 9, drops))
    assert np.isnan(rmcs.correlation([np.nan] + drops[1:], drops))


def bedroom_model(seed):
    """A small_cnn that always predicts class 1 (bedroom) and still has input gradients."""
    keras.utils.set_random_seed(seed)
    model = models.build("small_cnn", 10, (64, 64, 3), width=4)
    head = model.layers[-1]
    kernel, bias = head.get_weights()
    bias[1] = 50.0
    head.set_weights([kernel, bias])
    return model


@pytest.fixture(scope="module")
def relative_world(tiny_world, tmp_path_factory):
    root, _ = tiny_world
    data_dir = str(tmp_path_factory.mktemp("relative") / "bam")
    shutil.copytree(root, data_dir)
    layout = construction.Layout(data_dir)
    for k in range(1, 11):
        construction.write_relative_set(layout, k)
    model_dir = str(tmp_path_factory.mktemp("relative_models"))
    for k in range(1, 11):
        models.export(bedroom_model(k), os.path.join(model_dir, f"scene{k}"),
                      preprocessing="caffe_rgb")
    return data_dir, model_dir


def test_accuracy_drops_compare_with_and_without_the_dog(relative_world):
    data_dir, model_dir = relative_world
    drops = rmcs.accuracy_drops(data_dir, model_dir)
    # Every model says bedroom: accuracy is the bedroom share of D_k's images with or without
    # the dog alike, so nothing drops.
    assert drops == [0.0] * 9


def test_rmcs_binary_writes_curves_table_and_plot(relative_world, tmp_path):
    data_dir, model_dir = relative_world
    output = str(tmp_path / "bam.json")
    run = binaries.run(
        [sys.executable, "-m", "bam.metrics", "--metrics=RMCS", f"--data_dir={data_dir}",
         f"--model_dir={model_dir}", "--num_imgs=3", "--methods=VG,GC", "--rmcs_tcav=false",
         f"--output={output}"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "MCS between scene9 and scene10" in run.stdout and "r(drop)" in run.stdout
    with open(output, encoding="utf-8") as handle:
        result = json.load(handle)["RMCS"]
    assert set(result["curves"]) == {"VG", "GC"} and len(result["curves"]["VG"]) == 9
    assert result["images"] == [3] * 9  # every model predicts bedroom
    assert os.path.getsize(str(tmp_path / "bam_rmcs.png")) > 1000
    with open(str(tmp_path / "bam.csv"), encoding="utf-8") as handle:
        assert sum(line.startswith("RMCS_scene") for line in handle) == 18


def test_relative_tcav_row(relative_world):
    data_dir, model_dir = relative_world
    result = {"curves": {}, "correlation": {}, "accuracy_drop": [0.9 - 0.1 * k for k in rmcs.KS]}
    rmcs.add_tcav(result, data_dir, model_dir, bottleneck="logit")
    scores = result["tcav_scores"]
    assert len(scores) == 10 and all(0.0 <= s <= 1.0 for s in scores)
    np.testing.assert_allclose(result["curves"]["TCAV"], [s - scores[9] for s in scores[:9]])
    assert "TCAV" in result["correlation"]
