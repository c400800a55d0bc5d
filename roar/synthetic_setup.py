"""The built-in ROAR setup on the synthetic world, built once and cached.

`prepare(seed, method)` makes, only what is missing: the synthetic BAM world with its image
TFRecords (shared with `bam.synthetic_setup`), a clean small_cnn trained on object labels in
ImageNet's input space (the model that is explained), and the saliency records of `method` for
the train and validation shards (`saliency_gen.generate`, float16 maps so that every ranking
unit and sign is exact enough). Each step writes under a temporary name and renames, so an
interrupted setup resumes. The cache is `$XDG_CACHE_HOME/attribution-benchmarks/
roar_synthetic_seed<seed>` (default under `~/.cache`).
"""
import os

from bam import synthetic
from bam import synthetic_setup as bam_setup
from saliency_gen import generate as saliency_generate
from saliency_gen import names

IMAGE_SIZE = 64


def default_cache_dir(seed=0):
    return bam_setup.default_cache_dir(seed).replace("bam_synthetic", "roar_synthetic")


def method_key(method):
    """The record key of a ROAR code or key (`SH` -> `gradient_image`); other names unchanged."""
    try:
        return names.ROAR_KEYS[names.roar_code(method)]
    except Exception:  # not a ROAR name: a key written by another generator
        return method


def clean_model(cache_dir=None, seed=0, log=print):
    """{"records": image-record dir, "clean": run dir whose `model` is the clean small_cnn}."""
    from roar import data, train

    cache_dir = cache_dir or default_cache_dir(seed)
    world_dir = os.path.join(bam_setup.default_cache_dir(seed), "data")
    log(f"synthetic ROAR setup in {cache_dir} (world in {world_dir}; built once, then reused)")
    info = synthetic.build_world(world_dir, seed=seed)
    if not info["reused"]:
        log(f"built the synthetic world in {info['seconds']:.0f} s")
    records_dir = os.path.join(world_dir, "records")
    clean_dir = os.path.join(cache_dir, "clean")
    if not os.path.isfile(os.path.join(clean_dir, "metrics.json")):
        files = {split: data.list_shards(os.path.join(records_dir, f"{split}-*"), split)
                 for split in ("train", "validation")}
        recipe = train.Recipe(**train.SYNTHETIC_RECIPE, decay_multipliers=(0.1,))
        metrics = train.run_masked(files["train"], files["validation"], data.MaskConfig(),
                                   output_dir=clean_dir, recipe=recipe, control="none",
                                   size=IMAGE_SIZE, seed=seed)
        log(f"trained the clean model: top-1 {metrics['top1']:.3f}")
    return {"records": records_dir, "clean": clean_dir}


def prepare(cache_dir=None, seed=0, method="gradient_image", log=print):
    """{"records": image-record dir, "saliency": the method's saliency dir, "clean": run dir}.
    With `method=None` only the world is built."""
    cache_dir = cache_dir or default_cache_dir(seed)
    if method is None:
        world_dir = os.path.join(bam_setup.default_cache_dir(seed), "data")
        synthetic.build_world(world_dir, seed=seed)
        return {"records": os.path.join(world_dir, "records")}
    result = clean_model(cache_dir, seed, log)
    records_dir, clean_dir = result["records"], result["clean"]
    key = method_key(method)
    code = names.roar_code(key)
    saliency_dir = os.path.join(cache_dir, "saliency")
    report = saliency_generate.generate(
        os.path.join(records_dir, "*.tfrecord"), os.path.join(clean_dir, "model"),
        [f"roar:{code}"], saliency_dir, dtype="float16", seed=seed)
    if report["images"]:
        log(f"wrote {report['images']} {key} maps in {report['seconds']:.0f} s")
    return dict(result, saliency=os.path.join(saliency_dir, code), key=key)
