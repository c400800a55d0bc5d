"""PyTorch checkpoints are read without torch and without running code from them
(`models.formats.torch_pickle`): both serialisations, crafted pickles refused before anything runs,
truncated files one line; with torch installed, every tensor equals `torch.load`'s."""
import os
import sys
import zipfile

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


def test_a_crafted_checkpoint_cannot_make_the_reader_allocate_without_bound(tmp_path):
    """Every tensor is bounded by its storage and every archive member by its declared size,
    before anything is allocated or inflated (before: a 505-byte file with zero strides made a
    1.6 GB array, an 815 KB member inflated to 800 MB, a negative view offset read from the end
    of its storage, a deeply nested persistent id gave a RecursionError traceback)."""
    path = str(tmp_path / "crafted.pth")
    one = np.ones(1, np.float32)
    torch_format.write_checkpoint(path, {"w": torch_format.Tensor(
        one, "0", shape=(20000, 20000), strides=(0, 0))})
    assert os.path.getsize(path) < 1000
    with pytest.raises(UserError, match=r"has 400000000 elements, more than the 1 of its "):
        torch_pickle.read_checkpoint(path)
    zeros = np.zeros(5_000_000, np.float32)  # 20 MB of zeros deflate to about 20 KB
    torch_format.write_checkpoint(path, torch_format.tensors_of({"w": zeros}),
                                  compression=zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < 100_000
    with pytest.raises(UserError, match=r"data/0 would inflate \d+ bytes to 20000000; refused"):
        torch_pickle.read_checkpoint(path)
    torch_format.write_checkpoint(path, {"w": torch_format.Tensor(
        np.arange(8, dtype=np.float32), "0", shape=(2,), strides=(1,), view=("0", -4, 2))},
        legacy=True)
    with pytest.raises(UserError, match="a storage view outside its root storage"):
        torch_pickle.read_checkpoint(path)
    with zipfile.ZipFile(path, "w") as archive:  # a persistent id nested 100,000 deep
        archive.writestr("archive/data.pkl", b"\x80\x02)" + b"\x85" * 100_000 + b"Q.")
    with pytest.raises(UserError, match="an unknown persistent id"):
        torch_pickle.read_checkpoint(path)
    shared: list = []  # 40 levels of a list holding the level below twice: 2^40 leaves
    for _ in range(40):
        shared = [shared, shared]
    torch_format.write_checkpoint(path, {"nested": shared})
    assert len(torch_pickle.read_checkpoint(path)["nested"]) == 2  # each level converted once


def test_a_state_dict_of_the_wrong_shape_is_one_line(tmp_path):
    """Keys that are not names, and a tensor of the wrong rank, are one line naming them
    (before: an AttributeError and a ValueError traceback in the converter)."""
    import keras

    from models.formats import torch_checkpoints

    path = str(tmp_path / "state.pth")
    torch_format.write_checkpoint(path, torch_format.tensors_of(
        {1: np.ones((2, 2), np.float32), "fc.bias": np.ones(2, np.float32)}))
    with pytest.raises(UserError, match="state dict key 1 is not a name"):
        torch_checkpoints.read_state_dict(path)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, name="conv1")])
    state = {"conv1.weight": np.ones(4 * 3 * 3 * 3, np.float32), "conv1.bias": np.ones(4)}
    with pytest.raises(UserError, match=r"conv1.weight has shape \(108,\), which layer conv1 "):
        torch_checkpoints.load_state_dict(model, state)
