"""The shared attribution engine used by BAM, ROAR and the faithfulness metrics.

    import saliency_gen
    maps = saliency_gen.attribute(model, images, "smoothgrad_sq(integrated_gradients)")
    maps = saliency_gen.attribute(model, images, "roar:IG_SG_2", batch_size=128, seed=0)

`saliency_gen.METHODS` lists every accepted name; `saliency_gen.records` owns the TFRecord
schemas; `python -m saliency_gen.generate` writes saliency records.
"""
from saliency_gen.engine import attribute, postprocess, predict
from saliency_gen.names import METHODS, resolve

__all__ = ["METHODS", "attribute", "postprocess", "predict", "resolve"]
