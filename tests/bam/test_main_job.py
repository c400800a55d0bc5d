"""The main job, README command 1's `python -m bam.metrics ...` exactly as the README prints it,
on the default synthetic world with the shipped models (in the session's temporary cache): its
table is pinned, so a change of the main job's numbers is a decision made here, not an accident.

The values below were printed on an AMD EPYC (Zen 3, AVX2) with TensorFlow 2.21 (whose oneDNN
kernels are off by default on that CPU: no start-up line says they are on); with oneDNN on,
the project's default since (docs/architecture.md, "oneDNN"), the table prints the same. The
shipped weights make them the same on other CPUs up to inference rounding: MCS is compared to
1e-3 and at most one rate of the 16 may move by one image (0.1) where an image's score sits on a
threshold."""
import json
import os
import sys

from models.foundation.files import project_cache_dir
from saliency_gen.data.world import shipped
from scripts.measure_first_run import readme_main_job
from tests import REPO, binaries

METHODS = ("GC", "VG", "SG", "IG", "IG-SG", "GxI", "GB", "GGC")
PINNED = {  # GC, VG, SG, IG, IG-SG, GxI, GB, GGC (9 of 10 images correct for MCS, 10 for both)
    "MCS": (0.3823, 0.1036, 0.2085, 0.0504, 0.0441, 0.1401, 0.1033, 0.2082),
    "IDR": (0.8, 0.6, 0.7, 0.7, 0.6, 0.8, 0.7, 0.9),
    "IIR": (0.9, 0.7, 0.8, 0.2, 0.0, 0.7, 0.3, 0.3),
}


def test_the_main_jobs_table_is_pinned(trained_world, tmp_path):
    output = tmp_path / "bam_metrics.json"
    done = binaries.run([sys.executable, *readme_main_job(), f"--output={output}"],
                        check=False, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    # nothing was trained or made here (whichever test first set up the world loaded them)
    assert "trained " not in done.stdout and "delta patch:" not in done.stdout
    cache = project_cache_dir("synthetic_seed0")
    assert all(shipped.is_installed_copy(os.path.join(cache, "bam_models", name))
               for name in ("obj", "scene", "scene_only"))
    values = json.loads(output.read_text())
    assert values["origin"]["settings"]["num_imgs"] == 10
    moved = []
    for metric, pinned in PINNED.items():
        assert set(values[metric]) == set(METHODS), values[metric]
        found = [values[metric][name] for name in METHODS]
        for method, value, expected in zip(METHODS, found, pinned):
            if metric == "MCS":
                assert abs(value - expected) <= 1e-3, (metric, method, value, expected)
            elif abs(value - expected) > 1e-9:
                moved.append((metric, method, value, expected))
    assert len(moved) <= 1 and all(abs(v - e) <= 0.1 + 1e-9 for _, _, v, e in moved), moved
    # The re-run reads the region scores kept in the world's cache: the very same numbers.
    kept = os.path.join(cache, "bam_scores")
    # obj on obj; scene on scene, scene_only; scene_only on 2
    assert len(_files_of_all_methods(kept)) == 5
    again = tmp_path / "again.json"
    rerun = binaries.run([sys.executable, *readme_main_job(), f"--output={again}"],
                         check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(again.read_text()) == values


def _files_of_all_methods(folder):
    """The score files in `folder` holding every method of the main job: its own. (The session's
    cache is shared: other tests keep the scores of other images or methods beside them.)"""
    found = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            if set(json.load(handle)["methods"]) >= set(METHODS):
                found.append(name)
    return found
