"""The one metric protocol (docs/architecture.md, "One metric protocol").

A metric is declared once, beside its definition, as a `MetricSpec`: its name, which direction
is better, what one of its units is (an image, or a training seed) and a line about it. What
computes metrics has one protocol, `Measure`: the specs of the metrics it gives and
`score(subject)`, every metric's value on every unit of the subject, computed in batches. The
binaries average those values into their tables, Beam scores a range of records with them, the
report card compares them unit by unit (`models.report.card_engine.Benchmark` is a measure whose
subject is a method, with the settings that make its cells).
"""
import dataclasses
from typing import Any, Callable, Iterable, Protocol, Sequence

# what one value stands for: an image, a training seed, or a call (a measure of a group of
# images as a whole, such as a correlation across them: each image carries its group's value)
UNITS = ("image", "seed", "call")


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A metric: its name, which direction is better, its units, and words for a reader."""

    name: str
    higher_is_better: bool
    unit: str = "image"  # "image", "seed" or "call": what the card's interval resamples
    about: str = ""  # one line for a legend
    note: str = ""  # a known behaviour a reader should know (under a table)
    group: str = ""  # the columns it sits with on the card (a peer measure's family)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"MetricSpec {self.name!r}: unit {self.unit!r} is not one of "
                             f"{', '.join(UNITS)}")

    @property
    def arrow(self) -> str:
        """"↑" when higher is better, else "↓"."""
        return "↑" if self.higher_is_better else "↓"


class Measure(Protocol):
    """The project's one metric protocol: what computes metrics, whoever calls it (a binary,
    the report card, Beam). `metrics` are the specs of what it gives; `score(subject)` gives
    every metric's values on the subject's units, {spec name: values whose first axis is the
    units} (NaN where a unit has no value). A measure is built once per evaluation with its
    settings (its traced functions are then reused for every subject). The subject is what
    one call scores:

    - a `Group` of images and their explainer: the faithfulness protocols and IDSDS
      (`faithfulness.protocol_measures`);
    - images with their maps (`roar.road_outcomes.RoadImages`): ROAD (`road_outcomes.Road`);
    - one method's masked data (`roar.train.MaskedData`): ROAR / KAR, one unit per training
      seed (`roar.train.Retraining`);
    - a method's name: BAM (`bam.metric_definitions.PairMetrics`, whose metrics sample their
      own images) and every report-card benchmark (`models.report.card_engine.Benchmark`).
    """

    @property
    def metrics(self) -> "tuple[MetricSpec, ...]":
        """The specs of the metrics `score` gives, in its order."""

    def score(self, subject: Any) -> dict:
        """{metric name: per-unit values} of `subject`."""


@dataclasses.dataclass(frozen=True)
class Group:
    """One group of images a measure scores together: the model, images [n, H, W, C] in its
    input space, the labels explained, the ids keying random draws, `explain(batch, targets,
    ids=None)`, the explainer's maps of a batch (of the group's images, or of perturbed ones,
    whose random draws `ids` key), the images' ground-truth object masks [n, H, W] where
    the data has them (the localisation measures need them), and the explainer itself (a
    method name or a resolved method), for the measures that explain with another model."""

    loaded: Any
    images: Any
    labels: Any
    ids: Any
    explain: Callable[..., Any]
    masks: Any = None
    explainer: Any = None


def specs_named(specs: "tuple[MetricSpec, ...]", names: Sequence[str]) -> tuple:
    """The specs of `names`, in the order of `specs` (a binary's or card's chosen subset)."""
    return tuple(spec for spec in specs if spec.name in names)


def legend(specs: "Iterable[MetricSpec]") -> str:
    """One line per metric for a binary's output: its name, arrow and what it is."""
    return "\n".join(f"{spec.name} {spec.arrow}: {spec.about}" for spec in specs)
