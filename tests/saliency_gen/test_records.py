"""TFRecord schemas: writers and parsers round-trip, validation names file and record."""
import io
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import models
from models.foundation.errors import UserError
from saliency_gen.data import pipelines
from saliency_gen.data import records as R
from tests import fabricated


def _image_example(index=0):
    mask = np.zeros((8, 10), np.uint8)
    mask[2:5, 3:7] = 1
    return R.image_example(b"jpeg-bytes-%d" % index, 4, filename=f"img{index}.jpg",
                           scene_label=7, box=(0.25, 0.3, 0.625, 0.7), mask=mask), mask


def test_image_record_round_trip(tmp_path):
    example, mask = _image_example()
    path = str(tmp_path / "images.tfrecord")
    assert R.write_records(path, [example, R.image_example(b"x", 1)]) == 2
    assert R.check_file(path, "image") == 2
    parsed = [R.parse_image_record(record) for record in tf.data.TFRecordDataset(path)]
    first, second = parsed
    assert first["encoded"].numpy() == b"jpeg-bytes-0" and first["label"].numpy() == 4
    assert first["filename"].numpy() == b"img0.jpg" and first["scene_label"].numpy() == 7
    np.testing.assert_allclose(first["box"].numpy(), [[0.25, 0.3, 0.625, 0.7]])
    np.testing.assert_array_equal(R.decode_mask(first["mask_png"]).numpy(), mask.astype(bool))
    scene = R.parse_image_record(tf.data.TFRecordDataset(path).take(1).get_single_element(),
                                 label_key="image/scene/label")
    assert scene["label"].numpy() == 7
    # Optional fields get defaults.
    assert second["filename"].numpy() == b"" and second["scene_label"].numpy() == -1
    assert second["box"].shape == (0, 4)


def test_float16_maps_keep_tiny_gradients_and_their_ranking():
    saliency = np.random.default_rng(0).normal(0, 1e-7, (6, 5, 3)).astype(np.float32)
    encoded, scale = R.encode_map(saliency, "float16")
    assert scale == pytest.approx(np.abs(saliency).max())
    restored = tf.io.parse_tensor(encoded, tf.float16).numpy().astype(np.float32) * scale
    assert np.abs(restored - saliency).max() <= 1e-3 * np.abs(saliency).max()
    assert np.count_nonzero(restored) == saliency.size  # nothing flushed to zero
    zero, zero_scale = R.encode_map(np.zeros((2, 2, 1)), "float16")
    assert zero_scale == 1.0
    with pytest.raises(R.UserError, match="NaN or infinite"):
        R.encode_map(np.full((2, 2, 3), np.nan), "float16")
    with pytest.raises(R.UserError, match="unknown map dtype 'int8'"):
        R.encode_map(saliency, "int8")


@pytest.mark.parametrize("dtype", ["rank8", "float16", "float32"])
def test_saliency_record_round_trip_v2_and_legacy(tmp_path, dtype):
    rng = np.random.default_rng(1)
    first, second = rng.normal(size=(2, 4, 4, 3)).astype(np.float32)
    path = str(tmp_path / "maps.tfrecord")
    R.write_records(path, [
        R.saliency_example(b"img", 3, {"ig_image": first, "gradient_image": second},
                           prediction_class=5, height=40, width=50, example_key="k0",
                           model_id="small_cnn-abc", meta={"seed": 0}, dtype=dtype),
        fabricated.legacy_saliency_example(b"img2", 2, "ig_image", second),
    ])
    assert R.check_file(path, "saliency", key="ig_image", legacy_shape=(4, 4, 3)) == 2
    stored_dtype, shape, legacy = R.peek_saliency_format(path, "ig_image")
    assert (stored_dtype, shape, legacy) == (dtype, (4, 4, 3), False)
    dataset = R.keyed_records([path]).map(lambda key, record: R.parse_saliency_record(
        record, "ig_image", stored_dtype, shape, default_key=key))
    v2, old = list(dataset)
    if dtype == "rank8":
        encoded, scale = R.encode_map(first, "rank8")
        np.testing.assert_array_equal(v2["saliency"].numpy(),
                                      R.decode_map(encoded, "rank8", first.shape))
        np.testing.assert_array_equal(np.sign(v2["saliency"].numpy()), np.sign(first))
    else:
        tolerance = 1e-3 if dtype == "float16" else 0
        np.testing.assert_allclose(v2["saliency"].numpy(), first,
                                   atol=tolerance * np.abs(first).max())
    assert v2["prediction_class"].numpy() == 5 and v2["example_key"].numpy() == b"k0"
    assert (v2["height"].numpy(), v2["width"].numpy()) == (40, 50)
    np.testing.assert_array_equal(old["saliency"].numpy(), second)
    assert old["prediction_class"].numpy() == -1
    assert old["example_key"].numpy() == b"maps.tfrecord:1"
    features = tf.train.Example.FromString(
        next(iter(tf.data.TFRecordDataset(path))).numpy()).features.feature
    assert R.saliency_keys(features) == ["gradient_image", "ig_image"]
    assert features["saliency/model_id"].bytes_list.value[0] == b"small_cnn-abc"
    assert list(features["saliency/ig_image/shape"].int64_list.value) == [4, 4, 3]


def test_legacy_roar_records_are_read_at_224(tmp_path):
    saliency = np.random.default_rng(2).normal(size=(224, 224, 3)).astype(np.float32)
    path = str(tmp_path / "legacy")
    R.write_records(path, [fabricated.legacy_saliency_example(b"raw", 9, "ig_smooth_2", saliency)])
    dtype, shape, legacy = R.peek_saliency_format(path, "ig_smooth_2")
    assert legacy and shape == (224, 224, 3)
    record = R.keyed_records([path]).map(lambda key, record: R.parse_saliency_record(
        record, "ig_smooth_2", dtype, shape, default_key=key)).get_single_element()
    np.testing.assert_array_equal(record["saliency"].numpy(), saliency)
    assert record["label"].numpy() == 9


def _feature(**kwargs):
    return tf.train.Example(features=tf.train.Features(feature=kwargs))


@pytest.mark.parametrize("bad, message", [
    (_feature(**{"image/class/label": R._ints([1])}),
     "record 1: missing required feature 'image/encoded' (bytes)"),
    (_feature(**{"image/encoded": R._bytes([b"x"]), "image/class/label": R._floats([1.0])}),
     "record 1: feature 'image/class/label' holds float values; expected int64"),
    (_feature(**{"image/encoded": R._bytes([b"x"]), "image/class/label": R._ints([1, 2])}),
     "record 1: feature 'image/class/label' has 2 values; expected 1"),
    (_feature(**{"image/encoded": R._bytes([b"x"]), "image/class/label": R._ints([1]),
                 "image/object/bbox/ymin": R._floats([0.1])}),
     "record 1: the object box needs all of"),
])
def test_image_schema_errors_name_file_and_record(tmp_path, bad, message):
    path = str(tmp_path / "bad.tfrecord")
    R.write_records(path, [_image_example()[0], bad])
    with pytest.raises(R.RecordError) as error:
        R.check_file(path, "image")
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)


def test_saliency_schema_errors(tmp_path):
    path = str(tmp_path / "maps")
    good = R.saliency_example(b"i", 1, {"ig_image": np.ones((2, 2, 3))})
    legacy = fabricated.legacy_saliency_example(b"i", 1, "ig_image", np.ones(12))
    R.write_records(path, [good, legacy])
    with pytest.raises(R.RecordError, match=r"record 1: legacy map 'ig_image' has 12 values; "
                                            r"expected 150528 \(224x224x3\)"):
        R.check_file(path, "saliency", key="ig_image")
    with pytest.raises(R.RecordError, match="record 0: no saliency map 'sobel'; the record "
                                            "holds ig_image"):
        R.check_file(path, "saliency", key="sobel")
    image_path = str(tmp_path / "images")
    R.write_records(image_path, [_image_example()[0]])
    with pytest.raises(R.RecordError, match="missing required feature 'raw_image'"):
        R.check_file(image_path, "saliency")


def test_corrupt_and_foreign_files_are_named(tmp_path):
    path = tmp_path / "truncated.tfrecord"
    R.write_records(str(path), [_image_example(i)[0] for i in range(3)])
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(R.RecordError, match=r"truncated.tfrecord: record 2: corrupt or truncated"):
        R.check_file(str(path), "image")
    flipped = bytearray(data)
    flipped[40] ^= 0xFF
    path.write_bytes(bytes(flipped))
    with pytest.raises(R.RecordError, match="record 0: corrupt or truncated"):
        R.check_file(str(path), "image")
    text = tmp_path / "notes.txt"
    text.write_text("not a tfrecord at all, just some words " * 3)
    with pytest.raises(R.RecordError, match="notes.txt: record 0"):
        R.check_file(str(text), "image")
    empty = tmp_path / "empty.tfrecord"
    R.write_records(str(empty), [])
    with pytest.raises(R.RecordError, match="empty.tfrecord: holds no records"):
        R.check_file(str(empty), "image")
    with pytest.raises(R.MissingPathError, match="does not exist"):
        R.check_file(str(tmp_path / "missing.tfrecord"), "image")
    with pytest.raises(R.MissingPathError, match=r"no files match --input_pattern=.*\*.nothing"):
        R.list_files(str(tmp_path / "*.nothing"))


def test_not_an_example_is_named(tmp_path):
    path = str(tmp_path / "garbage.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"\xff\xfe this is no protobuf \x00\x01")
    with pytest.raises(R.RecordError, match="record 0: not a tf.train.Example"):
        R.check_file(path, "image")


def test_interrupted_write_leaves_no_file(tmp_path):
    def examples():
        yield _image_example()[0]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        R.write_records(str(tmp_path / "out.tfrecord"), examples())
    assert list(tmp_path.iterdir()) == []


def test_list_files_is_sorted(tmp_path):
    for name in ("b-00001", "a-00000", "b-00000"):
        (tmp_path / name).write_bytes(b"")
    assert [p.rsplit("/", 1)[1] for p in R.list_files(str(tmp_path / "*"))] == \
        ["a-00000", "b-00000", "b-00001"]


def _top_k(scores, k):
    """ROAR's selection: the k largest scores, the lower flat index first on ties."""
    return set(np.argsort(-scores.ravel(), kind="stable")[:k].tolist())


def test_rank8_is_a_quarter_of_float32_and_exact_for_roar_at_every_integer_percent():
    rng = np.random.default_rng(4)
    saliency = rng.standard_t(3, size=(224, 224, 3)).astype(np.float32) * 1e-4
    saliency[:20] = 0.0  # ties: a block of zeros
    saliency[50:60] = np.float32(2e-4)  # ties: equal non-zero values
    encoded, scale = R.encode_map(saliency, "rank8")
    assert len(encoded) == saliency.size == 602_112 // 4
    assert scale == pytest.approx(np.abs(saliency).max())
    decoded = R.decode_map(encoded, "rank8", saliency.shape)
    np.testing.assert_array_equal(np.sign(decoded)[saliency != 0], np.sign(saliency)[saliency != 0])
    for percent in range(1, 100):
        k = R.ranking_cut(percent, saliency.size)
        assert _top_k(np.abs(decoded), k) == _top_k(np.abs(saliency), k), percent
    assert [R.ranking_cut(q, 150_528) for q in (10, 30, 50, 70, 90)] == \
        [15_052, 45_158, 75_264, 105_369, 135_475]
    assert [R.ranking_cut(q, 50_176) for q in (10, 30, 50, 70, 90)] == \
        [5_017, 15_052, 25_088, 35_123, 45_158]


def test_load_images_gives_the_object_masks_or_says_there_are_none(tiny_world, tmp_path):
    keras.utils.set_random_seed(0)
    models.export(models.build("small_cnn", 10, (64, 64, 3), width=4), str(tmp_path / "m"),
                  preprocessing="imagenet")
    loaded = models.load(str(tmp_path / "m"))
    pattern = os.path.join(tiny_world[0], "records", "validation-*")
    images, _, ids, masks = pipelines.load_images(pattern, loaded, 8, 0, with_masks=True)
    assert masks.shape == (8, 64, 64) and set(np.unique(masks)) == {0.0, 1.0}
    again = pipelines.load_images(pattern, loaded, 8, 0)
    np.testing.assert_array_equal(again[0], images)  # the same images in the same order
    np.testing.assert_array_equal(again[2], ids)
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(buffer, "PNG")
    R.write_records(str(tmp_path / "validation-00000-of-00001.tfrecord"),
                    [R.image_example(buffer.getvalue(), 1, filename="a.png")])
    with pytest.raises(UserError, match="have no object masks \\(image/object/mask\\), which "
                                        "the oracle and the localisation measures read"):
        pipelines.load_images(str(tmp_path / "validation-*"), loaded, with_masks=True)
