"""TCAV in TF2: a concept the model provably uses scores ~1 with a significant p-value, one it
ignores does not; gradients are exact; CAVs are deterministic for a seed; the binary's contrast."""
import json
import sys

import keras
import numpy as np
import pytest

import models
from bam import tcav, tcav_experiment
from bam.run_tcav import Config as RunTcavConfig
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags


def red_model():
    """logit 0 = 5 * mean red, logit 1 = 0; the bottleneck "pooled" is the mean colour."""
    inputs = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling2D(name="pooled")(inputs)
    dense = keras.layers.Dense(2, name="head")
    logits = dense(pooled)
    dense.set_weights([np.array([[5.0, 0], [0, 0], [0, 0]], np.float32), np.zeros(2, np.float32)])
    return keras.Model(inputs, logits)


def colour_set(rng, count, channel=None):
    """Images of uniform random mean colours; `channel` pushed up to [0.6, 1]."""
    colours = rng.uniform(0, 1, (count, 3))
    if channel is not None:
        colours[:, channel] = rng.uniform(0.6, 1.0, count)
    return np.broadcast_to(colours[:, None, None, :], (count, 8, 8, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def sets():
    rng = np.random.RandomState(0)
    return {"target": colour_set(rng, 50), "red": colour_set(rng, 60, 0),
            "blue": colour_set(rng, 60, 2), "counterpart": colour_set(rng, 60),
            "randoms": [colour_set(rng, 60) for _ in range(8)]}


def test_gradients_are_exact():
    model = red_model()
    x = colour_set(np.random.RandomState(1), 5)
    gradients = tcav.TcavModel(model, batch_size=2).gradients(x, "pooled", 0)
    p0 = 1 / (1 + np.exp(-5 * x[:, 0, 0, 0]))
    expected = np.zeros((5, 3))
    expected[:, 0] = 5 * (1 - p0)
    np.testing.assert_allclose(gradients, expected, rtol=1e-5, atol=1e-7)
    logit_gradients = tcav.TcavModel(model).gradients(x, "logit", 1)
    np.testing.assert_allclose(logit_gradients, np.stack([-p0, p0], 1), rtol=1e-5, atol=1e-7)


def test_used_concept_scores_one_and_is_significant(sets):
    tcav_model = tcav.TcavModel(red_model())
    used = tcav.run_tcav(tcav_model, "pooled", sets["target"], 0, sets["red"], sets["randoms"],
                         sets["counterpart"], seed=0)
    assert used.score == 1.0 and used.significant, used.summary()
    assert (used.cav_accuracies > 0.6).all()  # the red range overlaps the random one
    ignored = tcav.run_tcav(tcav_model, "pooled", sets["target"], 0, sets["blue"],
                            sets["randoms"], sets["counterpart"], seed=0)
    assert not (ignored.score > 0.9 and ignored.significant), ignored.summary()
    again = tcav.run_tcav(tcav_model, "pooled", sets["target"], 0, sets["red"], sets["randoms"],
                          sets["counterpart"], seed=0)
    assert again.summary() == used.summary()


def test_cavs_are_deterministic_for_a_seed(sets):
    activations = tcav.TcavModel(red_model()).activations(sets["red"], "pooled")
    random = tcav.TcavModel(red_model()).activations(sets["randoms"][0], "pooled")
    first, accuracy = tcav.train_cav(activations, random, seed=3)
    second, _ = tcav.train_cav(activations, random, seed=3)
    np.testing.assert_array_equal(first, second)
    assert first[0] > abs(first[1]) and first[0] > abs(first[2])  # points to red
    assert 0.5 < accuracy <= 1.0


def test_bottleneck_aliases():
    small = models.build("small_cnn", 10, (32, 32, 3))
    assert tcav.default_bottlenecks(small) == ["block_layer1", "block_layer2", "block_layer3",
                                               "logit"]
    activations = tcav.TcavModel(small).activations(np.zeros((2, 32, 32, 3), np.float32),
                                                    "block_layer2")
    assert activations.shape == (2, 16 * 16 * 32)
    with pytest.raises(models.UserError, match="no bottleneck"):
        tcav.layer_name(small, "block_layer4")


def test_run_tcav_binary_on_a_tiny_world(tiny_world, tmp_path):
    root, _ = tiny_world
    model_dir = tmp_path / "models"
    for name in ("obj", "scene"):
        keras.utils.set_random_seed(len(name))
        models.export(models.build("small_cnn", 10, (64, 64, 3)), str(model_dir / name),
                      preprocessing="caffe_rgb")
    results = tcav_experiment.model_tcav(root, str(model_dir), "obj", ["block_layer3", "logit"],
                                         max_examples=20)
    assert set(results) == {"block_layer3", "logit"}
    assert tcav_experiment.target_class(root, "obj") == 2
    assert tcav_experiment.target_class(root, "scene3") == 1
    output = tmp_path / "tcav.json"
    run = binaries.run(
        [sys.executable, "-m", "bam.run_tcav", "--model=obj,scene", f"--data_dir={root}",
         f"--model_dir={model_dir}", "--bottlenecks=logit", "--max_examples=20",
         f"--output={output}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(output.read_text())
    assert report["tcav_mcs"]["logit"] == pytest.approx(
        report["obj"]["logit"]["score"] - report["scene"]["logit"]["score"])
    assert "TCAV model contrast (obj - scene): logit" in run.stdout
    assert set(report["origin"]["inputs"]["models"]) == {"obj", "scene"}
    assert report["origin"]["settings"]["max_examples"] == 20
    assert_origin_covers_the_flags(RunTcavConfig, report["origin"])
    bad = binaries.run([sys.executable, "-m", "bam.run_tcav", f"--data_dir={root}"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "pass both --data_dir and --model_dir" in bad.stderr
