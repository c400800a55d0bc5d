"""The one cache of the built-in synthetic world, shared by every benchmark (docs/
synthetic_world.md, "The cache").

Everything derived from the world lives in one folder per seed,
`$XDG_CACHE_HOME/attribution-benchmarks/synthetic_seed<seed>` (default under `~/.cache`):

| Folder | What | Made by |
|---|---|---|
| `world/` | the world in BAM's layout, with image TFRecords in `world/records` | `world()` |
| `clean/` | the clean small_cnn (ImageNet input space) trained on object labels | `clean_model()` |
| `bam_models/` | BAM's obj, scene, scene_only (and scene1..10) models | `bam.synthetic_setup` |
| `roar_saliency/` | saliency records of the explained methods | `roar.synthetic_setup` |

Each step is built only when missing, under a temporary name renamed when complete, so an
interrupted build resumes and a finished one is reused; a process checks and builds a part while
it holds that part's lock (`building`), so two jobs started at once on an empty cache build it
once (the second waits, then reuses) and never replace a folder the other is reading. The
models of the default world come from the weights shipped with the package
(`saliency_gen.data.world.shipped`) unless asked to train.
"""
import os
import shutil
from typing import Callable, ContextManager, Optional

from models.foundation import progress
from models.foundation.files import build_lock, project_cache_dir, write_json
from models.training import loop, recipes
from models.training.training_bar import TrainingBar
from saliency_gen.data import pipelines, records
from saliency_gen.data.world import shipped as shipped_models
from saliency_gen.data.world import synthetic

IMAGE_SIZE = 64


def cache_dir(seed: int = 0, folder: Optional[str] = None) -> str:
    """The cache folder of the world with `seed` (`folder` overrides it, e.g. a --cache_dir)."""
    if folder:
        return folder
    return project_cache_dir(f"synthetic_seed{int(seed)}")


def building(part: str, seed: int = 0, folder: Optional[str] = None,
             log: Callable = print) -> ContextManager[None]:
    """The build lock of one part of the world's cache (`files.build_lock`; `part` a folder
    in it: "world", "clean", "bam_models", "roar_saliency"): held while the part is
    checked and built, so a job waits only for a part it needs that another job is building.
    A part's builder may take the lock of a part it reads (world, clean), never the reverse."""
    return build_lock(os.path.join(cache_dir(seed, folder), part),
                      f"the synthetic world's cache ({part})", log)


def world(seed: int = 0, folder: Optional[str] = None, log: Callable = print) -> str:
    """The world's data folder (BAM layout), built if missing."""
    data_dir = os.path.join(cache_dir(seed, folder), "world")
    with building("world", seed, folder, log):
        bar = progress.CountBar("building the synthetic world", "image")
        info = synthetic.build_world(data_dir, seed=seed, image_size=IMAGE_SIZE, progress=bar)
        bar.close()
    if not info["reused"]:
        log(f"built the synthetic world: {info['num_train_images']} train and "
            f"{info['num_val_images']} val images in {info['seconds']:.0f} s")
    return data_dir


def records_dir(seed: int = 0, folder: Optional[str] = None, log: Callable = print) -> str:
    """The world's image TFRecords (`train-*`, `validation-*`), built if missing."""
    return os.path.join(world(seed, folder, log), "records")


def clean_model(seed: int = 0, folder: Optional[str] = None, log: Callable = print,
                shipped: bool = True) -> str:
    """The export directory of the clean small_cnn, trained on the world's object labels in
    ImageNet's input space with the synthetic recipe (`models.training.loop`), if missing; with
    `shipped`, the package's weights of it where it has them for this world."""
    with building("clean", seed, folder, log):
        clean_dir = os.path.join(cache_dir(seed, folder), "clean")
        if not shipped and shipped_models.is_installed_copy(os.path.join(clean_dir, "model")):
            shutil.rmtree(clean_dir)  # asked to train: the shipped copy makes way
        if not os.path.isfile(os.path.join(clean_dir, "metrics.json")) and shipped:
            world_dir = world(seed, folder, log)
            metrics = shipped_models.install("clean", world_dir, os.path.join(clean_dir, "model"))
            if metrics is not None:
                write_json(os.path.join(clean_dir, loop.ORIGIN), metrics["origin"], indent=2,
                           sort_keys=True)
                write_json(os.path.join(clean_dir, "metrics.json"), metrics, indent=2,
                           sort_keys=True)
                log(f"loaded the shipped clean model: top-1 {metrics['top1']:.3f}")
        if not os.path.isfile(os.path.join(clean_dir, "metrics.json")):
            shards = records_dir(seed, folder, log)
            files = {split: records.list_files(os.path.join(shards, f"{split}-*"), split)
                     for split in ("train", "validation")}
            recipe = recipes.SYNTHETIC_RECIPE
            train_data = pipelines.image_batches(files["train"], training=True,
                                                 batch_size=recipe.batch_size, size=IMAGE_SIZE,
                                                 seed=seed)
            eval_data = pipelines.image_batches(files["validation"], training=False,
                                                batch_size=256, size=IMAGE_SIZE, seed=seed)
            trained = loop.train_and_evaluate(
                train_data, eval_data,
                recipes.RunOptions(num_classes=10, recipe=recipe, seed=seed),
                num_train=pipelines.count_records(files["train"]),
                num_eval=pipelines.count_records(files["validation"]), size=IMAGE_SIZE,
                output_dir=clean_dir, callbacks=[TrainingBar("training the clean model")])
            log(f"trained the clean model: top-1 {trained['top1']:.3f}")
    return os.path.join(clean_dir, "model")
