"""Xplique's metrics (docs/measures.md, "Xplique"), under their names in snake_case, in the
same shape as Quantus's: one value per image (Xplique's `evaluate` returns their mean).

- average_stability (Xplique's `AverageStability`, Bhatt et al. 2020): the mean over
  `nb_samples` neighbours x + U(0, `radius`) (every value moved up by its own draw) of the
  `distance` ("l2" or "l1") between the map and the neighbour's map, both as the explainer
  gives them (xplique/metrics/stability.py). Lower is better. Xplique draws one set of
  neighbour offsets for all images with `tf.random.uniform`; here each (image, sample) draw is
  keyed by `seed`, the sample and the image's id (`robustness_family.noisy_ratios`), so the
  values agree with Xplique's in distribution.
- mu_fidelity (Xplique's `MuFidelity`, Bhatt et al. 2020): the Spearman correlation, per
  image, over `nb_samples` random removals of the cells of a `grid_size` grid (each cell
  removed with probability `subset_percent`, replaced by `baseline_mode`), of the map's sum over
  the removed part with the output's drop (xplique/metrics/fidelity.py; a constant one: 0, as
  Xplique). Higher is better. Xplique draws each batch's removals with `tf.random.uniform`,
  shared by its images; here each (image, sample) removal is drawn inside the traced function
  from its own key, so the values agree in distribution.
"""
from typing import Any, Optional

import numpy as np

from faithfulness import stats, substrates
from faithfulness.measures import perturbation, robustness_family, subsets
from faithfulness.measures.arguments import image_ids, prepared
from models.foundation.errors import UserError, check_one_of
from models.foundation.metric_spec import MetricSpec

SPECS = (
    MetricSpec("average_stability", False, about="mean distance of the map from its "
                                                 "neighbours' maps (Xplique)"),
    MetricSpec("mu_fidelity", True, about="correlation of random removals' attribution with "
                                          "the output drop (Xplique)",
               note="the number of cells removed varies, and both the drop and a positive "
                    "map's sum grow with it: the random control scores about 0.4 on the "
                    "synthetic world."),
)
FIDELITY_SALT = 0x3F1D  # mu_fidelity's draws, apart from the others of a seed
DISTANCES = ("l2", "l1")


def average_stability(model: Any, x_batch: Any, y_batch: Any, a_batch: Any,
                      s_batch: Any = None, *, explain_func: Any = None,
                      explain_func_kwargs: Optional[dict] = None, nb_samples: int = 20,
                      radius: float = 0.1, distance: str = "l2", seed: int = 0,
                      ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the mean distance between the map and the maps of `nb_samples` neighbours."""
    check_one_of("distance", distance, DISTANCES)
    order = 2 if distance == "l2" else 1

    def objective(x, moved, a, maps, logits, moved_logits):
        return np.linalg.norm(a - maps, ord=order, axis=-1)

    values, _ = robustness_family.noisy_ratios(
        model, x_batch, y_batch, a_batch, s_batch, objective=objective,
        noise=robustness_family.Noise(0.0, radius), nr_samples=nb_samples,
        explain_func=explain_func, explain_func_kwargs=explain_func_kwargs, abs=False,
        normalise=False, seed=seed, ids=ids, batch_size=batch_size, logits=False)
    return values.mean(axis=1)


def mu_fidelity(model: Any, x_batch: Any, y_batch: Any, a_batch: Any, s_batch: Any = None, *,
                grid_size: int = 9, subset_percent: float = 0.2, baseline_mode: float = 0.0,
                nb_samples: int = 200, activation: Optional[str] = None, seed: int = 0,
                ids: Any = None, batch_size: int = 64) -> np.ndarray:
    """[N] the Spearman correlation of the removed part's attribution with the output drop."""
    found = prepared(x_batch, a_batch, s_batch, abs=False, normalise=False)
    height, width, channels = found.x.shape[1:]
    if not 1 <= grid_size <= min(height, width):
        raise UserError(f"grid_size must be between 1 and the image's side {min(height, width)};"
                        f" got {grid_size}")
    if not 0 < subset_percent < 1:
        raise UserError(f"subset_percent must be between 0 and 1; got {subset_percent}")
    if nb_samples < 2:
        raise UserError(f"nb_samples must be at least 2 (a correlation); got {nb_samples}")
    check_one_of("activation", str(activation), ("None", "softmax"))
    classes = perturbation.checked_classes(model, found.x, y_batch)
    ids = image_ids(ids, len(found.x))
    features = np.transpose(perturbation.broadcast_features(found).reshape(
        len(found.x), channels, height, width), (0, 2, 3, 1))
    softmax = activation == "softmax"
    clean = perturbation.clean_scores(model, found.x, classes, softmax=softmax,
                                      batch_size=batch_size)
    scores, sums = subsets.grid_scores(
        model, found.x, features, float(baseline_mode), classes,
        substrates.noise_keys(seed, ids, salt=FIDELITY_SALT).numpy(), samples=nb_samples,
        grid_size=grid_size, subset_percent=subset_percent, softmax=softmax,
        batch_size=batch_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        correlations = stats.spearman(clean[:, None] - scores, sums)
    return np.nan_to_num(correlations, nan=0.0)  # a constant drop or sum: 0, as Xplique
