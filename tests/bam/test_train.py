"""BAM training: learns the synthetic world's scenes, honours its time budget, streams large sets
with the same batches, resumes after a kill, and fine-tunes ResNet-50 on real-format data."""
import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
from bam import train
from models.foundation.errors import UserError
from models.training.recipes import RunOptions
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags, interrupt_at


def _run(epochs, seed=0, **options):
    """small_cnn with BAM's synthetic recipe for `epochs` epochs."""
    return RunOptions(recipe=train.BamRecipe(epochs=epochs), seed=seed, **options)


def test_small_cnn_learns_scene_labels_of_the_tiny_world(tiny_world):
    root, _ = tiny_world
    model, report = train.train_classifier(root, "scene", _run(epochs=15))
    assert report["num_train"] == 200 and report["num_val"] == 300
    assert report["input_size"] == 64 and model.output_shape == (None, 10)
    assert report["val_accuracy"] > 0.4  # chance is 0.1; 0.75-0.84 measured over seeds


def test_time_budget_stops_training(tiny_world):
    root, _ = tiny_world
    _, report = train.train_classifier(root, "obj", _run(epochs=50), max_seconds=0.01)
    assert report["epochs_run"] == 1


def test_streaming_pipeline_feeds_the_same_batches_as_memory(tiny_world):
    """Two trainings with one seed give equal weights bit for bit (also across pipelines)."""
    root, _ = tiny_world
    memory, memory_report = train.train_classifier(root, "obj", _run(epochs=2, seed=5),
                                                   pipeline="memory")
    stream, stream_report = train.train_classifier(root, "obj", _run(epochs=2, seed=5),
                                                   pipeline="stream")
    assert (memory_report["pipeline"], stream_report["pipeline"]) == ("memory", "stream")
    for a, b in zip(memory.get_weights(), stream.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert memory_report["val_accuracy"] == stream_report["val_accuracy"]


def test_auto_pipeline_streams_large_sets():
    assert train.choose_pipeline("auto", 10000, 64) == "memory"
    assert train.choose_pipeline("auto", 90000, 224) == "stream"  # 13.5 GB decoded
    with pytest.raises(UserError, match="--pipeline must be one of"):
        train.choose_pipeline("disk", 1, 1)



def test_killed_training_resumes_to_the_uninterrupted_weights(tiny_world, tmp_path):
    root, _ = tiny_world
    whole, _ = train.train_classifier(root, "obj", _run(epochs=3, seed=1))
    backup = str(tmp_path / "obj.backup")
    with pytest.raises(KeyboardInterrupt):  # 4 steps per epoch: killed inside the second
        train.train_classifier(root, "obj", _run(epochs=3, seed=1), backup_dir=backup,
                               callbacks=[interrupt_at(epoch=1, step=1)])
    assert os.path.isfile(os.path.join(backup, "epoch-0001.json"))
    resumed, report = train.train_classifier(root, "obj", _run(epochs=3, seed=1),
                                             backup_dir=backup)
    assert report["resumed_from_epoch"] == 1 and report["epochs_run"] == 3
    assert report["resumptions"] == 1 and report["resumed_at_epochs"] == [1]
    for a, b in zip(whole.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Another configuration never resumes from this backup: one line, or a fresh start.
    with pytest.raises(UserError, match=r"training backup .*obj.backup was made with epochs=3, "
                                        r"not 2; pass --overwrite"):
        train.train_classifier(root, "obj", _run(epochs=2, seed=1), backup_dir=backup)
    _, report = train.train_classifier(root, "obj", _run(epochs=2, seed=1, overwrite=True),
                                       backup_dir=backup)
    assert report["resumed_from_epoch"] == 0 and report["epochs_run"] == 2


def test_mirrored_training_follows_one_device_and_resumes(tiny_world, tmp_path):
    """BAM training runs in the project's one loop, so it has tf.distribute,
    --stop_after_epochs and --mode=eval: MirroredStrategy on two logical CPUs, stopped after its
    first epoch and resumed, gives one device's losses (plain_cnn: no batch norm; 4 whole
    batches of 50)."""
    root, _ = tiny_world

    def train_into(folder, *extra):
        done = binaries.run([sys.executable, "-m", "bam.train", "--dataset=obj",
                             f"--data_dir={root}", f"--model_dir={folder}", "--model=plain_cnn",
                             "--epochs=2", "--batch_size=50", *extra],
                            capture_output=True, text=True, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    train_into(tmp_path / "one")
    one = json.loads((tmp_path / "one" / "obj.json").read_text())
    # --mode=eval of the export gives the training run's own validation accuracy
    evaluated = train.run(train.Config(data_dir=root, mode="eval",
                                       checkpoint=str(tmp_path / "one" / "obj")))
    assert evaluated["num_val"] == 300
    assert abs(evaluated["val_accuracy"] - one["val_accuracy"]) <= 1 / 300 + 1e-9
    mirrored = ("--strategy=mirrored", "--cpu_replicas=2")
    assert "stopped after epoch 1" in train_into(tmp_path / "two", *mirrored,
                                                 "--stop_after_epochs=1")
    assert not (tmp_path / "two" / "obj").exists()  # not exported: the backup waits
    train_into(tmp_path / "two", *mirrored)
    two = json.loads((tmp_path / "two" / "obj.json").read_text())
    assert (one["replicas"], two["replicas"]) == (1, 2)
    assert two["resumed_at_epochs"] == [1] and len(one["loss_per_epoch"]) == 2
    np.testing.assert_allclose(two["loss_per_epoch"], one["loss_per_epoch"][1:], rtol=1e-4)
    assert abs(two["val_accuracy"] - one["val_accuracy"]) <= 1 / 300  # one image of 300


def test_presets_and_weights_flags(tiny_world, real_bam, tmp_path):
    assert train.detect_preset(tiny_world[0]) == "synthetic"
    assert train.detect_preset(real_bam[0]) == "real"
    preset = train.preset_with({"model": None, "weights": None}, "real")
    assert preset.model == "keras_resnet50" and preset.weights == "imagenet"
    assert preset.recipe.input_size == 224 and preset.recipe.learning_rate == 1e-4
    assert train.preset_with({"weights": "none"}, "real").weights is None
    assert train.preset_with({"epochs": 7}, "synthetic") == train.Preset(
        recipe=train.BamRecipe(epochs=7))
    with pytest.raises(UserError, match="neither 'imagenet' nor an existing file"):
        train.preset_with({"weights": str(tmp_path / "missing.h5")}, "real")
    with pytest.raises(UserError, match="applies to keras_resnet50 and vgg16, not small_cnn"):
        train.preset_with({"weights": "imagenet"}, "synthetic")


def test_binary_fine_tunes_from_a_weights_file_on_real_format_data(real_bam, tmp_path):
    # The real preset's path (keras.applications weights file, streaming, export) with VGG16,
    # whose training step traces in seconds; keras_resnet50 takes the same path but its first
    # step alone traces for about 27 s on 2 cores.
    data_dir, _ = real_bam
    weights = str(tmp_path / "vgg16_notop.weights.h5")
    keras.applications.VGG16(include_top=False, weights=None,
                             input_shape=(32, 32, 3)).save_weights(weights)
    model_dir = tmp_path / "models"
    command = [sys.executable, "-m", "bam.train", "--dataset=scene3", f"--data_dir={data_dir}",
               f"--model_dir={model_dir}", "--model=vgg16", f"--weights={weights}",
               "--input_size=32",
               "--epochs=1", "--batch_size=16", "--pipeline=stream"]
    result = binaries.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "with the real preset" in result.stdout
    with open(model_dir / "scene3.json") as handle:
        report = json.load(handle)
    assert report["model"] == "vgg16" and report["pipeline"] == "stream"
    assert report["num_train"] == 30 and report["num_val"] == 20
    assert report["model_options"] == {"weights": weights}
    assert not os.path.exists(model_dir / "scene3.backup")
    origin = models.read_info(str(model_dir / "scene3"))["extra"]["origin"]
    assert origin["settings"]["preset"] == "real" and origin["settings"]["max_seconds"] is None
    assert_origin_covers_the_flags(train.Config, origin)
    loaded = models.load(str(model_dir / "scene3"))
    image = tf.constant(np.random.default_rng(0).normal(size=(1, 32, 32, 3)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(image)
        logit = loaded(image)[0, 1]
    assert float(tf.reduce_sum(tf.abs(tape.gradient(logit, image)))) > 0
    result = binaries.run(command + ["--weights=imagenet", "--model=small_cnn"],
                            capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "applies to keras_resnet50 and vgg16" in result.stderr
