"""The one shape of a metric (docs/architecture.md, "One metric shape").

A metric is declared once, beside its definition, as a `MetricSpec`: its name, which direction
is better, what one of its units is (an image, or a training seed) and a line about it. What
computes metrics has one shape too, `PerUnitScores`: the specs of the metrics it gives and
`score(method)`, every metric's value on every unit for one method, computed in batches. The
binaries average those values into their tables; the report card compares them unit by unit
(`models.report.card_engine.Benchmark` is this shape, with the settings that make its cells).
What computes a measure on a group of images is a `Measure` (its scorer, built once, and
`score(group)`), which the binaries, the card and Beam all call.
"""
import dataclasses
from typing import Any, Callable, Iterable, Protocol, Sequence

UNITS = ("image", "seed")


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A metric: its name, which direction is better, its units, and words for a reader."""

    name: str
    higher_is_better: bool
    unit: str = "image"  # "image" or "seed": what the card's interval resamples
    about: str = ""  # one line for a legend
    note: str = ""  # a known behaviour a reader should know (under a table)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"MetricSpec {self.name!r}: unit {self.unit!r} is not one of "
                             f"{', '.join(UNITS)}")

    @property
    def arrow(self) -> str:
        """"↑" when higher is better, else "↓"."""
        return "↑" if self.higher_is_better else "↓"


class PerUnitScores(Protocol):
    """What computes metrics: their specs, and for one method every metric's per-unit values
    ({spec name: float array [units]}, NaN where a unit has no value; the same units in the
    same order for every method, so methods compare unit by unit)."""

    metrics: tuple

    def score(self, method: str) -> dict:
        ...


@dataclasses.dataclass(frozen=True)
class Group:
    """One group of images a measure scores together: the model, images [n, H, W, C] in its
    input space, the labels explained, the ids keying random draws, and `explain(batch,
    targets)`, the explainer's maps of a batch (of the group's images, or of perturbed ones)."""

    loaded: Any
    images: Any
    labels: Any
    ids: Any
    explain: Callable[[Any, Any], Any]


class Measure(Protocol):
    """How a measure computes, whoever calls it (a binary, the report card, Beam): the scorer it
    builds once per evaluation (its traced functions reused for every explainer and group),
    and `score`, every metric's per-image values of one explainer on one `Group`. The
    faithfulness protocols are measures (`faithfulness.protocol_measures.MEASURES`)."""

    def scorer(self, loaded: Any, options: Any) -> Any:
        """What the measure scores with, built once per evaluation."""

    def score(self, group: Group, options: Any, scorer: Any) -> dict:
        """{metric name: per-image values [n]} of one explainer on `group`."""


def specs_named(specs: "tuple[MetricSpec, ...]", names: Sequence[str]) -> tuple:
    """The specs of `names`, in the order of `specs` (a binary's or card's chosen subset)."""
    return tuple(spec for spec in specs if spec.name in names)


def legend(specs: "Iterable[MetricSpec]") -> str:
    """One line per metric for a binary's output: its name, arrow and what it is."""
    return "\n".join(f"{spec.name} {spec.arrow}: {spec.about}" for spec in specs)
