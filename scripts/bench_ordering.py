"""What the stable order of maps costs (docs/architecture.md, "Stable orders"), measured in one
run:

    python -m scripts.bench_ordering [--maps=16] [--values=12288] [--repeats=20] [--top=5]

Times NumPy's stable argsort (a merge sort) against `models.foundation.ordering.stable_order`
on random normal maps without ties, the same maps with their 3% highest values set to zero
(a few ties: a gradient map's dead pixels) and rectified and rounded (half zeros, many equal
values), descending, best of --repeats each, taken in turn
(`scripts.bench_faithfulness.best_times`); checks that both give the same order and prints
each one's milliseconds and the ratio. Then the same for the first --top of each order:
the stable argsort's first n against `ordering.top_order`.
"""
import dataclasses

import numpy as np

from models.foundation import ordering, provenance
from models.foundation.cli import option, run_binary
from models.foundation.rules import Checked, at_least
from scripts.bench_faithfulness import best_times


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
    for title, first in (("stable_order", None), (f"top_order {args.top}", args.top)):
        print(f"{'maps':24} {'stable argsort ms':>18} {title + ' ms':>16} {'ratio':>6} same")
        for name, maps in kinds:
            stable = lambda: np.argsort(-maps, axis=-1, kind="stable")[..., :first]  # noqa: E731
            ours = (lambda: ordering.stable_order(maps, descending=True)) if first is None \
                else (lambda: ordering.top_order(maps, first, descending=True))
            merge, fast = (seconds * 1000 for seconds in best_times([stable, ours], args.repeats))
            same = bool(np.array_equal(stable(), ours()))
            print(f"{name:24} {merge:18.2f} {fast:16.2f} {merge / fast:6.2f} {same}")
    print(f"{args.maps} maps of {args.values} values, descending")


if __name__ == "__main__":
    run_binary(Config, run)
