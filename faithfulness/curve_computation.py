"""The one computation of deletion and insertion curves (docs/faithfulness.md, "Deletion and
insertion"): one stable sort per map, nested masks, every perturbed image of every curve scored
in fixed-size chunks inside one traced function (`scorer.Scorer.ranked_curves`).

The deletion / insertion measure of `faithfulness.evaluate` (`protocol_measures`) and the
`saliency_maps_metrics`-compatible façades (`faithfulness.curves.Deletion`, `Insertion`,
`RiseDeletion`, `RiseInsertion`) both call `curve_scores` with a `CurveSettings`.
"""
import dataclasses
import logging
from typing import Any, Optional

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from faithfulness import inputs, ranking, resample, stats, substrates
from faithfulness import scorer as scoring
from models.foundation.errors import UserError

log = logging.getLogger(__name__)

CLASS_SOURCES = ("original", "start")
SCHEDULES = ("gomez", "rise")  # Gomez et al.'s bounded cell steps, or RISE's pixel steps


@dataclasses.dataclass
class CurveResult:
    """Per-image results of a deletion / insertion metric."""

    curves: np.ndarray         # float64 [N, K + 1], y_0 (the start image) first
    step_saliency: np.ndarray  # float64 [N, K], mean map value of each step's cells
    auc: np.ndarray            # float64 [N]
    calibration: np.ndarray    # float64 [N], DC or IC (NaN where undefined)
    classes: np.ndarray        # int32 [N]


@dataclasses.dataclass(frozen=True)
class CurveSettings:
    """What a curve is: deletion (start x, end the substrate) or insertion (`inserts`: start
    the substrate, end x); its steps (`schedule` "gomez": at most `max_step_nb` steps of map
    cells, `remainder` for the cells left over; "rise": `step` pixels of full-resolution maps
    per step); `cumulative` scoring (the AUC over the whole curve) or not (bands, each against
    y_0); the class explained of the original images or of the start images (`class_source`)."""

    data_replace_method: Any
    inserts: bool = False
    cumulative: bool = True
    class_source: str = "original"
    schedule: str = "gomez"
    bound_max_step: bool = True
    max_step_nb: int = 196
    remainder: str = "partial"
    step: int = 224

    def __post_init__(self) -> None:
        if self.class_source not in CLASS_SOURCES:
            raise UserError(f"unknown class_source {self.class_source!r}; use one of "
                            f"{', '.join(CLASS_SOURCES)}")
        if self.schedule == "gomez":
            ranking.gomez_thresholds(1, remainder=self.remainder)  # validates the option early

    def thresholds(self, maps: np.ndarray) -> np.ndarray:
        """The cumulative cell counts of the curve's steps."""
        cells = maps.shape[1] * maps.shape[2]
        if self.schedule == "rise":
            return ranking.rise_thresholds(cells, self.step)
        return ranking.gomez_thresholds(cells, self.bound_max_step, self.max_step_nb,
                                        self.remainder, f"{maps.shape[1]}x{maps.shape[2]}")

    def grid(self, maps: np.ndarray, data: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) source indices that blow a map-cell mask up to the image."""
        if self.schedule == "rise":  # full-resolution maps
            inputs.same_size(maps, data, "explanations")
            return np.arange(maps.shape[1]), np.arange(maps.shape[2])
        return (resample.torch_nearest_indices(maps.shape[1], int(data.shape[1])),
                resample.torch_nearest_indices(maps.shape[2], int(data.shape[2])))


def classes_of(scorer: scoring.Scorer, images: tf.Tensor, class_to_explain: Optional[ArrayLike],
               what: str = "the images") -> np.ndarray:
    """The class of each image: given (checked), or the argmax of the model on `images`."""
    if class_to_explain is None:
        log.warning("class_to_explain is None: explaining the model's argmax on %s", what)
        return np.argmax(scorer.predict(images), axis=1).astype(np.int32)
    scorer.probe(images)
    return scorer.check_classes(class_to_explain, int(images.shape[0]))


def curve_scores(settings: CurveSettings, scorer: scoring.Scorer, data: Any,
                 explanations: Any, class_to_explain: Optional[ArrayLike] = None,
                 masking_data: Any = None) -> CurveResult:
    """A `CurveResult` for every image of `data` (NHWC, the model's input space) and its map
    in `explanations`, scored by `scorer`; `masking_data` replaces the settings' substrate."""
    data = inputs.images(data)
    maps = inputs.maps(explanations, int(data.shape[0]))
    replace = settings.data_replace_method if masking_data is None else masking_data
    if not settings.inserts and isinstance(replace, str) and replace in ("black", "zeros"):
        substrate = tf.zeros([1, *data.shape[1:]])  # one image, shared by all (scorer)
    else:
        substrate = substrates.substrate(replace, data)
    start, end = (substrate, data) if settings.inserts else (data, substrate)
    source = start if settings.class_source == "start" else data
    classes = classes_of(scorer, source, class_to_explain,
                         "the start images" if settings.class_source == "start"
                         else "the original images")
    thresholds = settings.thresholds(maps)
    schedule = (ranking.cumulative if settings.cumulative else ranking.bands)(thresholds)
    rows, cols = settings.grid(maps, data)
    curves = scorer.ranked_curves(start, end, ranking.ranks(maps), schedule, classes, rows,
                                  cols, maps.shape[1:3]).astype(np.float64)
    saliency = ranking.step_saliency(maps, ranking.bands(thresholds))
    if settings.cumulative:
        auc = stats.trapezoid_auc(curves)
        change = curves[:, 1:] - curves[:, :-1]
    else:
        auc = stats.trapezoid_auc(curves[:, 1:])
        change = curves[:, 1:] - curves[:, :1]
    calibration = stats.pearson(change if settings.inserts else -change, saliency)
    return CurveResult(curves, saliency, auc, calibration, classes)
