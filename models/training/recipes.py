"""Training recipes, light (no TensorFlow, so that a binary checks its flags before it starts;
the loop that uses them is `models.training.loop`); docs/architecture.md, "Recipes and presets".

Recipes are frozen dataclasses; a binary keeps its presets in a dict `PRESETS = {"synthetic":
..., "real": ...}` and applies the flags the user set with `with_overrides`. `Recipe` here is
the ROAR recipe (label smoothing 0.1, Nesterov SGD with momentum 0.9, a learning rate scaled by
batch / 256 with a linear warm-up and step decays, weight decay where the model has it), also
the synthetic world's clean model's.
"""
import dataclasses
from typing import Any, Optional, Protocol, TypeVar

from models.foundation.cli import option
from models.foundation.errors import UserError
from models.foundation.rules import PRECISIONS, Checked, at_least
from models.training.distribution import STRATEGIES

OPTIMIZERS = ("sgd", "adam")  # Nesterov SGD or Adam (models.training.loop.make_optimizer)


class TrainingRecipe(Protocol):
    """What the one training loop reads of any trainer's recipe (ROAR's `Recipe`,
    `bam.train.BamRecipe`, `faithfulness.finetuning.FinetuneRecipe`): its length and batch size;
    the rest is the trainer's own."""

    @property
    def epochs(self) -> float: ...

    @property
    def batch_size(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The ROAR optimisation recipe; the defaults are the original's shape with a short
    schedule for small models."""

    epochs: float = 10.0
    batch_size: int = 64
    optimizer: str = "sgd"
    base_learning_rate: float = 0.1
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    momentum: float = 0.9
    warmup_epochs: float = 5.0
    decay_epochs: tuple = (30.0, 60.0, 80.0)
    decay_multipliers: tuple = (0.1, 0.01, 0.001)


# Small models on the synthetic world (Adam, 4 epochs) and the paper's ImageNet schedule.
SYNTHETIC_RECIPE = Recipe(epochs=4.0, batch_size=64, optimizer="adam", base_learning_rate=0.004,
                          warmup_epochs=1.0, decay_epochs=(3.0,), decay_multipliers=(0.1,))
REAL_RECIPE = Recipe(epochs=90.0, batch_size=256, optimizer="sgd", base_learning_rate=0.1,
                     warmup_epochs=5.0, decay_epochs=(30.0, 60.0, 80.0),
                     decay_multipliers=(0.1, 0.01, 0.001))


RecipeType = TypeVar("RecipeType")


def own_recipe(run: "RunOptions", kind: type[RecipeType]) -> RecipeType:
    """`run.recipe` as the trainer's own recipe type `kind`; another trainer's recipe is one
    line, not a missing attribute half-way through a run."""
    if not isinstance(run.recipe, kind):
        raise UserError(f"this trainer takes a {kind.__name__}, not a "
                        f"{type(run.recipe).__name__}")
    return run.recipe


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How one training run is made, besides its data: the zoo model (`model_options`: builder
    options such as a small variant's width), its classes, the trainer's recipe (ROAR's
    `Recipe` here, BAM's or IDSDS fine-tuning's: recipes are data), the seed, the
    tf.distribute `strategy` ("mirrored" over `cpu_replicas` logical CPUs when > 0) and the
    `precision`; then what this invocation does, which is not part of the run's origin: stop
    after `stop_after_epochs` epochs, `overwrite` a folder of another origin, Keras' `verbose`
    level. The training binaries build one from their flags and pass it down
    (docs/architecture.md, "Recipes and presets")."""

    model_name: str = "small_cnn"
    num_classes: int = 10
    recipe: TrainingRecipe = Recipe()  # the trainer's: Recipe, BamRecipe or FinetuneRecipe
    seed: int = 0
    strategy: str = "default"
    precision: str = "float32"
    cpu_replicas: int = 0
    model_options: Optional[dict] = None
    stop_after_epochs: Optional[int] = None
    overwrite: bool = False
    verbose: int = 0


def with_overrides(recipe: Any, **overrides: Any) -> Any:
    """`recipe` with every override that is not None (a flag the user set) applied."""
    given = {key: value for key, value in overrides.items() if value is not None}
    fields = {field.name for field in dataclasses.fields(recipe)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise UserError(f"{type(recipe).__name__} has no setting {', '.join(unknown)}")
    return dataclasses.replace(recipe, **given)


@dataclasses.dataclass(frozen=True)
class TrainingFlags(Checked):
    """The training options every training binary has (bam.train, roar.train,
    faithfulness.finetune), declared once: their Configs derive from this one
    (docs/architecture.md, "Recipes and presets")."""

    strategy: str = option("default", "tf.distribute strategy: one device, mirrored (the "
                           "devices of this machine), multi_worker (the TF_CONFIG cluster) or tpu.",
                           STRATEGIES)
    cpu_replicas: int = option(0, "With --strategy=mirrored: split the CPU into this many "
                               "logical devices (data parallelism without GPUs).",
                               rule=at_least(0))
    precision: str = option("float32", "Training precision; logits and loss stay float32 "
                            "and the exported model is float32.", PRECISIONS)
    stop_after_epochs: Optional[int] = option(None, "End this invocation after this many "
                                              "epochs (keeping the backup): a re-run resumes.",
                                              origin=False, rule=at_least(1))
    mode: str = option("train", "train (then evaluate), or eval: evaluate --checkpoint on the "
                       "binary's evaluation data without training.", ("train", "eval"),
                       origin=False)
    checkpoint: Optional[str] = option(
        None, "--mode=eval: an exported model folder (a run's model/); roar.train also takes a "
        "Keras weights file of --model (a killed run's newest backup/epoch-NNNN.weights.h5).",
        origin=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode == "eval" and not self.checkpoint:
            raise UserError("--mode=eval needs --checkpoint (an exported model folder; "
                            "roar.train also takes a .weights.h5 file)")

    def run_options(self, **fields: Any) -> RunOptions:
        """A `RunOptions` with these flags and `fields` (model, classes, recipe, seed, ...)."""
        return RunOptions(strategy=self.strategy, cpu_replicas=self.cpu_replicas,
                          precision=self.precision, stop_after_epochs=self.stop_after_epochs,
                          **fields)
