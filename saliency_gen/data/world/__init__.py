"""Worlds in BAM's on-disk layout, and the built-in synthetic world every benchmark uses.

| Module | What |
|---|---|
| `dataset` | BAM's layout: class names, file names, label / box / mask files, listings, inputs |
| `compositing` | BAM's pasting rule: size, position and compositing of an object cut-out |
| `construction` | writing the layout (composites, metadata, dog and TCAV sets, relative sets) |
| `synthetic` | the procedural world: drawn objects in drawn scenes, plus image TFRecords |
| `cache` | the one cache of the synthetic world: the world, its records, the clean model |

The real BAM build from MSCOCO and MiniPlaces (`bam.coco_miniplaces`) writes the same layout
with these modules; the benchmarks read it (docs/synthetic_world.md).
"""
