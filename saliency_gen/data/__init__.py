"""Data: record schemas and their readers, input pipelines, the shard ledger, stored map
formats, image sources and the synthetic BAM world (docs/architecture.md, "Layers"). It never
imports `saliency_gen.attribution`."""
