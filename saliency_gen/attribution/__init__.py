"""Attribution: the engine, the method units and their registry, noise wrappers, method names,
plug-ins, baselines and post-processing (docs/architecture.md, "Layers"). It never imports
`saliency_gen.data`; `saliency_gen`'s own names (`saliency_gen.attribute`, ...) come from here."""
