"""In-domain fine-tuning for IDSDS (docs/faithfulness.md, "Fine-tuning"): `python -m
faithfulness.finetune`.

    python -m faithfulness.finetune                       # the synthetic world's clean small_cnn
    python -m faithfulness.finetune --init_model=runs/clean/model --train_pattern='train-*' \\
        --eval_pattern='validation-*' --output_dir=finetuned --epochs=30 --batch_size=256

Starts from an exported zoo model (`--init_model`) or a zoo architecture with `--weights`
(imagenet or a weights file) and trains on image TFRecords with the IDSDS recipe: SGD with
momentum 0.9, learning rate 0.001 divided by 10 every 10 epochs, weight decay 1e-4 coupled as in
PyTorch (an L2 term on every weight added to the loss, not Keras' decoupled decay), random resized
crop and horizontal flip, and then, with probability 1/2, exactly one random cell of the G x G
grid replaced by the baseline (`faithfulness.random_cell_deletion`, keyed on epoch and example).
Keeps the weights with the best clean validation top-1, exports them as a SavedModel
(`<output_dir>/model`) and writes `metrics.json`; a killed run resumes from its epoch backup to
the uninterrupted result, and a finished run of the same origin is reused.
"""
import dataclasses
import os
from typing import TYPE_CHECKING, Optional

from faithfulness import protocols
from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.lazy import lazy_module
from models.training import distribution, recipes
from models.training.recipes import TrainingFlags

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from faithfulness import finetuning
    from models.training import loop
    from saliency_gen.data import records
    from saliency_gen.data.world import cache
else:
    finetuning = lazy_module("faithfulness.finetuning")
    loop = lazy_module("models.training.loop")
    records = lazy_module("saliency_gen.data.records")
    cache = lazy_module("saliency_gen.data.world.cache")


@dataclasses.dataclass(frozen=True)
class Config(TrainingFlags):
    """faithfulness.finetune's options (one flag each; the training flags shared with the
    other trainers first)."""

    init_model: Optional[str] = option(
        None,
        "Exported zoo model to start from (default: the synthetic world's clean "
        'small_cnn).', origin=("init_model_id", "model"))
    model: Optional[str] = option(None, 'Zoo architecture instead of --init_model.',
                                  origin=("model", "init_model_id"))
    weights: Optional[str] = option(None, 'With --model: imagenet or a weights file.',
                                    origin=("weights", "init_model_id"))
    num_classes: Optional[int] = option(None, 'With --model: number of classes.',
                                        origin=("num_classes", "init_model_id"))
    image_size: int = option(224, 'With --model: input size.',
                             origin=("size", "init_model_id"))
    train_pattern: Optional[str] = option(None, 'Training image TFRecords.', origin="train_data")
    eval_pattern: Optional[str] = option(None, 'Validation image TFRecords.', origin="eval_data")
    output_dir: str = option("idsds_finetuned", 'Where the model and metrics go.', origin=False)
    epochs: Optional[int] = option(None, 'Epochs (default 30; 3 on the synthetic world).',
                                   origin="epochs")
    batch_size: Optional[int] = option(None, 'Batch size (default 256; 64 synthetic).',
                                       origin="batch_size")
    learning_rate: Optional[float] = option(None, 'Initial learning rate (default 0.001).',
                                            origin="learning_rate")
    decay_every: Optional[int] = option(None, 'Epochs between x0.1 decays (default 10).',
                                        origin="decay_every")
    weight_decay: float = option(1e-4, 'Coupled (PyTorch-style) weight decay.')
    grid_rows_and_cols: int = option(4, 'Grid of the random cell deletion.', origin="grid")
    baseline: str = option("zeros", 'Deleted-cell baseline.', protocols.BASELINES)
    seed: int = option(0, 'Seed of the order, crops, flips and deletions.')
    overwrite: bool = option(False, 'Replace a run folder made with other settings instead of '
                             'stopping.', origin=False)



def run(config: Config) -> dict:
    """Fine-tunes with `config` and exports the best epoch; returns the metrics. With
    --mode=eval, gives the clean top-1 of the export --checkpoint on the evaluation records
    instead (`evaluate_export`)."""
    f = config
    if f.mode == "eval" and f.checkpoint:  # (TrainingFlags: eval needs a checkpoint)
        pattern = f.eval_pattern or os.path.join(cache.records_dir(seed=0), "validation-*")
        result = finetuning.evaluate_export(f.checkpoint,
                                            records.list_files(pattern, "--eval_pattern"))
        print(f"clean validation top-1: {result['top1']:.4f} on {result['n_eval']} images "
              f"({f.checkpoint}, --mode=eval)")
        return result
    # A multi-worker strategy (and logical CPUs) must exist before TensorFlow runs anything.
    distribution.start(f.strategy, f.cpu_replicas)
    synthetic = f.init_model is None and f.model is None
    init_model, train_pattern, eval_pattern = f.init_model, f.train_pattern, f.eval_pattern
    if synthetic:
        init_model = cache.clean_model(seed=0)
        shards = cache.records_dir(seed=0)
        train_pattern = train_pattern or os.path.join(shards, "train-*")
        eval_pattern = eval_pattern or os.path.join(shards, "validation-*")
    if not (train_pattern and eval_pattern):
        raise UserError("pass --train_pattern and --eval_pattern")
    if not synthetic and not init_model and not f.num_classes:
        raise UserError("pass --init_model, or --model with --num_classes and --image_size")
    recipe = recipes.with_overrides(
        finetuning.PRESETS["synthetic" if synthetic else "real"], epochs=f.epochs,
        batch_size=f.batch_size, learning_rate=f.learning_rate, decay_every=f.decay_every,
        weight_decay=f.weight_decay, grid=f.grid_rows_and_cols, baseline=f.baseline)
    options = f.run_options(recipe=recipe, seed=f.seed, overwrite=f.overwrite, verbose=1,
                            **({} if init_model else {"model_name": f.model,
                                                      "num_classes": f.num_classes}))
    result = finetuning.finetune(
        records.list_files(train_pattern, "--train_pattern"),
        records.list_files(eval_pattern, "--eval_pattern"), f.output_dir, options,
        init_model=init_model, size=f.image_size, weights=f.weights)
    if "stopped_after_epoch" in result:
        print(loop.stopped_message(result["stopped_after_epoch"]))
        return result
    print(f"clean validation top-1: {result['initial_val_top1']:.4f} before, "
          f"{result['best_val_top1']:.4f} best after {recipe.epochs} epochs "
          f"({result['seconds']:.0f} s); model in {os.path.join(f.output_dir, 'model')}")
    return result


if __name__ == "__main__":
    run_binary(Config, run)
