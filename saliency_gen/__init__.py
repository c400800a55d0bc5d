"""The shared attribution engine used by BAM, ROAR and the faithfulness metrics.

    import saliency_gen
    maps = saliency_gen.attribute(model, images, "smoothgrad_sq(integrated_gradients)")
    maps = saliency_gen.attribute(model, images, "roar:IG_SG_2", batch_size=128, seed=0)

    saliency_gen.register_method("my_method", my_function)   # fn(model, images, targets)
    maps = saliency_gen.attribute(model, images, "smoothgrad(my_method)")
    maps = saliency_gen.attribute(model, images, "my_package.my_module:my_function")

A method is a unit (`saliency_gen.units.Method`, one module each under `saliency_gen.methods`);
`saliency_gen.METHODS` lists every built-in name; `saliency_gen.records` owns the TFRecord
schemas; `python -m saliency_gen.generate` writes saliency records (docs/saliency.md).
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from saliency_gen import methods  # noqa: F401  (registers the built-in units)
from saliency_gen.engine import attribute, predict
from saliency_gen.names import METHODS, method_names, resolve
from saliency_gen.plugins import register_method
from saliency_gen.spec import MethodSpec
from saliency_gen.transforms import postprocess
from saliency_gen.units import Items, Method, Param, Plan, register

__all__ = ["METHODS", "Items", "Method", "MethodSpec", "Param", "Plan", "attribute",
           "method_names", "postprocess", "predict", "register", "register_method", "resolve"]
