"""No input file can run code (docs/architecture.md, "No code from data"): the packages never
unpickle a file except through the two restricted unpicklers, and those refuse any global a
crafted file names before calling it (the binaries' side: tests/test_error_catalogue.py,
`bam-pickled-val-mask`; checkpoints: tests/models/test_torch_pickle.py)."""
import glob
import os
import pickle
import re

import numpy as np
import pytest

from models.formats import object_arrays
from models.foundation.errors import UserError
from saliency_gen.data.world import dataset
from tests import REPO
from tests.conftest import WritesMarker

PACKAGES = ("models", "saliency_gen", "bam", "roar", "faithfulness", "scripts")
FORBIDDEN = re.compile(r"load\([^)]*allow_pickle=True|pickle\.loads?\(|(?<![.\w])(eval|exec)\("
                       r"|torch\.load\((?![^)]*weights_only=True)|Unpickler\)")  # a subclass
# (file, forbidden text): the only places allowed, each with its reason.
ALLOWED = {
    # the two restricted unpicklers, which resolve an allowlist of globals only
    ("models/formats/torch_pickle.py", "Unpickler)"),
    ("models/formats/object_arrays.py", "Unpickler)"),
    # `--help` evaluates expressions of the project's own source files, never an input file
    ("models/foundation/cli.py", "eval("),
}


def test_the_packages_unpickle_nothing_but_through_the_restricted_readers():
    found = set()
    for package in PACKAGES:
        for path in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True):
            text = open(path, encoding="utf-8").read()
            found |= {(os.path.relpath(path, REPO), match.group(0).lstrip("("))
                      for match in FORBIDDEN.finditer(text)}
    # the pattern itself catches what it must, and lets the safe forms pass
    assert all(FORBIDDEN.search(text) for text in (
        "pickle.load(h)", "pickle.loads(b)", "torch.load(p)", "np.load(p, allow_pickle=True)",
        "eval(x)", "exec(x)", "class U(pickle.Unpickler):"))
    assert not any(FORBIDDEN.search(text) for text in (
        "torch.load(p, weights_only=True)", "np.load(p, allow_pickle=False)", "model.eval()"))
    assert found <= ALLOWED, sorted(found - ALLOWED)


def test_val_masks_round_trip_and_a_numpy_1_pickle_reads(tmp_path):
    masks = [np.eye(3, dtype=np.uint8), np.ones((2, 5), np.uint8)]
    dataset.save_masks(str(tmp_path / "val_mask"), [m * 7 for m in masks])
    read = dataset.load_masks(str(tmp_path / "val_mask"))
    assert [m.tolist() for m in read] == [m.tolist() for m in masks]
    # numpy 1.x names its rebuild function numpy.core.multiarray._reconstruct
    data = open(tmp_path / "val_mask", "rb").read()
    header_end = data.index(b"\n") + 1
    legacy = tmp_path / "legacy_mask"
    array = np.empty(2, dtype=object)
    array[:] = masks
    body = pickle.dumps(array, protocol=2).replace(b"numpy._core.multiarray",
                                                   b"numpy.core.multiarray")
    legacy.write_bytes(data[:header_end] + body)
    assert [m.tolist() for m in object_arrays.load_object_array(str(legacy))] == \
        [m.tolist() for m in masks]


@pytest.mark.parametrize("payload", ["global", "nested", "not_arrays"])
def test_a_crafted_array_file_is_refused_in_one_line(payload, tmp_path):
    marker, path = tmp_path / "marker", tmp_path / "val_mask"
    array = np.empty(2, dtype=object)
    array[0] = np.eye(2, dtype=np.uint8)
    array[1] = {"global": WritesMarker(marker), "not_arrays": "text",
                "nested": np.array([WritesMarker(marker)], dtype=object)}[payload]
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=True)
    with pytest.raises(UserError) as raised:
        dataset.load_masks(str(path))
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    if payload != "not_arrays":
        assert "posix.system" in str(raised.value)
    assert not marker.exists()
