"""Scale-out benchmark (docs/scale_out.md, "Benchmark"), measured in one run:

1. saliency generation: `saliency_gen.beam_generate` on the DirectRunner with 2 worker processes
   against the single-process `saliency_gen.generate` on the same records (images/s, ratio);
2. training: `roar.train` steps/s under MirroredStrategy on 2 logical CPUs against one device
   with the same global batch (ratio);
3. Dask (`--workloads=dask`): generation (`saliency_gen.beam_generate`) and deletion scoring
   (`faithfulness.beam_scoring`) on a local Dask cluster of two single-threaded worker
   processes (`models.foundation.cluster.local_cluster`) against one single-threaded process
   (the single-process generator; the scoring binary on Beam's in-process runner): the ratio
   of the rates, and its share of the ideal 2 (docs/scale_out.md, "Dask").

Both on a cheap model (plain_cnn) and a costlier one (small_resnet), 64-px random images, 2,048
by default, so that each Beam worker's start-up (a TensorFlow import and a model load) weighs
less than at a few hundred images (docs/scale_out.md, "Benchmark"). The Beam workers are local
processes with one TensorFlow thread each (`saliency_gen.beam_support.local_worker_threads`:
the cores shared out). Whole processes are
timed (start-up included), so the ratios are what a user sees.

    python scripts/bench_scale.py [--images=2048] [--epochs=2] [--models=plain_cnn,small_resnet]
        [--workloads=generation,training]
"""
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

from models.foundation import provenance
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_records(root, images, chosen, size=64, shards=4):
    import keras

    import models
    from saliency_gen.data import records

    rng = np.random.RandomState(0)
    per = images // shards
    for shard in range(shards):
        examples = []
        for index in range(per):
            buffer = io.BytesIO()
            Image.fromarray(rng.randint(0, 256, (size, size, 3), np.uint8)).save(buffer, "PNG")
            examples.append(records.image_example(buffer.getvalue(), int(rng.randint(10)),
                                                  filename=f"{shard}_{index:04d}.png"))
        name = f"train-{shard:05d}-of-{shards:05d}.tfrecord"
        records.write_records(os.path.join(root, name), examples)
        records.write_records(os.path.join(root, name.replace("train", "validation")),
                              examples[: max(1, per // 4)])
    paths = {}
    for model in chosen:
        keras.utils.set_random_seed(0)
        paths[model] = os.path.join(root, model)
        models.export(models.build(model, 10, (size, size, 3)), paths[model])
    return paths


def timed(arguments, env=None):
    started = time.time()
    done = subprocess.run(arguments, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return time.time() - started


@dataclasses.dataclass(frozen=True)
class Config:
    images: int = option(2048, "Random 64-px images to explain and train on.")
    epochs: int = option(2, "Training epochs of each training comparison.")
    method: str = option("roar:SH_SG", "Saliency method of the generation comparison.")
    models: str = option("plain_cnn,small_resnet", "Models compared, comma-separated.")
    workloads: str = option("generation,training", "Comparisons run: generation, training, "
                            "dask.")


def dask_rows(root: str, model: str, path: str, pattern: str, args: Config) -> list:
    """Generation and scoring of `model`: one single-threaded process against two
    single-threaded workers of a local Dask cluster (whole processes timed)."""
    from models.foundation import cluster

    one = dict(cluster.SINGLE_THREAD)
    common = [f"--input_pattern={pattern}", f"--model_path={path}",
              f"--saliency_method={args.method}", "--batch_size=16"]
    single = timed([sys.executable, "-m", "saliency_gen.generate", *common,
                    f"--output_dir={root}/dask_single_{model}"], env=one)
    folder = tempfile.mkdtemp(prefix="cluster_", dir=root)
    with cluster.local_cluster(folder, workers=2) as running:
        on_dask = ["--runner=DaskRunner", f"--dask_scheduler_file={running.scheduler_file}"]
        spread = timed([sys.executable, "-m", "saliency_gen.beam_generate", *common,
                        f"--output_dir={root}/dask_{model}", *on_dask], env=one)
        key = args.method.split(":")[-1]
        scoring = [sys.executable, "-m", "faithfulness.beam_scoring",
                   f"--input_pattern={root}/dask_{model}/{key}/train-*",
                   f"--model_path={path}", f"--saliency_method={args.method}",
                   "--evaluation_protocol=deletion", "--batch_size=16"]
        scored_one = timed([*scoring, "--beam_workers=1", f"--output={root}/one_{model}.json"],
                           env=one)
        scored_dask = timed([*scoring, *on_dask, f"--output={root}/dask_{model}.json"],
                            env=one)
    return [(f"generation {model} ({args.method}), Dask 2 workers x 1 thread",
             args.images / single, args.images / spread, "images/s"),
            (f"deletion scoring {model}, Dask 2 workers x 1 thread", args.images / scored_one,
             args.images / scored_dask, "images/s")]


def run(args: Config) -> None:
    """Runs both comparisons and prints the table (whole processes timed)."""
    print(f"machine: {provenance.machine()}", flush=True)
    chosen, workloads = args.models.split(","), args.workloads.split(",")
    unknown = sorted(set(workloads) - {"generation", "training", "dask"})
    if unknown:
        raise UserError(f"--workloads: unknown {', '.join(unknown)} (generation, training, "
                        "dask)")
    root = tempfile.mkdtemp(prefix="bench_scale_")
    paths = make_records(root, args.images, chosen)
    pattern = os.path.join(root, "train-*")
    rows = []
    for model, path in (paths.items() if "generation" in workloads else ()):
        common = [f"--input_pattern={pattern}", f"--model_path={path}",
                  f"--saliency_method={args.method}", "--batch_size=16"]
        single = timed([sys.executable, "-m", "saliency_gen.generate", *common,
                        f"--output_dir={root}/single_{model}"])
        beam = timed([sys.executable, "-m", "saliency_gen.beam_generate", *common,
                      f"--output_dir={root}/beam_{model}", "--beam_workers=2"])
        rows.append((f"generation {model} ({args.method})", args.images / single,
                     args.images / beam, "images/s"))
    for model in (chosen if "training" in workloads else ()):
        train = [sys.executable, "-m", "roar.train", "--transformation=raw_image",
                 f"--data_dir={root}", "--num_classes=10", f"--model={model}",
                 f"--epochs={args.epochs}", "--batch_size=32", "--optimizer=sgd",
                 "--warmup_epochs=0"]
        steps = args.epochs * (args.images // 32)
        one = timed([*train, f"--output_dir={root}/one_{model}"])
        two = timed([*train, f"--output_dir={root}/two_{model}", "--strategy=mirrored",
                     "--cpu_replicas=2"])
        rows.append((f"training {model} (MirroredStrategy, 2 logical CPUs)", steps / one,
                     steps / two, "steps/s"))
    for model, path in (paths.items() if "dask" in workloads else ()):
        rows += dask_rows(root, model, path, pattern, args)
    print(f"{'workload':58} {'one process':>16} {'scaled out':>16} {'ratio':>7}")
    for name, base, scaled, unit in rows:
        print(f"{name:58} {base:7.2f} {unit:>8} {scaled:7.2f} {unit:>8} {scaled / base:7.2f}"
              + (f"  ({scaled / base / 2:.2f} of 2x)" if "Dask" in name else ""))
    print(json.dumps({"images": args.images, "epochs": args.epochs, "cores": os.cpu_count(),
                      "machine": provenance.machine()}))


if __name__ == "__main__":
    run_binary(Config, run)
