"""Preprocessing: input spaces and their inverses, BAM's PIL geometry, ROAR's crop_224."""
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from models.formats import preprocessing as P


def test_imagenet_space_maps_mid_grey_and_black_as_roar():
    space = P.input_space("imagenet")
    grey = space.from_pixels(np.full(3, 0.5, np.float32))
    np.testing.assert_allclose(grey, (0.5 - np.array(P.IMAGENET_MEAN)) / P.IMAGENET_STD, rtol=1e-6)
    np.testing.assert_allclose(space.black(), [-2.1179, -2.0357, -1.8044], atol=1e-4)
    uint8 = np.array([[[0, 128, 255]]], np.uint8)
    np.testing.assert_allclose(space.from_uint8(uint8), space.from_pixels(uint8 / 255.0), rtol=1e-6)


def test_caffe_space_is_exact_mean_subtraction():
    space = P.input_space("caffe_rgb")
    pixels = np.random.default_rng(0).integers(0, 256, (4, 5, 3)).astype(np.uint8)
    expected = pixels.astype(np.float32) - np.array([123.68, 116.78, 103.94], np.float32)
    np.testing.assert_array_equal(space.from_uint8(pixels), expected)
    np.testing.assert_allclose(space.black(), [-123.68, -116.78, -103.94], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(P.INPUT_SPACES))
def test_inverse_returns_pixels(name):
    space = P.input_space(name)
    pixels = np.random.default_rng(1).uniform(0, 1, (3, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(space.to_pixels(space.from_pixels(pixels)), pixels, atol=1e-5)
    tensor = tf.constant(pixels)
    np.testing.assert_allclose(space.from_pixels(tensor).numpy(), space.from_pixels(pixels),
                               rtol=1e-6)


def test_unknown_space_is_a_clear_error():
    with pytest.raises(P.UserError, match="unknown preprocessing 'bgr'; choose one of"):
        P.input_space("bgr")


def test_bam_loader_uses_pil_bilinear_and_rgb(tmp_path):
    rng = np.random.default_rng(2)
    grey = Image.fromarray(rng.integers(0, 256, (128, 128)).astype(np.uint8), "L")
    path = tmp_path / "grey.png"
    grey.save(path)
    pixels = P.load_bam_pixels(str(path), 224)
    expected = np.asarray(grey.convert("RGB").resize((224, 224), Image.BILINEAR))
    np.testing.assert_array_equal(pixels, expected)
    image = P.load_bam_image(str(path))
    np.testing.assert_array_equal(image, expected.astype(np.float32) - np.float32(P.BAM_RGB_MEAN))
    assert P.load_bam_pixels(str(path)).shape == (128, 128, 3)
    with pytest.raises(P.UserError, match="does not exist"):
        P.load_bam_pixels(str(tmp_path / "missing.jpg"), 224)


@pytest.mark.parametrize("mode", ["L", "RGBA"])
def test_decode_image_always_gives_three_channels(mode):
    image = Image.new(mode, (7, 5), 200 if mode == "L" else (10, 20, 30, 40))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    decoded = P.decode_image(tf.constant(buffer.getvalue())).numpy()
    assert decoded.shape == (5, 7, 3) and decoded.dtype == np.float32
    assert 0.0 <= decoded.min() and decoded.max() <= 1.0


def test_jpeg_decoding_matches_pil_unless_legacy(tmp_path):
    rng = np.random.default_rng(6)
    smooth = np.cumsum(rng.integers(-9, 10, (48, 40, 3)), axis=1) % 256
    path = tmp_path / "image.jpg"
    Image.fromarray(smooth.astype(np.uint8)).save(path, "JPEG")
    data = tf.constant(path.read_bytes())
    pil = P.load_bam_pixels(str(path))
    accurate = np.round(P.decode_image(data).numpy() * 255).astype(np.uint8)
    np.testing.assert_array_equal(accurate, pil)
    fast = np.round(P.decode_image(data, accurate=False).numpy() * 255).astype(np.uint8)
    assert np.any(fast != pil)


def test_center_crop_is_roar_crop_224():
    image = np.random.default_rng(3).uniform(0, 1, (300, 400, 3)).astype(np.float32)
    cropped = P.center_crop(image).numpy()
    assert cropped.shape == (224, 224, 3)
    # Shorter side 300 -> 256, longer 400 -> int(400 * 256 / 300) = 341; offsets (32 + 1) // 2
    # = 16 rows and (117 + 1) // 2 = 59 columns, with TF1 bicubic (half_pixel_centers=False).
    resized = tf.raw_ops.ResizeBicubic(images=image[None], size=[256, 341], align_corners=False,
                                       half_pixel_centers=False)[0].numpy()
    np.testing.assert_array_equal(cropped, resized[16:240, 59:283])
    modern = P.center_crop(image, legacy_resize=False).numpy()
    assert np.abs(modern - cropped).max() > 1e-3  # the two bicubic variants are not identical


def test_center_crop_scales_to_small_crops_and_rejects_bad_sizes():
    image = np.zeros((90, 64, 3), np.float32)
    assert P.center_crop(image, crop_size=64).shape == (64, 64, 3)  # resize side 64*256//224 = 73
    with pytest.raises(P.UserError, match="smaller than crop_size"):
        P.center_crop(image, crop_size=64, resize_size=50)


def test_check_images_names_expected_shape():
    with pytest.raises(P.ShapeError, match=r"expected \[N, 8, 8, 3\]"):
        P.check_images(np.zeros((8, 8, 3)), (8, 8, 3))
