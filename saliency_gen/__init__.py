"""The shared attribution engine used by BAM, ROAR and the faithfulness metrics.

    import saliency_gen
    maps = saliency_gen.attribute(model, images, "smoothgrad_sq(integrated_gradients)")
    maps = saliency_gen.attribute(model, images, "roar:IG_SG_2", batch_size=128, seed=0)

    saliency_gen.register_method("my_method", my_function)   # fn(model, images, targets)
    maps = saliency_gen.attribute(model, images, "smoothgrad(my_method)")
    maps = saliency_gen.attribute(model, images, "my_package.my_module:my_function")

Two parts that never import each other (docs/architecture.md, "Layers"): `saliency_gen.attribution`
(the engine; a method is a unit, `saliency_gen.attribution.units.Method`, one module each under
`saliency_gen.attribution.methods`; `saliency_gen.METHODS` lists every built-in name) and
`saliency_gen.data` (`saliency_gen.data.records` owns the TFRecord schemas; pipelines, sources,
the synthetic world). The binaries on top use both: `python -m saliency_gen.generate` writes
saliency records (docs/saliency.md), `saliency_gen.beam_generate` does so as a Beam pipeline.
"""
from models.foundation.lazy import lazy_names

_EXPORTS = {  # name -> the module that defines it
    "attribute": "saliency_gen.attribution.engine", "predict": "saliency_gen.attribution.engine",
    "METHODS": "saliency_gen.attribution.names", "method_names": "saliency_gen.attribution.names",
    "resolve": "saliency_gen.attribution.names",
    "register_method": "saliency_gen.attribution.plugins",
    "MethodSpec": "saliency_gen.attribution.spec",
    "postprocess": "saliency_gen.attribution.transforms",
    "Items": "saliency_gen.attribution.units", "Method": "saliency_gen.attribution.units",
    "Param": "saliency_gen.attribution.units", "Plan": "saliency_gen.attribution.units",
    "register": "saliency_gen.attribution.units",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_names(__name__, _EXPORTS)
