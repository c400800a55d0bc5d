"""roar.train's mixed precision, evaluation-only mode, Inception-style training crop, and
resumption after a kill at any point."""
import json
import os
import re
import signal
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import models
from models.formats.preprocessing import inception_crop
from models.foundation.errors import UserError
from models.training import backup
from roar import train
from tests import REPO, binaries

SMALL = dict(transformation="raw_image", train_pattern="validation-*",
             eval_pattern="validation-*", num_classes=10, model="plain_cnn", epochs=1,
             batch_size=12, optimizer="sgd", base_learning_rate=0.5, warmup_epochs=0,
             eval_batch_size=8)


def _run_folder(output_dir):
    return os.path.join(output_dir, "raw_image", "0.00", "none", "remove", "element-mean",
                        "seed_0")


def test_mixed_precision_trains_with_float32_logits_and_exports_float32(small_shards, tmp_path):
    data_dir = os.path.dirname(small_shards[0])
    result = train.run(train.Config(data_dir=data_dir, output_dir=str(tmp_path),
                                    precision="mixed_bfloat16", train_crop="inception",
                                    **SMALL))
    assert keras.mixed_precision.global_policy().name == "float32"  # restored
    assert result["precision"] == "mixed_bfloat16" and np.isfinite(result["loss_per_epoch"][0])
    loaded = models.load(os.path.join(_run_folder(str(tmp_path)), "model"))
    logits = loaded(tf.zeros([2, 32, 32, 3]))
    assert logits.dtype == tf.float32
    # --mode=eval of the exported model gives the training run's own evaluation.
    again = train.run(train.Config(data_dir=data_dir, output_dir=str(tmp_path), mode="eval",
                                   checkpoint=os.path.join(_run_folder(str(tmp_path)), "model"),
                                   **SMALL))
    assert again["n_eval"] == 36
    assert again["top1"] == pytest.approx(result["top1"], abs=1 / 36 + 1e-9)
    assert os.path.exists(os.path.join(_run_folder(str(tmp_path)), "eval_model.json"))


def test_eval_mode_reads_a_killed_runs_weights_and_refuses_bad_checkpoints(small_shards,
                                                                           tmp_path):
    data_dir = os.path.dirname(small_shards[0])
    stopped = train.run(train.Config(data_dir=data_dir, output_dir=str(tmp_path),
                                     stop_after_epochs=1, **{**SMALL, "epochs": 2}))
    assert stopped == {"stopped_after_epoch": 1}
    weights = os.path.join(_run_folder(str(tmp_path)), "backup", "epoch-0001.weights.h5")
    result = train.run(train.Config(data_dir=data_dir, output_dir=str(tmp_path / "eval"),
                                    mode="eval", checkpoint=weights, **SMALL))
    assert result["n_eval"] == 36 and 0.0 <= result["top1"] <= result["top5"] <= 1.0
    with pytest.raises(UserError, match="does not hold small_cnn weights"):
        train.run(train.Config(data_dir=data_dir, output_dir=str(tmp_path / "eval"),
                               mode="eval", checkpoint=weights,
                               **{**SMALL, "model": "small_cnn"}))
    with pytest.raises(UserError, match="--mode=eval needs --checkpoint"):
        train.run(train.Config(data_dir=data_dir, mode="eval", **SMALL))


def test_inception_crop_known_answers():
    ramp = tf.tile(tf.linspace(0.0, 1.0, 64)[None, :, None], [64, 1, 3])
    seeds = [tf.constant([0, k], tf.int64) for k in range(8)]
    crops = [inception_crop(ramp, seed, 32).numpy() for seed in seeds]
    assert all(crop.shape == (32, 32, 3) for crop in crops)
    np.testing.assert_array_equal(inception_crop(ramp, seeds[0], 32).numpy(), crops[0])
    assert len({crop.tobytes() for crop in crops}) > 1  # the seed moves the box
    for crop in crops:  # a horizontal ramp stays a ramp: rows equal, columns non-decreasing
        np.testing.assert_allclose(crop, np.broadcast_to(crop[:1], crop.shape), atol=1e-6)
        assert np.all(np.diff(crop[0, :, 0]) >= -1e-4)
    flat = inception_crop(tf.fill([40, 48, 3], 0.25), seeds[3], 32).numpy()
    np.testing.assert_allclose(flat, 0.25, atol=1e-6)


KILL_POINTS = ("batch:0:1", "weights:1", "uncommitted:2", "committed:2", "batch:2:1",
               "weights:3", "export")
DAMAGED_AFTER = "batch:2:1"  # its last committed backup is damaged before the next run


def test_a_run_killed_anywhere_ends_with_the_uninterrupted_weights(small_shards, tmp_path):
    """`roar.train` killed with SIGKILL at each point of KILL_POINTS in turn (inside an epoch,
    half-way through a backup's weights, between the weights and their commit, after the commit,
    inside the export), each run resuming what the run before it left, then run until it
    finishes: the same model as an uninterrupted run, bit for bit, after resuming from the
    epochs the committed states say. At DAMAGED_AFTER the committed backup is damaged on disk
    before the next run: set aside with one line, that run continues from the state before it
    (before: an h5py traceback on every re-run). (One chain of runs, not a kill and a resume per
    point: each run is the resume of the point before it.)"""
    data_dir = os.path.dirname(small_shards[0])
    flags = [f"--{key}={value}" for key, value in {**SMALL, "epochs": 3}.items()]

    def run(point, output, *more):
        return binaries.run([sys.executable, os.path.join(REPO, "tests", "kill_training.py"),
                             point, f"--data_dir={data_dir}", f"--output_dir={output}", *flags,
                             *more], cwd=REPO, timeout=300)

    def metrics(output):
        with open(os.path.join(_run_folder(str(output)), "metrics.json")) as handle:
            return json.load(handle)

    uninterrupted = run("none", tmp_path / "whole")
    assert uninterrupted.returncode == 0
    whole = metrics(tmp_path / "whole")
    # progress in a log: timestamped lines, no carriage-return bars or colours (before: Keras'
    # bar, redrawn with \r and ANSI codes into the file)
    logged = uninterrupted.stdout + uninterrupted.stderr
    assert "\r" not in logged and "\x1b" not in logged
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d training plain_cnn: 9/9 step \(100%\)",
                     uninterrupted.stderr, re.M)
    again = run("none", tmp_path / "whole")  # a finished run of the same origin is reused
    assert again.returncode == 0 and metrics(tmp_path / "whole") == whole
    refused = run("none", tmp_path / "whole", "--base_learning_rate=0.01")
    assert refused.returncode == 2 and re.search(
        r"error: run folder .*seed_0 was made with base_learning_rate=0.5, not 0.01; pass "
        r"--overwrite", refused.stderr)
    refused = run("none", tmp_path / "whole", "--train_crop=inception")
    assert "was made with train_crop=none, not inception" in refused.stderr  # a pipeline setting
    chain = tmp_path / "chain"
    folder = os.path.join(_run_folder(str(chain)), "backup")

    def committed():  # {state file: (inode, mtime)} of the states committed so far
        names = os.listdir(folder) if os.path.isdir(folder) else []
        stats = {name: os.stat(os.path.join(folder, name)) for name in names
                 if backup.STATE.match(name)}
        return {name: (stat.st_ino, stat.st_mtime_ns) for name, stat in stats.items()}

    damaged = None
    for point in KILL_POINTS:
        before = committed()
        killed = run(point, chain)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
        assert not os.path.exists(os.path.join(_run_folder(str(chain)), "metrics.json"))
        # each run resumed from the newest usable state: no committed epoch was trained again
        # (a state older than the two kept may be dropped)
        after = committed()
        assert all(after.get(name, kept) == kept for name, kept in before.items()
                   if name != damaged), point
        if damaged:  # this run said so and went back one epoch
            assert ("the state after epoch 2 is damaged (epoch-0002.weights.h5 is 1000 bytes, "
                    "not the " in killed.stdout) and "resuming from epoch 1" in killed.stdout
            with open(os.path.join(folder, backup.DAMAGED, damaged)) as handle:
                # epoch 2 was committed by the run that resumed at 1 (after uncommitted:2)
                assert json.load(handle)["progress"]["resumed_at_epochs"] == [1]
            damaged = None
        if point == DAMAGED_AFTER:  # a committed state damaged on disk (a bad sector, a copy
            # cut short): set aside with one line, the next run resumes from the state before it
            with open(os.path.join(folder, backup.weights_name(2)), "r+b") as handle:
                handle.truncate(1000)
            damaged = backup.state_name(2)
    finished = run("none", chain)
    assert finished.returncode == 0, finished.stderr[-2000:]
    result = metrics(chain)
    assert result["model_id"] == whole["model_id"]
    # the resumptions that led to this model: at 1 (epoch 2 damaged), at 2 (after weights:3) and
    # at 3 (after the export); the runs killed before a commit left no record
    assert result["resumed_at_epochs"] == [1, 2, 3]
