"""PyTorch checkpoints are read without torch and without running code from them
(`models.formats.torch_pickle`): both serialisations, crafted pickles refused before anything runs,
truncated files one line; with torch installed, every tensor equals `torch.load`'s."""
import os
import sys

import numpy as np
import pytest

from models.formats import torch_pickle
from models.foundation.errors import UserError
from tests import binaries, torch_format
from tests.conftest import WritesMarker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_pickle_that_would_run_code_is_refused(legacy, tmp_path):
    marker = tmp_path / "marker"
    path = str(tmp_path / "crafted.pth")
    state = torch_format.tensors_of({"conv.weight": np.ones((2, 3), np.float32)})
    torch_format.write_checkpoint(path, {**state, "payload": WritesMarker(marker)}, legacy)
    with pytest.raises(torch_pickle.UnsafeCheckpointError) as caught:
        torch_pickle.read_checkpoint(path)
    assert str(caught.value).startswith(f"{path}: refused") and "posix.system" in str(caught.value)
    assert not marker.exists()
    # The same file without the payload reads back exactly.
    torch_format.write_checkpoint(path, state, legacy)
    assert np.array_equal(torch_pickle.read_checkpoint(path)["conv.weight"], np.ones((2, 3)))


def test_the_converter_binary_refuses_a_crafted_checkpoint_in_one_line(tmp_path):
    marker, output = tmp_path / "marker", tmp_path / "export"
    path = str(tmp_path / "resnet18.pth")
    torch_format.write_checkpoint(path, {"fc.weight": WritesMarker(marker)}, legacy=True)
    result = binaries.run(
        [sys.executable, "-m", "models.formats.torch_checkpoints", "--model=resnet18",
         f"--checkpoint={path}", f"--output={output}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert lines == [f"error: {path}: refused: its pickle names the global posix.system, which "
                     "is not part of a tensor checkpoint (reading it could run code)"]
    assert not marker.exists() and not output.exists()


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])  # zip and legacy, written by torch
def test_truncated_checkpoints_are_one_line(name, tmp_path):
    source = os.path.join(ROOT, "tests", "data", "torch_checkpoints", f"{name}.pth")
    with open(source, "rb") as handle:
        data = handle.read()
    path = str(tmp_path / f"{name}.pth")
    with open(path, "wb") as handle:
        handle.write(data[:len(data) - 1000])
    with pytest.raises(UserError) as caught:
        torch_pickle.read_checkpoint(path)
    assert str(caught.value).startswith(path) and "\n" not in str(caught.value)


def test_every_tensor_equals_torch_load():
    torch = pytest.importorskip("torch")
    import tempfile

    tensors = {"transposed": torch.randn(4, 5).t(), "view": torch.arange(10)[2:7],
               "half": torch.randn(3, 3).half(), "parameter": torch.nn.Parameter(torch.ones(3)),
               "scalar": torch.tensor(2.5), "flag": torch.tensor([True, False])}
    for zip_format in (True, False):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "mixed.pth")
            torch.save({"state_dict": tensors, "epoch": 3}, path,
                       _use_new_zipfile_serialization=zip_format)
            found = torch_pickle.read_checkpoint(path)
        assert found["epoch"] == 3
        for key, tensor in tensors.items():
            assert np.array_equal(found["state_dict"][key], tensor.detach().numpy()), key
