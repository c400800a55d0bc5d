"""What the stable order of maps costs (docs/architecture.md, "Stable orders"), measured in one
run:

    python -m scripts.bench_ordering [--maps=16] [--values=12288] [--repeats=20] [--top=5]

Times NumPy's stable argsort (a comparison sort) against `models.foundation.ordering.stable_order`
on random normal maps without ties, the same maps with their 3% highest values set to zero (a few
ties: a gradient map's dead pixels) and rectified and rounded (half zeros, many equal values),
descending, best of --repeats each, taken in turn (`scripts.bench_faithfulness.best_times`), and
`stable_order` as it sorts rows shorter than `ordering.RADIX_WIDTH` (NumPy's comparison sort, then
the runs of equal values; the "comparison" column) and as it sorts longer rows (radix passes; the
"radix" column), forced on every row whatever --values (so runs at a few --values show where the
radix passes start to pay); the "stable_order" column takes the way `stable_order` itself takes at
--values; checks that all give the same order and prints each one's milliseconds and the ratios.
Then the same for the first --top of each order: the stable argsort's first n against
`ordering.top_order`. Then the maps' average ranks (`faithfulness.stats.ranks`, the randomisation
measures' Spearman correlations) against scipy's `rankdata` and against the same function sorting as
short rows and as long rows, all four the same bytes. The maps are float64, whose float32 roundings
merge a few distinct values.
"""
import dataclasses
from typing import Any, Callable
from unittest import mock

import numpy as np

from faithfulness import stats
from models.foundation import ordering, provenance
from models.foundation.cli import option, run_binary
from models.foundation.lazy import lazy_module
from models.foundation.rules import Checked, at_least
from scripts.bench_faithfulness import best_times

scipy_stats = lazy_module("scipy.stats")


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    maps: int = option(16, "Maps sorted at once.", rule=at_least(1))
    values: int = option(12_288, "Values per map (12,288: a 64-px RGB image).",
                         rule=at_least(2))
    repeats: int = option(20, "Timings of each way (the best counts).", rule=at_least(1))
    seed: int = option(0, "Seed of the maps.")
    top: int = option(5, "n of the first-n orders (`top_order`; consistency's 5).",
                      rule=at_least(1))


def run(args: Config) -> None:
    print(f"machine: {provenance.machine()}")
    values = np.random.default_rng(args.seed).normal(size=(args.maps, args.values))
    kinds = (("distinct values", values),
             ("3% zeros", np.where(values > 1.9, 0.0, values)),
             ("rectified, rounded", np.round(np.maximum(values, 0), 2)))
    print(f"{'maps':24} {'stable argsort ms':>18} {'comparison ms':>14} {'radix ms':>9} "
          f"{'stable_order ms':>16} {'ratio':>6} {'comparison/radix':>17} same")
    for name, maps in kinds:
        timed = [lambda: np.argsort(-maps, axis=-1, kind="stable"),
                 lambda: at_radix_width(SHORT, ordering.stable_order, maps, True),
                 lambda: at_radix_width(LONG, ordering.stable_order, maps, True),
                 lambda: ordering.stable_order(maps, descending=True)]
        merge, comparison, radix, ours = (
            seconds * 1000 for seconds in best_times(timed, args.repeats))
        same = all(np.array_equal(timed[0](), way()) for way in timed[1:])
        print(f"{name:24} {merge:18.2f} {comparison:14.2f} {radix:9.2f} {ours:16.2f} "
              f"{merge / ours:6.2f} {comparison / radix:17.2f} {same}")
    print(f"{'maps':24} {'stable argsort ms':>18} {f'top_order {args.top} ms':>16} {'ratio':>6} "
          "same")
    for name, maps in kinds:
        stable = lambda: np.argsort(-maps, axis=-1, kind="stable")[..., :args.top]  # noqa: E731
        top = lambda: ordering.top_order(maps, args.top, descending=True)  # noqa: E731
        merge, fast = (seconds * 1000 for seconds in best_times([stable, top], args.repeats))
        print(f"{name:24} {merge:18.2f} {fast:16.2f} {merge / fast:6.2f} "
              f"{bool(np.array_equal(stable(), top()))}")
    print(f"{args.maps} maps of {args.values} values, descending")
    print(f"{'maps':24} {'scipy ms':>9} {'comparison ms':>14} {'radix ms':>9} {'ranks ms':>9} "
          f"{'scipy/ranks':>12} {'comparison/radix':>17} same")
    for name, maps in kinds:
        timed = [lambda: scipy_stats.rankdata(maps, axis=1),
                 lambda: at_radix_width(SHORT, stats.ranks, maps),
                 lambda: at_radix_width(LONG, stats.ranks, maps), lambda: stats.ranks(maps)]
        scipy, comparison, radix, ours = (
            seconds * 1000 for seconds in best_times(timed, args.repeats))
        same = len({found().tobytes() for found in timed}) == 1
        print(f"{name:24} {scipy:9.2f} {comparison:14.2f} {radix:9.2f} {ours:9.2f} "
              f"{scipy / ours:12.2f} {comparison / radix:17.2f} {same}")


SHORT, LONG = "short", "long"  # every row as a short one (comparison) or as a long one (radix)


def at_radix_width(rows: str, function: Callable, maps: np.ndarray, *args: Any) -> np.ndarray:
    """`function(maps, *args)` with every row sorted as `ordering` sorts rows under
    `ordering.RADIX_WIDTH` (`SHORT`) or from it on (`LONG`)."""
    width = maps.shape[-1] + 1 if rows == SHORT else 1
    with mock.patch.object(ordering, "RADIX_WIDTH", width):
        return function(maps, *args)


if __name__ == "__main__":
    run_binary(Config, run)
