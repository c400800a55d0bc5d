"""Shared fixtures: quiet TensorFlow, a tiny synthetic BAM world built once per session."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

# A world small enough to build in seconds, large enough for every folder to be populated.
TINY_WORLD = {"seed": 3, "image_size": 64, "train_per_pair": 2, "val_per_pair": 3}


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    from bam import synthetic

    root = str(tmp_path_factory.mktemp("world") / "bam")
    info = synthetic.build_world(root, **TINY_WORLD)
    return root, info
