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
import models  # noqa: F401  (first: TensorFlow, whenever it loads, loads quietly)
from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "attribute": "saliency_gen.engine", "predict": "saliency_gen.engine",
    "METHODS": "saliency_gen.names", "method_names": "saliency_gen.names",
    "resolve": "saliency_gen.names",
    "register_method": "saliency_gen.plugins",
    "MethodSpec": "saliency_gen.spec",
    "postprocess": "saliency_gen.transforms",
    "Items": "saliency_gen.units", "Method": "saliency_gen.units", "Param": "saliency_gen.units",
    "Plan": "saliency_gen.units", "register": "saliency_gen.units",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
