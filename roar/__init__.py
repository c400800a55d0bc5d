"""ROAR / KAR (Hooker et al. 2019) and ROAD (Rong et al. 2022): retraining or evaluating on
images whose most (or least) important features are replaced (docs/roar.md).

    import roar
    replaced = roar.feature_mask(maps, ratio=0.5)                 # ROAR's top 50% of features
    images = roar.replace(pixels, replaced, fill="mean")
    imputed = roar.noisy_linear_impute(pixels, holes, noise_std=0.01)   # ROAD's imputation
    read = roar.Records("saliency", map_key="gradient_smooth_2")    # what the records hold
    train = roar.masked_dataset(files, read, roar.MaskConfig(ratio=0.5), training=True,
                                batch_size=64)

The binaries are `python -m roar.train`, `roar.road`, `roar.sweep` and `roar.report`; each has an
importable `run(Config(...))`.
"""
import models  # noqa: F401  (first: TensorFlow, whenever it loads, loads quietly)
from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "noisy_linear_impute": "roar.imputation",
    "MaskConfig": "roar.masked_data", "Records": "roar.masked_data",
    "masked_dataset": "roar.masked_data",
    "feature_mask": "roar.masking", "feature_scores": "roar.masking",
    "oracle_scores": "roar.masking", "random_scores": "roar.masking", "replace": "roar.masking",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
