"""scripts/device_check.sh at its small sizes, as it runs on a machine without a GPU (CI): all
four phases run, and its one table gives each phase's wall time, the engine's and the scorer's
rates with their ratio to the ceiling, and the card's efficiency."""
import json
import os
import shutil
import subprocess
import sys

from tests import REPO


def test_the_device_check_runs_on_a_cpu_at_small_sizes(tmp_path):
    output = tmp_path / "check"
    done = subprocess.run(["bash", os.path.join(REPO, "scripts", "device_check.sh"),
                           "--size=small", f"--output_dir={output}"], cwd=REPO,
                          capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads((output / "device_check.json").read_text())
    assert report["size"] == "small"
    assert list(report["phases"]) == ["engine", "faithfulness", "main job", "real card"]
    gpu = "no nvidia-smi" if shutil.which("nvidia-smi") is None else None
    for phase in report["phases"].values():
        assert phase["seconds"] > 0 and (gpu is None or phase["gpu"] == gpu)
    rows = {(row[0], row[2]): row for row in report["rows"]}
    assert 0 < float(rows["engine", "plain_cnn@32: gradient"][4]) < 5
    assert 0 < float(rows["faithfulness", "8-16-32: Deletion"][4]) < 5
    card = next(row for row in report["rows"] if row[0] == "real card" and "cells" in row[2])
    assert card[2].startswith("2 cells") and card[4].startswith("efficiency ")
    assert "| engine |" in (output / "device_check.md").read_text()


def test_the_device_probe_reads_cuda_majors_and_the_cards_pass_time():
    """scripts/device_probe.py, the check run first on a borrowed GPU machine: it tells which
    CUDA majors are there against those TensorFlow needs, and the seconds the real card's passes
    would take at the fastest float32 rates of Lite0's twin (other twins and bfloat16 ignored)."""
    from scripts import device_probe

    found = device_probe.majors_of(["/usr/lib/libcudart.so.13.0.96", "libcublas.so.13",
                                    "libcublasLt.so.12", "x/nvidia/cudnn/lib/libcudnn.so.9",
                                    "libcudart.so.12", "libcudnn_ops.so.9", "libcudart.so"])
    assert found == {"libcudart": ["12", "13"], "libcublas": ["13"], "libcudnn": ["9"]}
    rows = [{"model": "efficientnet_lite0", "precision": "float32", "forward": 800.0,
             "gradient": 250.0},
            {"model": "efficientnet_lite0", "precision": "float32", "forward": 1000.0,
             "gradient": 200.0},
            {"model": "efficientnet_lite0", "precision": "bfloat16", "forward": 9e9,
             "gradient": 9e9},
            {"model": "resnet50", "precision": "float32", "forward": 9e9, "gradient": 9e9}]
    config = device_probe.Config(card_forwards=5000, card_gradients=1000)
    assert device_probe.card_seconds(rows, config)["seconds"] == 5000 / 1000 + 1000 / 250


def test_the_engine_benchmark_tries_the_call_size_when_every_batch_size_exceeds_it():
    """scripts/bench_saliency.py scales its image counts by the pixels (64 images at 64 px are
    8 at 224 px): batch sizes above the call's images are left out, and where that leaves none
    the ceiling tries the call's own size (it had ended in a TypeError)."""
    from scripts import bench_saliency

    assert bench_saliency.ceiling_batch_sizes("16,32,64", 20) == [16]
    assert bench_saliency.ceiling_batch_sizes("16,32,64", 8) == [8]
