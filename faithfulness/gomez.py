"""IIC, AD, ADD, DAUC, IAUC, DC and IC with the API of `saliency_maps_metrics` (faithfulness.md
§2-§3), batched: one stable sort per map, nested masks, every perturbed image of every curve
scored in fixed-size chunks inside one traced function.

    metric = Deletion()                     # "black" substrate, <= 196 steps
    metric(model, data, explanations, class_to_explain)   # {"dauc": .., "dc": ..}
    result = metric.compute_scores(model, data, explanations, class_to_explain)
    result.curves, result.step_saliency, result.auc, result.calibration   # per image

Scores are the model's output as is (`output_activation=None`: the reference's contract is a
model that already ends in a softmax) or its softmax (`output_activation="softmax"`, for a model
that returns logits). `mode="reference"` reproduces the reference's min-max normalisation over
the whole explanations tensor of the call; the default `mode="paper"` normalises each map.
"""
import logging
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from models.errors import UserError
from faithfulness import inputs, ranking, resample, stats, substrates
from faithfulness import scorer as scoring

MODES = ("paper", "reference")
CLASS_SOURCES = ("original", "start")
log = logging.getLogger(__name__)


class _Metric:
    """Holds the options shared by every metric and one `scoring.Scorer` per model."""

    def __init__(self, batch_size, output_activation, nan_policy, jit_compile):
        if nan_policy not in stats.NAN_POLICIES:
            raise UserError(f"unknown nan_policy {nan_policy!r}; use one of "
                            f"{', '.join(stats.NAN_POLICIES)}")
        self.batch_size = int(batch_size)
        self.output_activation = output_activation
        self.nan_policy = nan_policy
        self.jit_compile = jit_compile
        self._scorer = None

    def scorer(self, model):
        """The scorer of `model`, kept between calls so that its traced functions are reused."""
        if self._scorer is None or self._scorer.model is not model:
            self._scorer = scoring.Scorer(model, self.output_activation, self.batch_size,
                                         self.jit_compile)
        return self._scorer

    @staticmethod
    def classes(scorer, images, class_to_explain, what="the images"):
        """The class of each image: given, or the argmax of the model on `images`."""
        if class_to_explain is None:
            log.warning("class_to_explain is None: explaining the model's argmax on %s", what)
            return np.argmax(scorer.predict(images), axis=1).astype(np.int32)
        scorer.probe(images)
        return scorer.check_classes(class_to_explain, int(images.shape[0]))


# ---------------------------------------------------------------------------------------------
# Single-step metrics.

class _SingleStep(_Metric):
    keys = ()
    removes_salient = False

    def __init__(self, data_replace_method="black", *, mode="paper", upsample="torch_bicubic",
                 output_activation=None, batch_size=64, nan_policy="propagate",
                 jit_compile=False):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        if mode not in MODES:
            raise UserError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if upsample not in resample.UPSAMPLINGS:
            raise UserError(f"unknown upsample {upsample!r}; use one of "
                            f"{', '.join(resample.UPSAMPLINGS)}")
        if mode == "reference" and upsample != "torch_bicubic":
            raise UserError("mode='reference' upsamples with torch_bicubic only")
        self.data_replace_method = data_replace_method
        self.mode = mode
        self.upsample = upsample

    def keep_masks(self, maps, height, width):
        """float32 [N, H, W]: min-max normalised maps, upsampled, (1 - m for ADD)."""
        axes = (1, 2) if self.mode == "paper" else (0, 1, 2)
        low = maps.min(axis=axes, keepdims=True)
        high = maps.max(axis=axes, keepdims=True)
        span = np.where(high > low, high - low, 1.0)
        normalised = np.where(high > low, (maps - low) / span, maps)  # constant: unchanged
        masks = resample.upsample_maps(normalised.astype(np.float32), height, width,
                                       self.upsample).numpy()
        return 1.0 - masks if self.removes_salient else masks

    def compute_scores(self, model, data, explanations, class_to_explain=None,
                       data_to_replace_with=None):
        """(Y, O): per-image scores of the clean and the masked images, float64 [N] each."""
        data = inputs.images(data)
        maps = inputs.maps(explanations, int(data.shape[0]))
        scorer = self.scorer(model)
        classes = self.classes(scorer, data, class_to_explain)
        replacement = substrates.substrate(
            self.data_replace_method if data_to_replace_with is None else data_to_replace_with,
            data)
        keep = self.keep_masks(maps, int(data.shape[1]), int(data.shape[2]))
        pairs = scorer.soft_pairs(data, replacement, keep, classes).astype(np.float64)
        return pairs[:, 0], pairs[:, 1]

    def per_image(self, clean, masked):
        raise NotImplementedError

    def __call__(self, model, data, explanations, class_to_explain=None,
                 data_to_replace_with=None):
        values = self.per_image(*self.compute_scores(model, data, explanations,
                                                     class_to_explain, data_to_replace_with))
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class IIC_AD(_SingleStep):  # noqa: N801 (the reference's name)
    """Increase in confidence (fraction with O > Y) and average drop (mean max(Y - O, 0) / Y),
    keeping the salient region: x M + b (1 - M)."""

    def per_image(self, clean, masked):
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"iic": (masked > clean).astype(np.float64),
                    "ad": np.maximum(clean - masked, 0.0) / clean}


class ADD(_SingleStep):
    """Average drop in deletion, (Y - O) / Y with the salient region removed: x (1 - M) + b M."""

    removes_salient = True

    def per_image(self, clean, masked):
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"add": (clean - masked) / clean}


# ---------------------------------------------------------------------------------------------
# Multi-step metrics.

@dataclass
class CurveResult:
    """Per-image results of a deletion / insertion metric."""

    curves: np.ndarray         # float64 [N, K + 1], y_0 (the start image) first
    step_saliency: np.ndarray  # float64 [N, K], mean map value of each step's cells
    auc: np.ndarray            # float64 [N]
    calibration: np.ndarray    # float64 [N], DC or IC (NaN where undefined)
    classes: np.ndarray        # int32 [N]


class _CurveMetric(_Metric):
    """Deletion (start x, end b) or insertion (start b, end x) along a ranked schedule."""

    inserts = False
    keys = ("auc", "calibration")

    def __init__(self, data_replace_method, cumulative, batch_size, output_activation,
                 nan_policy, jit_compile, class_source="original"):
        super().__init__(batch_size, output_activation, nan_policy, jit_compile)
        if class_source not in CLASS_SOURCES:
            raise UserError(f"unknown class_source {class_source!r}; use one of "
                            f"{', '.join(CLASS_SOURCES)}")
        self.data_replace_method = data_replace_method
        self.cumulative = cumulative
        self.class_source = class_source

    def thresholds(self, maps):
        raise NotImplementedError

    def grid(self, maps, data):
        """(rows, cols) source indices that blow a map-cell mask up to the image."""
        return (resample.torch_nearest_indices(maps.shape[1], int(data.shape[1])),
                resample.torch_nearest_indices(maps.shape[2], int(data.shape[2])))

    def compute_scores(self, model, data, explanations, class_to_explain=None,
                       masking_data=None):
        """A `CurveResult` for every image."""
        data = inputs.images(data)
        maps = inputs.maps(explanations, int(data.shape[0]))
        scorer = self.scorer(model)
        replace = self.data_replace_method if masking_data is None else masking_data
        if not self.inserts and isinstance(replace, str) and replace in ("black", "zeros"):
            substrate = tf.zeros([1, *data.shape[1:]])  # one image, shared by all (scorer)
        else:
            substrate = substrates.substrate(replace, data)
        start, end = (substrate, data) if self.inserts else (data, substrate)
        source = start if self.class_source == "start" else data
        classes = self.classes(scorer, source, class_to_explain,
                               "the start images" if self.class_source == "start"
                               else "the original images")
        thresholds = self.thresholds(maps)
        schedule = (ranking.cumulative if self.cumulative else ranking.bands)(thresholds)
        rows, cols = self.grid(maps, data)
        curves = scorer.ranked_curves(start, end, ranking.ranks(maps), schedule, classes, rows,
                                      cols, maps.shape[1:3]).astype(np.float64)
        saliency = ranking.step_saliency(maps, ranking.bands(thresholds))
        if self.cumulative:
            auc = stats.trapezoid_auc(curves)
            change = curves[:, 1:] - curves[:, :-1]
        else:
            auc = stats.trapezoid_auc(curves[:, 1:])
            change = curves[:, 1:] - curves[:, :1]
        calibration = stats.pearson(change if self.inserts else -change, saliency)
        return CurveResult(curves, saliency, auc, calibration, classes)

    def __call__(self, model, data, explanations, class_to_explain=None, masking_data=None):
        result = self.compute_scores(model, data, explanations, class_to_explain, masking_data)
        values = {self.keys[0]: result.auc}
        if len(self.keys) > 1:
            values[self.keys[1]] = result.calibration
        return {key: stats.aggregate(value, self.nan_policy, key)[0]
                for key, value in values.items()}


class _GomezCurve(_CurveMetric):
    def __init__(self, data_replace_method, bound_max_step=True, batch_size=20, max_step_nb=196,
                 cumulative=True, *, remainder="partial", class_source="original",
                 output_activation=None, nan_policy="propagate", jit_compile=False):
        super().__init__(data_replace_method, cumulative, batch_size, output_activation,
                         nan_policy, jit_compile, class_source)
        self.bound_max_step = bound_max_step
        self.max_step_nb = int(max_step_nb)
        self.remainder = remainder
        ranking.gomez_thresholds(1, remainder=remainder)  # validates the option early

    def thresholds(self, maps):
        cells = maps.shape[1] * maps.shape[2]
        return ranking.gomez_thresholds(cells, self.bound_max_step, self.max_step_nb,
                                        self.remainder, f"{maps.shape[1]}x{maps.shape[2]}")


class Deletion(_GomezCurve):
    """DAUC and DC: cells removed most salient first (default substrate "black" = 0)."""

    keys = ("dauc", "dc")

    def __init__(self, data_replace_method="black", bound_max_step=True, batch_size=20,
                 max_step_nb=196, cumulative=True, **options):
        super().__init__(data_replace_method, bound_max_step, batch_size, max_step_nb,
                         cumulative, **options)


class Insertion(_GomezCurve):
    """IAUC and IC: cells revealed most salient first on the substrate (default "blur")."""

    keys = ("iauc", "ic")
    inserts = True

    def __init__(self, data_replace_method="blur", bound_max_step=True, batch_size=20,
                 max_step_nb=196, cumulative=True, **options):
        super().__init__(data_replace_method, bound_max_step, batch_size, max_step_nb,
                         cumulative, **options)


class RiseDeletion(_CurveMetric):
    """Petsiuk et al.'s deletion (RISE `CausalMetric`): full-resolution maps, `step` pixels per
    step, zeros substrate; `{"auc": ...}`. Pass `output_activation="softmax"` for a logits model
    (RISE scores probabilities)."""

    keys = ("auc",)

    def __init__(self, step=224, substrate="zeros", *, batch_size=64, output_activation=None,
                 nan_policy="propagate", jit_compile=False):
        super().__init__(substrate, True, batch_size, output_activation, nan_policy, jit_compile)
        self.step = int(step)

    def thresholds(self, maps):
        return ranking.rise_thresholds(maps.shape[1] * maps.shape[2], self.step)

    def grid(self, maps, data):
        inputs.same_size(maps, data, "explanations")
        return np.arange(maps.shape[1]), np.arange(maps.shape[2])


class RiseInsertion(RiseDeletion):
    """Petsiuk et al.'s insertion: pixels revealed on RISE's blurred image, `{"auc": ...}`."""

    inserts = True

    def __init__(self, step=224, substrate="rise_blur", **options):
        super().__init__(step, substrate, **options)
