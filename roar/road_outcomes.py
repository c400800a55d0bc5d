"""ROAD's one computation (docs/roar.md, "ROAD without retraining"): per image and setting, the
clean model's true-class probability and hit on the imputed image.

    settings = road_outcomes.settings(("morf", "lerf"), (0.1, 0.5, 0.9))
    road = road_outcomes.Road(model, mask, settings)       # a `metric_spec.Measure`
    found = road.outcomes(RoadImages(pixels, labels, noise_keys, maps))
    probabilities, hits = found[settings[0]]      # float64 [N], bool [N]
    road.score(RoadImages(...))     # {"MoRF": [N], "LeRF": [N]}: averaged over the fractions

`roar.road` (images and maps read from records), `roar.beam_road` (record ranges in workers) and
the report card's ROAD benchmark (`roar.card`, images in memory) all score through `Road`; they
differ only in where the images, maps and noise keys come from. MoRF(p) imputes the pixels
ranked in the top p, LeRF(p) all others (it keeps the top p); the ranking is the mask config's
(`masking.feature_scores`, the lower index first on ties, as `masking.top_mask`). Every
(setting, image) pair is one item of the chunked executor, so every fraction of both orders
costs one traced call.
"""
import dataclasses
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from models.formats.adapter import adapt
from models.formats.preprocessing import IMAGENET_MEAN, input_space
from models.foundation import executor, ordering, workload
from roar import masking, metric_definitions
from roar.masking import MaskConfig
from saliency_gen.data.records import ranking_cut

ORDERS = tuple(metric_definitions.ROAD_ORDERS)  # ("morf", "lerf")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One point of a ROAD curve: the order ("morf" or "lerf") and the fraction p."""

    order: str
    p: float

    @property
    def removed(self) -> float:
        """The fraction of features imputed."""
        return metric_definitions.fraction_removed(self.order, self.p)


def settings(orders: Sequence[str], ratios: Sequence[float]) -> list[Setting]:
    """Every (order, p), order by order, as the curves list them."""
    return [Setting(order, float(p)) for order in orders for p in ratios]


def feature_ranks(maps: ArrayLike, mask: MaskConfig) -> np.ndarray:
    """int32 [N, F]: each feature's place in the mask config's ranking (0: most relevant; F
    pixels or elements per map), the lower index first on ties."""
    scores = masking.feature_scores(maps, mask).numpy()
    return ordering.places(scores, descending=True).astype(np.int32)


def cuts(chosen: Sequence[Setting], features: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(cut int32 [K], keep_top bool [K]): a feature of rank r is imputed when r < cut (MoRF)
    or r >= cut (LeRF); cut is ROAR's count of the top p (`records.ranking_cut`; p is a whole
    percent, checked by the config that holds it)."""
    limits = [ranking_cut(round(100 * setting.p), features) for setting in chosen]
    return (tf.constant(limits, tf.int32),
            tf.constant([setting.order == "lerf" for setting in chosen], tf.bool))


def scorer(model: Any, image_shape: Sequence[int], mask: MaskConfig, batch_size: int) -> Any:
    """The traced function (pixels, labels, noise_keys, ranks, cuts, keep_top, colour) ->
    float32 [K * N, 3] (true-class probability, hit, ROAD's solver iterations for the item's
    chunk) of every (cut, image) pair, setting-major; kept with the model's adapter, so every
    caller with the same settings shares one trace."""
    height, width, channels = (int(size) for size in image_shape)
    adapter = adapt(model)
    features = height * width * (channels if mask.ranking == "element" else 1)
    signature = [tf.TensorSpec([None, height, width, channels], tf.float32),
                 tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64),
                 tf.TensorSpec([None, features], tf.int32), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None], tf.bool), tf.TensorSpec([channels], tf.float32)]
    removed_shape = [-1, height, width] + ([channels] if mask.ranking == "element" else [])

    def build():
        space = input_space(getattr(model, "preprocessing", "imagenet"))

        # autograph off: the executor and the solver build their loops explicitly
        @tf.function(input_signature=signature, autograph=False)
        def run(pixels, labels, noise_keys, ranks, cuts, keep_top, colour):
            n = tf.shape(pixels)[0]
            # an image's noise is keyed by the image alone: drawn once, not once per setting
            draws = masking.noise_draws(pixels, mask, noise_keys)

            def compute(items):
                image, setting = items % n, items // n
                cut = tf.gather(cuts, setting)[:, None]
                image_ranks = tf.gather(ranks, image)
                removed = tf.where(tf.gather(keep_top, setting)[:, None], image_ranks >= cut,
                                   image_ranks < cut)
                removed = tf.reshape(removed, removed_shape)
                imputed, iterations = masking.replace_counted(
                    tf.gather(pixels, image), removed, mask, keys=tf.gather(noise_keys, image),
                    mean=colour, noise=None if draws is None else tf.gather(draws, image))
                logits = tf.cast(adapter.logits(space.from_pixels(imputed)), tf.float32)
                probabilities = tf.nn.softmax(logits)
                wanted = tf.gather(labels, image)
                hits = tf.cast(tf.equal(tf.argmax(probabilities, axis=1, output_type=tf.int32),
                                        wanted), tf.float32)
                # the chunk's solver iterations ride along with each of its items
                solved = tf.fill(tf.shape(hits), tf.cast(iterations, tf.float32))
                return tf.stack([tf.gather(probabilities, wanted, batch_dims=1), hits, solved],
                                axis=1)
            return executor.collect(tf.shape(cuts)[0] * n, batch_size, compute, [3])
        return run

    key = ("ROAD", tuple(int(size) for size in image_shape), mask.ranking, mask.fill,
           mask.road_noise, mask.seed, mask.cg_tol, mask.cg_max_iters, batch_size)
    return adapter.traced(key, build)


def outcomes(model: Any, pixels: ArrayLike, labels: ArrayLike, noise_keys: ArrayLike,
             maps: ArrayLike, mask: MaskConfig, chosen: Sequence[Setting], *,
             batch_size: int = 32, colour: Optional[ArrayLike] = None
             ) -> dict[Setting, tuple[np.ndarray, np.ndarray]]:
    """{setting: (true-class probability float64 [N], hit bool [N])} of `model` on the N images
    `pixels` ([N, H, W, C], [0, 1] pixels) imputed as `mask` says at every `chosen` setting,
    explaining `labels`. `maps` [N, H, W, C'] rank the features; `noise_keys` (int64 [N]) key
    ROAD's imputation noise per image, so an image's values do not depend on its batch;
    `colour` (pixels [C]) replaces ImageNet's mean colour as the "mean" fill and as the
    fallback of an image without a kept pixel."""
    images = tf.convert_to_tensor(pixels, tf.float32)
    ranks = feature_ranks(maps, mask)
    limits, keep_top = cuts(chosen, ranks.shape[1])
    if colour is None:  # `masking.replace`'s own: ImageNet's mean colour (also the fallback)
        colour = IMAGENET_MEAN[:int(images.shape[-1])]
    run = scorer(model, images.shape[1:], mask, batch_size)
    workload.count("forward", int(images.shape[0]) * len(chosen))
    values = run(images, tf.cast(labels, tf.int32),
                 tf.cast(noise_keys, tf.int64), tf.constant(ranks), limits, keep_top,
                 tf.constant(colour, tf.float32)).numpy().reshape(len(chosen), -1, 3)
    if mask.fill == "noisy_linear":
        workload.count("setup", int(images.shape[0]) * len(chosen))  # a solve per image
    workload.count("solve", int(values[..., 2].sum()))  # images x solver iterations
    return {setting: (values[index, :, 0].astype(np.float64), values[index, :, 1] > 0.5)
            for index, setting in enumerate(chosen)}


class RoadImages(NamedTuple):
    """What ROAD scores at once: `pixels` [N, H, W, C] in [0, 1] (ROAD imputes pixels), the
    `labels` explained, `noise_keys` (int64 [N]) keying each image's imputation noise, and the
    `maps` [N, H, W, C'] that rank the features."""

    pixels: Any
    labels: Any
    noise_keys: Any
    maps: Any


class Road:
    """ROAD as a measure (`models.foundation.metric_spec.Measure`) of `model` with the `mask`
    settings at every `chosen` setting: `outcomes(images)` per setting, `score(images)` the
    metrics MoRF and LeRF per image (the true-class probability averaged over the fractions of
    each order in `chosen`). `colour`: as `outcomes`."""

    def __init__(self, model: Any, mask: MaskConfig, chosen: Sequence[Setting], *,
                 batch_size: int = 32, colour: Optional[ArrayLike] = None):
        self.model, self.mask, self.chosen = model, mask, list(chosen)
        self.batch_size, self.colour = batch_size, colour
        orders = {setting.order for setting in self.chosen}
        self.orders = [order for order in metric_definitions.ROAD_ORDERS if order in orders]

    @property
    def metrics(self) -> tuple:
        names = [metric_definitions.ROAD_ORDERS[order] for order in self.orders]
        return tuple(spec for spec in metric_definitions.ROAD if spec.name in names)

    def outcomes(self, images: RoadImages) -> dict[Setting, tuple[np.ndarray, np.ndarray]]:
        """{setting: (true-class probability float64 [N], hit bool [N])} (`outcomes`)."""
        return outcomes(self.model, images.pixels, images.labels, images.noise_keys,
                        images.maps, self.mask, self.chosen, batch_size=self.batch_size,
                        colour=self.colour)

    def score(self, images: RoadImages) -> dict:
        """{"MoRF" / "LeRF": float64 [N]}: each image's true-class probability averaged over
        the fractions of the order."""
        found = self.outcomes(images)
        return {metric_definitions.ROAD_ORDERS[order]: np.mean(
                    [found[setting][0] for setting in self.chosen if setting.order == order],
                    axis=0)
                for order in self.orders}
