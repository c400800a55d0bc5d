"""roar.train under tf.distribute: MirroredStrategy on two logical CPUs and
MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1 follow one device's loss
trajectory with the same global batch; a multi-worker run stopped after an epoch resumes to the
uninterrupted run's result."""
import concurrent.futures
import json
import os
import socket
import sys

import numpy as np
import pytest

from tests import REPO, binaries

# plain_cnn (no batch norm, so replicas compute exactly the one-device loss), SGD, 3 epochs of
# 3 steps of 12 images. Tolerance: float sums in another order, amplified by 9 steps of SGD.
TOLERANCE = 1e-4
TIMEOUT = 300


def _arguments(data_dir, output_dir, *extra):
    return [sys.executable, "-m", "roar.train", "--transformation=raw_image",
            f"--data_dir={data_dir}", "--train_pattern=validation-*",
            "--eval_pattern=validation-*", "--num_classes=10", "--model=plain_cnn",
            "--epochs=3", "--batch_size=12", "--optimizer=sgd", "--base_learning_rate=0.5",
            "--warmup_epochs=0", "--eval_batch_size=8", f"--output_dir={output_dir}", *extra]


def _metrics(output_dir):
    path = os.path.join(output_dir, "raw_image", "0.00", "none", "remove", "element-mean",
                        "seed_0", "metrics.json")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _run(arguments, env=None):
    done = binaries.run(arguments, cwd=REPO, env=env, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for item in sockets:
        item.bind(("127.0.0.1", 0))
    ports = [item.getsockname()[1] for item in sockets]
    for item in sockets:
        item.close()
    return ports


def _two_workers(arguments):
    """Runs `arguments` as the two workers of a TF_CONFIG cluster on 127.0.0.1; returns their
    standard outputs."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda index: binaries.run(
            arguments, cwd=REPO, timeout=TIMEOUT, env={**os.environ, "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}})}), range(2)))
    for worker in done:
        assert worker.returncode == 0, worker.stderr[-3000:]
    outputs = [worker.stdout for worker in done]
    return outputs


@pytest.fixture(scope="module")
def one_device(small_shards, tmp_path_factory):
    data_dir = os.path.dirname(small_shards[0])
    output = str(tmp_path_factory.mktemp("one_device"))
    _run(_arguments(data_dir, output))
    return data_dir, _metrics(output)


def test_mirrored_on_two_logical_cpus_follows_one_device(one_device, tmp_path):
    data_dir, expected = one_device
    _run(_arguments(data_dir, str(tmp_path), "--strategy=mirrored", "--cpu_replicas=2"))
    found = _metrics(str(tmp_path))
    assert found["replicas"] == 2 and expected["replicas"] == 1
    assert len(found["loss_per_epoch"]) == 3
    np.testing.assert_allclose(found["loss_per_epoch"], expected["loss_per_epoch"],
                               rtol=TOLERANCE)
    assert abs(found["top1"] - expected["top1"]) <= 1 / 36  # at most one image of 36


def test_two_workers_train_evaluate_and_resume_like_one(one_device, tmp_path):
    data_dir, expected = one_device
    whole = str(tmp_path / "whole")
    _two_workers(_arguments(data_dir, whole, "--strategy=multi_worker"))
    found = _metrics(whole)
    assert found["replicas"] == 2 and found["n_eval"] == 36
    np.testing.assert_allclose(found["loss_per_epoch"], expected["loss_per_epoch"],
                               rtol=TOLERANCE)
    assert abs(found["top1"] - expected["top1"]) <= 1 / 36
    assert not [name for name in os.listdir(tmp_path) if ".worker-" in name]  # scratch gone

    resumed = str(tmp_path / "resumed")
    stopped = _two_workers(_arguments(data_dir, resumed, "--strategy=multi_worker",
                                      "--stop_after_epochs=1"))
    assert all("stopped after epoch 1" in out for out in stopped)
    _two_workers(_arguments(data_dir, resumed, "--strategy=multi_worker"))
    again = _metrics(resumed)
    assert again["resumptions"] == 1 and again["first_epoch"] == 1
    assert again["top1"] == found["top1"] and again["model_id"] == found["model_id"]
    np.testing.assert_allclose(again["loss_per_epoch"], found["loss_per_epoch"][1:], rtol=1e-6)
