"""One report card for saliency methods across the benchmarks (docs/report_card.md).

    python scripts/report_card.py                         # the synthetic world, default methods
    python scripts/report_card.py --methods=bam:GC,random,my_package.methods:my_map
    python scripts/report_card.py --model_path=runs/clean/model --input_pattern='val-*' \\
        --data_dir=bam_data --bam_model_dir=bam_models --nr_images=500 --num_imgs=200

The thin entry point: it parses the flags, asks bam/ and faithfulness/ for their benchmarks
(`bam.card`, `faithfulness.card`), and leaves the cells, intervals, ranks, agreement and pages to
`models.card` and `models.card_outputs`. Cells are cached under --output_dir, so a killed card
resumes and one more method costs only that method.
"""
import models  # noqa: I001  (first: TensorFlow loads quietly)
import dataclasses
import os
import sys
import time
from typing import Optional

from tqdm import tqdm

from bam import card as bam_card
from bam import synthetic_setup
from faithfulness import card as faithfulness_card
from faithfulness import evaluate
from models import card, card_outputs, provenance
from models.cli import option, run_binary
from models.errors import UserError, check_minimum, require_both_or_neither
from models.files import exclusive
from saliency_gen import records
from saliency_gen.world import cache

BAM_METHODS = ("bam:GC", "bam:VG", "bam:SG", "bam:IG", "bam:IG-SG", "bam:GxI", "bam:GB",
               "bam:GGC")
CONTROLS = ("random", bam_card.ORACLE)
BENCHMARKS = ("BAM", *faithfulness_card.PROTOCOLS)


@dataclasses.dataclass(frozen=True)
class Config:
    """The card's options (one flag each)."""

    methods: tuple = option(BAM_METHODS + CONTROLS,
                            "Methods: saliency_gen names, registered methods, "
                            "'package.module:function', and the controls random and oracle.")
    benchmarks: tuple = option(BENCHMARKS, "Benchmarks to run.")
    model_path: Optional[str] = option(None, "Classifier for the faithfulness protocols "
                                       "(default: the synthetic world's clean small_cnn).")
    input_pattern: Optional[str] = option(None, "Its image TFRecords (default: the synthetic "
                                          "world's validation records).")
    nr_images: int = option(64, "Images for the faithfulness protocols.")
    data_dir: Optional[str] = option(None, "BAM data root (default: the synthetic world).")
    bam_model_dir: Optional[str] = option(None, "BAM models obj/, scene/, scene_only/.")
    num_imgs: int = option(50, "Images sampled per BAM metric.")
    max_step_nb: int = option(64, "Deletion / Insertion: at most this many steps.")
    batch_size: int = option(32, "Work items per model call.")
    seed: int = option(0, "Seed of the image samples, the random draws and the bootstrap.")
    output_dir: str = option("report_card", "Where the cells and the card go.")
    cache_dir: Optional[str] = option(None, "Cache of the synthetic world.")
    overwrite: bool = option(False, "Recompute cells made with other settings.")


def check_flags(config: Config) -> None:
    """Empty lists, unknown benchmarks and counts out of range stop at once with one line."""
    if not config.methods:
        raise UserError("--methods names no method")
    if not config.benchmarks:
        raise UserError(f"--benchmarks names none; choose from {', '.join(BENCHMARKS)}")
    unknown = [b for b in config.benchmarks if b not in BENCHMARKS]
    if unknown:
        raise UserError(f"--benchmarks: unknown benchmark {unknown[0]!r}; choose from "
                        f"{', '.join(BENCHMARKS)}")
    for name in ("nr_images", "num_imgs", "max_step_nb", "batch_size"):
        check_minimum(name, getattr(config, name), 1)
    require_both_or_neither(("model_path", config.model_path),
                            ("input_pattern", config.input_pattern))
    require_both_or_neither(("data_dir", config.data_dir),
                            ("bam_model_dir", config.bam_model_dir))


def build_benchmarks(config: Config) -> list:
    """The chosen benchmarks, on the given or the synthetic world's models and data."""
    found = []
    if "BAM" in config.benchmarks:
        data_dir, model_dir = config.data_dir, config.bam_model_dir
        if data_dir is None:
            data_dir, model_dir = synthetic_setup.prepare(config.cache_dir, log=lambda *_: None)
        found.append(bam_card.benchmark(data_dir, model_dir, num_imgs=config.num_imgs,
                                        seed=config.seed, batch_size=config.batch_size))
    protocols = [b for b in config.benchmarks if b in faithfulness_card.PROTOCOLS]
    if protocols:
        model_path, pattern = config.model_path, config.input_pattern
        if model_path is None:
            model_path = cache.clean_model(seed=0, folder=config.cache_dir, log=lambda *_: None)
            pattern = os.path.join(cache.records_dir(0, config.cache_dir, lambda *_: None),
                                   "validation-*")
        loaded = models.load(model_path)
        images, labels, ids = evaluate.load_images(pattern, loaded, config.nr_images,
                                                   config.seed)
        options = evaluate.Options(max_step_nb=config.max_step_nb,
                                   batch_size=config.batch_size, seed=config.seed)
        data = {"data": provenance.listing_digest(records.list_files(pattern)),
                "nr_images": config.nr_images}
        for benchmark in faithfulness_card.benchmarks(loaded, images, labels, ids, data=data,
                                                      names=protocols, options=options):
            found.append(dataclasses.replace(
                benchmark, supports=lambda method: method != bam_card.ORACLE))
    order = {name: i for i, name in enumerate(config.benchmarks)}
    return sorted(found, key=lambda b: order[b.name])


def run(config: Config) -> dict:
    """Runs (or resumes) the card of `config`, prints its table and writes its pages."""
    check_flags(config)
    with exclusive(config.output_dir, "--output_dir"):
        return _run(config)


def _run(config: Config) -> dict:
    started = time.time()
    benchmarks = build_benchmarks(config)
    total = sum(b.cost for b in benchmarks) * len(config.methods)
    with tqdm(total=round(total), desc="report card", unit="work", file=sys.stderr,
              disable=None, bar_format="{l_bar}{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]"
              ) as bar:
        cells = card.run_cells(benchmarks, config.methods, config.output_dir,
                               progress=lambda cost: bar.update(round(cost)),
                               overwrite=config.overwrite)
    summary = card.summarise(benchmarks, config.methods, cells, config.seed)
    print(card_outputs.card_table(summary))
    header, rows = card_outputs.agreement_rows(summary)
    print("\nKendall's tau between the benchmarks' method rankings\n"
          + card_outputs.text_table(header, rows))
    intro = ("Each cell: mean [95% bootstrap interval] #rank; a method's rank is 1 + the number "
             "of methods that beat it on the same images (paired bootstrap of the difference "
             "excluding 0), so methods nothing separates share a rank. ↑: higher is better.")
    paths = card_outputs.write_card(summary, config.output_dir, title="Saliency report card",
                                    intro=intro, extra={"seconds": time.time() - started})
    print(f"\nwrote {paths['html']}, {paths['md']}, {paths['csv']} and {paths['json']} "
          f"in {time.time() - started:.0f} s")
    return {"card": summary, "paths": paths}


if __name__ == "__main__":
    run_binary(Config, run)
