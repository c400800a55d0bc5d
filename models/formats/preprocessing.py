"""The one home of every preprocessing variant the benchmarks use, with its inverse.

Two families:

* **Input spaces** (`INPUT_SPACES`): how pixel values become model inputs and back.
  `caffe_rgb` is BAM's (0..255 RGB minus the per-channel mean, no scaling); `imagenet` is ROAR's
  ((x - mean) / std on [0, 1] pixels); `pixels01` is the identity on [0, 1] pixels. Every space
  maps pixels to inputs (`from_pixels`, `from_uint8`) and inputs back to pixels (`to_pixels`),
  which methods need for pixel-space baselines ("black" = `from_pixels(0)`).
* **Geometry**: BAM's PIL-bilinear resize (`load_bam_image`), and ImageNet-style decode and
  resize-then-centre-crop (`decode_image`, `center_crop`; ROAR's crop_224).

Functions accept numpy arrays or tf tensors unless they say otherwise.
"""
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
from PIL import Image

from models.foundation.errors import ShapeError, UserError, look_up

BAM_RGB_MEAN = (123.68, 116.78, 103.94)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Goes into saliency-record metadata so maps are never paired with a differently cropped image.
CROP_VERSION = "center_crop/v1"


@dataclass(frozen=True)
class InputSpace:
    """An affine map from pixels (in units of `pixel_max`, i.e. [0, 1] or [0, 255]) to model inputs.

    input = (pixels - mean) / std, per channel, with pixels in [0, pixel_max].
    """

    name: str
    pixel_max: float
    mean: tuple
    std: tuple

    def _consts(self):
        return np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)

    def from_pixels(self, pixels01: Any) -> Any:
        """Maps pixels in [0, 1] to model inputs."""
        mean, std = self._consts()
        scaled = pixels01 * np.float32(self.pixel_max) if self.pixel_max != 1.0 else pixels01
        return (scaled - mean) / std

    def from_uint8(self, pixels: Any) -> Any:
        """Maps uint8 pixels (0..255) to float32 model inputs, exactly (no /255*255 round trip)."""
        mean, std = self._consts()
        if isinstance(pixels, tf.Tensor):
            values = tf.cast(pixels, tf.float32)
        else:
            values = np.asarray(pixels).astype(np.float32)
        if self.pixel_max != 255.0:
            values = values * np.float32(self.pixel_max / 255.0)
        return (values - mean) / std

    def to_pixels(self, inputs: Any) -> Any:
        """Maps model inputs back to pixels in [0, 1] (not clipped)."""
        mean, std = self._consts()
        pixels = inputs * std + mean
        return pixels / np.float32(self.pixel_max) if self.pixel_max != 1.0 else pixels

    def black(self) -> np.ndarray:
        """The input-space value of a black pixel, per channel (float32 [C])."""
        return np.asarray(self.from_pixels(np.zeros(len(self.mean), np.float32)), np.float32)


INPUT_SPACES = {
    "caffe_rgb": InputSpace("caffe_rgb", 255.0, BAM_RGB_MEAN, (1.0, 1.0, 1.0)),
    "imagenet": InputSpace("imagenet", 1.0, IMAGENET_MEAN, IMAGENET_STD),
    "pixels01": InputSpace("pixels01", 1.0, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    # timm's "inception" normalisation of ViTs: (x - 0.5) / 0.5 on [0, 1] pixels.
    "inception": InputSpace("inception", 1.0, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}


def input_space(name: str) -> "InputSpace":
    """Returns the `InputSpace` called `name`, or a clear error listing the known ones."""
    return look_up(INPUT_SPACES, name, "preprocessing")


# ----------------------------------------------------------------------------------------------
# BAM: PIL open -> RGB -> bilinear resize (BAM upsamples 128 -> 224) -> float32 - RGB mean.


def load_bam_pixels(source: Any, size: Optional[int] = None) -> np.ndarray:
    """Reads an image (path or PIL image) as uint8 RGB [size, size, 3], resized with PIL bilinear.

    This is BAM's geometry: PIL, not `tf.image.resize`, so the numbers match the original. An
    image already `size` x `size`, or any image when `size` is None, is returned unchanged.
    """
    try:
        image = source if isinstance(source, Image.Image) else Image.open(source)
        image = image.convert("RGB")
    except FileNotFoundError:
        raise UserError(f"image file {source} does not exist") from None
    except OSError as error:
        raise UserError(f"cannot read image {source}: {error}") from None
    if size is not None and image.size != (size, size):
        image = image.resize((size, size), Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def load_bam_image(source: Any, size: int = 224) -> np.ndarray:
    """BAM preprocessing of one image: float32 [size, size, 3], mean-subtracted RGB."""
    return INPUT_SPACES["caffe_rgb"].from_uint8(load_bam_pixels(source, size))


# ----------------------------------------------------------------------------------------------
# ImageNet style (ROAR): decode to [0, 1] floats, bicubic resize of the shorter side, centre crop.


def decode_image(encoded: Any, accurate: bool = True) -> tf.Tensor:
    """Decodes JPEG/PNG/GIF/BMP bytes to float32 RGB in [0, 1], always 3 channels (tf op).

    `accurate=True` decodes JPEGs with the accurate integer IDCT, which gives exactly PIL's pixels
    (so an image is the same in BAM, which reads with PIL, and in TF pipelines); False uses TF's
    default fast IDCT (up to 4 levels different), as the original ROAR generator did.
    """
    def exact_jpeg():
        return tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE")

    def any_format():
        return tf.io.decode_image(encoded, channels=3, expand_animations=False)

    image = tf.cond(tf.io.is_jpeg(encoded), exact_jpeg, any_format) if accurate else any_format()
    return tf.image.convert_image_dtype(tf.ensure_shape(image, [None, None, 3]), tf.float32)


def _resize_bicubic(image, height, width, legacy):
    batch = image[tf.newaxis]
    if legacy:
        # TF1 `resize_bicubic` (half_pixel_centers=False), as the original ROAR crop.
        resized = tf.raw_ops.ResizeBicubic(
            images=batch, size=tf.stack([height, width]), align_corners=False,
            half_pixel_centers=False)
    else:
        resized = tf.image.resize(batch, tf.stack([height, width]), method="bicubic")
    return resized[0]


def center_crop(image: tf.Tensor, crop_size: int = 224, resize_size: Optional[int] = None,
                legacy_resize: bool = True) -> tf.Tensor:
    """ROAR's test-time crop (crop_224 at the defaults): float [H, W, C] -> [crop, crop, C].

    1. Bicubic resize so the shorter side is `resize_size` (default crop_size * 256 // 224, i.e.
       256 for 224) and the longer side `int(long * resize_size / short)` (truncated).
    2. Central crop, offset floor((dim - crop + 1) / 2) per axis. No clipping of the bicubic
       overshoot. `legacy_resize=True` uses TF1 bicubic (half_pixel_centers=False) as the
       original; False uses TF2's `tf.image.resize`.
    """
    if resize_size is None:
        resize_size = crop_size * 256 // 224
    if resize_size < crop_size:
        raise UserError(f"resize_size {resize_size} is smaller than crop_size {crop_size}")
    image = tf.convert_to_tensor(image, tf.float32)
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    short = tf.minimum(height, width)
    # Exact integer arithmetic for int(long * resize_size / short).
    new_height = tf.where(height <= width, resize_size, height * resize_size // short)
    new_width = tf.where(height <= width, width * resize_size // short, resize_size)
    resized = _resize_bicubic(image, new_height, new_width, legacy_resize)
    top = (new_height - crop_size + 1) // 2
    left = (new_width - crop_size + 1) // 2
    cropped = resized[top:top + crop_size, left:left + crop_size, :]
    return tf.ensure_shape(cropped, [crop_size, crop_size, None])


TRAIN_CROPS = ("none", "inception")


def inception_crop(image: tf.Tensor, seed: Any, size: int,
                   legacy_resize: bool = True) -> tf.Tensor:
    """ROAR's training crop (the Inception recipe): a box of 8-100% of the image's area with
    aspect ratio in [3/4, 4/3] covering at least 10% of it (one attempt), drawn statelessly from
    `seed` ([2] int), bicubic-resized to `size` x `size` (aspect not kept); when the draw is the
    whole image, the shorter side is resized to `size` and the centre cropped instead.
    float [H, W, C] -> [size, size, C]."""
    image = tf.convert_to_tensor(image, tf.float32)
    whole = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])
    begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), whole, seed=seed, min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=1,
        use_image_if_no_bounding_boxes=True)
    shape = tf.shape(image)
    is_whole = tf.reduce_all(extent[:2] == shape[:2])

    def resized_box():
        box = tf.slice(image, begin, extent)
        return _resize_bicubic(box, size, size, legacy_resize)

    def centred():
        return center_crop(image, crop_size=size, resize_size=size, legacy_resize=legacy_resize)

    cropped = tf.cond(is_whole, centred, resized_box)
    return tf.ensure_shape(cropped, [size, size, image.shape[-1]])


def check_images(images: Any, expected_hw_c: Sequence[int], what: str = "images") -> None:
    """Checks that `images` is [N, H, W, C] with the expected (H, W, C); raises `ShapeError`."""
    shape = tuple(images.shape)
    if len(shape) != 4 or tuple(shape[1:]) != tuple(expected_hw_c):
        raise ShapeError(
            f"{what} have shape {shape}; expected [N, {', '.join(map(str, expected_hw_c))}] "
            "(NHWC float32, already preprocessed)")
