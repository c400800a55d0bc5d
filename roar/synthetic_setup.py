"""ROAR on the built-in synthetic world: the saliency records of a method, built once and cached.

`prepare(seed, method)` makes, only what is missing: the synthetic world with its image
TFRecords and the clean small_cnn that is explained (`saliency_gen.data.world.cache`), and the
saliency records of `method` for the train and validation shards (`saliency_gen.generate`,
float16 maps so that every ranking unit and sign is exact enough) in the world cache's
`roar_saliency/<method>`. Each step writes under a temporary name and renames, so an
interrupted setup resumes; the maps are made under the lock of `roar_saliency`
(`cache.building`). `method` is a ROAR record key or code (`gradient_image`, `SH`), any other
method name, or a user method ("package.module:function").
"""
import os
from typing import Callable, Optional

from roar.masked_data import generator_name, record_key_of
from saliency_gen import generate
from saliency_gen.data.world import cache

IMAGE_SIZE = cache.IMAGE_SIZE


def clean_model(seed: int = 0, log: Callable = print) -> str:
    """The export directory of the world's clean model (the one ROAR's maps explain)."""
    return cache.clean_model(seed, log=log)


def prepare(seed: int = 0, method: Optional[str] = "gradient_image",
            log: Callable = print) -> dict:
    """{"records": image-record dir, "model": the clean model's export, "saliency": the
    method's saliency dir, "key": its record key}. With `method=None` only the world and its
    records are made."""
    records = cache.records_dir(seed, log=log)
    if method is None:
        return {"records": records}
    model = clean_model(seed, log)
    name = generator_name(method)
    saliency_dir = os.path.join(cache.cache_dir(seed), "roar_saliency")
    folder = generate.method_directory(name)
    # one generator at a time: generators of the same shards refuse each other (whatever the
    # method), where a setup should wait for the other's maps
    with cache.building("roar_saliency", seed, log=log):
        report = generate.generate(generate.Config(
            input_pattern=os.path.join(records, "*.tfrecord"), model_path=model,
            saliency_method=name, output_dir=saliency_dir, dtype="float16", seed=seed))
    if report["images"]:
        log(f"wrote {report['images']} {method} maps in {report['seconds']:.0f} s")
    return {"records": records, "model": model, "key": record_key_of(method),
            "saliency": os.path.join(saliency_dir, folder)}
