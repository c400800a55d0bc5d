"""ROAR / KAR (Hooker et al. 2019) and ROAD (Rong et al. 2022): retraining or evaluating on
images whose most (or least) important features are replaced (docs/roar.md).

    import roar
    replaced = roar.feature_mask(maps, ratio=0.5)                 # ROAR's top 50% of features
    images = roar.replace(pixels, replaced, fill="mean")
    imputed = roar.noisy_linear_impute(pixels, holes, noise_std=0.01)   # ROAD's imputation
    train = roar.masked_dataset(files, "saliency", roar.MaskConfig(ratio=0.5), training=True,
                                batch_size=64, map_key="gradient_smooth_2")

The binaries are `python -m roar.train`, `roar.road`, `roar.sweep` and `roar.report`; each has an
importable `run(Config(...))`.
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from roar.imputation import noisy_linear_impute
from roar.masked_data import MaskConfig, masked_dataset
from roar.masking import feature_mask, feature_scores, oracle_scores, random_scores, replace

__all__ = ["MaskConfig", "feature_mask", "feature_scores", "masked_dataset",
           "noisy_linear_impute", "oracle_scores", "random_scores", "replace"]
