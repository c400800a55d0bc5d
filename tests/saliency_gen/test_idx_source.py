"""IDX files (the Fashion-MNIST format) become image records: a small fixture written in the real
format (gzip, big-endian header), one line for a truncated or foreign file, and Debian's real
Fashion-MNIST files when they are installed; the Fashion-MNIST ROAR / KAR command end to end on
the fixture."""
import gzip
import os
import struct

import numpy as np
import pytest

from models.foundation.errors import UserError
from saliency_gen.data import pipelines, records
from saliency_gen.data.sources import idx


def write_idx(path, array, type_code=0x08):
    """Writes `array` as an IDX file (gzip-compressed when `path` ends in .gz)."""
    array = np.asarray(array)
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(idx.IDX_TYPES[type_code]).tobytes()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as handle:
        handle.write(data)


@pytest.fixture
def idx_files(tmp_path):
    """Four Fashion-MNIST-named IDX files of 40 training and 20 test images of 28 x 28 px, a
    bright square whose corner says the class (0-9)."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 40), ("test", 20)):
        labels = np.arange(count) % 10
        images = rng.integers(0, 30, (count, 28, 28)).astype(np.uint8)
        for index, label in enumerate(labels):
            row, column = divmod(int(label), 5)
            images[index, 4 + 10 * row:12 + 10 * row, 2 + 5 * column:6 + 5 * column] = 255
        write_idx(str(tmp_path / idx.FASHION_MNIST_FILES[f"{split}_images"]), images)
        write_idx(str(tmp_path / idx.FASHION_MNIST_FILES[f"{split}_labels"]), labels)
    return tmp_path


def test_idx_files_become_image_records(idx_files, tmp_path):
    images = idx.read_idx(str(idx_files / idx.FASHION_MNIST_FILES["train_images"]))
    assert images.shape == (40, 28, 28) and images.dtype == np.uint8
    assert idx.read_idx(str(idx_files / idx.FASHION_MNIST_FILES["test_labels"]))[:3].tolist() \
        == [0, 1, 2]
    shorts = np.arange(-3, 3, dtype=np.int16).reshape(2, 3)  # a big-endian type round trip
    write_idx(str(tmp_path / "shorts.idx"), shorts, 0x0B)
    assert np.array_equal(idx.read_idx(str(tmp_path / "shorts.idx")), shorts)
    written = idx.run(idx.Config(**{key: str(idx_files / name) for key, name in
                                    idx.FASHION_MNIST_FILES.items()},
                                 output_dir=str(tmp_path / "records"), train_limit=30))
    assert [os.path.basename(p) for p in written["train"]] == ["train-00000-of-00001.tfrecord"]
    assert pipelines.count_records(written["train"]) == 30
    assert pipelines.count_records(written["validation"]) == 20
    decoded = list(pipelines.explanation_inputs(written["validation"], (28, 28, 3),
                                                _identity_space(), "none").take(2))
    key, _, label, pixels, height, width = decoded[1]
    assert key.numpy() == b"validation_1" and int(label) == 1 and (height, width) == (28, 28)
    expected = images_of(idx_files, "test")[1] / 255.0
    for channel in range(3):  # grayscale read as three equal channels, exactly
        assert np.allclose(pixels.numpy()[..., channel], expected, atol=1e-6)


def images_of(folder, split):
    return idx.read_idx(str(folder / idx.FASHION_MNIST_FILES[f"{split}_images"]))


def _identity_space():
    from models.formats.preprocessing import input_space
    return input_space("pixels01")


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-5], "truncated or padded"),
    (lambda data: b"\x01\x02" + data[2:], "not an IDX file"),
    (lambda data: data[:6], "cut off"),
])
def test_damaged_idx_files_are_one_line(idx_files, tmp_path, damage, message):
    source = str(idx_files / "t10k-labels-idx1-ubyte.gz")
    with gzip.open(source, "rb") as handle:
        data = handle.read()
    path = str(tmp_path / "damaged.idx")
    with open(path, "wb") as handle:
        handle.write(damage(data))
    with pytest.raises(UserError, match=message) as caught:
        idx.read_idx(path)
    assert str(caught.value).startswith(path) and "\n" not in str(caught.value)


@pytest.mark.skipif(not os.path.isdir(idx.FASHION_MNIST_DIR),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_the_real_fashion_mnist_files():
    folder = idx.FASHION_MNIST_DIR
    train, labels = idx.read_split(os.path.join(folder, idx.FASHION_MNIST_FILES["train_images"]),
                                   os.path.join(folder, idx.FASHION_MNIST_FILES["train_labels"]))
    assert train.shape == (60000, 28, 28) and np.bincount(labels).tolist() == [6000] * 10
    test = idx.read_idx(os.path.join(folder, idx.FASHION_MNIST_FILES["test_images"]))
    assert test.shape == (10000, 28, 28)


def test_the_fashion_mnist_roar_command_end_to_end(idx_files, tmp_path):
    from roar import fashion_mnist

    config = fashion_mnist.Config(
        output_dir=str(tmp_path / "sweep"), idx_dir=str(idx_files), train_images=40,
        test_images=20, methods=("SH",), ratios=("0.5",), modes=("kar",),
        seeds=("0",), epochs=1.0, base_epochs=1.0, batch_size=20)
    summary = fashion_mnist.run(config)
    cells = {(row["method"], row["mode"]) for row in summary}
    # KAR (not the default): the mode reaches the runs; ROAR itself and the random control's
    # runs (--transformation=random_baseline) are tested in tests/roar.
    assert cells == {("SH", "KAR")}
    assert all(row["n"] == 1 and 0.0 <= row["mean"] <= 1.0 for row in summary)
    report = (tmp_path / "sweep" / "fashion_mnist_roar.md").read_text()
    assert "95% interval" in report
    maps = records.list_files(str(tmp_path / "sweep" / "saliency" / "SH" / "*.tfrecord"))
    assert sum(pipelines.count_records([path]) for path in maps) == 60  # every image
