"""ROAR / KAR (Hooker et al. 2019) and ROAD (Rong et al. 2022): retraining or evaluating on
images whose most (or least) important features are replaced (docs/roar.md).

    import roar
    config = roar.MaskConfig(ratio=0.5)                           # ROAR: the top 50%, mean fill
    images = roar.replace(pixels, roar.feature_mask(maps, config), config)
    imputed = roar.noisy_linear_impute(pixels, holes, noise_std=0.01)   # ROAD's imputation
    read = roar.Records("saliency", map_key="gradient_smooth_2")    # what the records hold
    train = roar.masked_dataset(files, read, config, training=True, batch_size=64)

The binaries are `python -m roar.train`, `roar.road`, `roar.sweep` and `roar.report`; each has an
importable `run(Config(...))`.
"""
from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "noisy_linear_impute": "saliency_gen.data.imputation",
    "MaskConfig": "roar.masking", "Records": "roar.masked_data",
    "masked_dataset": "roar.masked_data",
    "feature_mask": "roar.masking", "feature_scores": "roar.masking",
    "oracle_scores": "roar.masking", "random_scores": "roar.masking", "replace": "roar.masking",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
