"""Which families of measures agree on a card (docs/report_card.md, "Every measure on the
synthetic world's card"): the mean Kendall tau between the method rankings of the columns of
two families, read from a card's `card.json` (its agreement matrix and each column's family;
the card's own columns, BAM, ROAD and the seed protocols, are "seed benchmarks"). Within a
family the mean is over its pairs of distinct columns; pairs whose tau is n/a are left out,
and the count of pairs behind each mean is printed under the table. With --columns, each
column's mean tau with each family's (other) columns.

    python scripts/family_agreement.py --card=report_card/card.json [--columns]
"""
import dataclasses
import itertools
import json
import os

import numpy as np

from models.foundation.cli import option, run_binary
from models.foundation.errors import MissingPathError, RecordError

SEED = "seed benchmarks"  # the family of the columns that have none


@dataclasses.dataclass(frozen=True)
class Config:
    card: str = option("report_card/card.json", "A report card's card.json.")
    columns: bool = option(False, "Also each column's mean tau with each family's columns.")


def read_card(path: str) -> tuple:
    """(families in column order, {column: family}, column names, tau matrix) of a card.json;
    one line when the file is not a card."""
    if not os.path.isfile(path):
        raise MissingPathError(f"--card {path} does not exist (a report card's card.json)")
    try:
        with open(path) as handle:
            card = json.load(handle)
        names = list(card["agreement"]["metrics"])
        tau = np.array(card["agreement"]["kendall_tau"], dtype=float).reshape(
            len(names), len(names))
        family = {m["name"]: m.get("group") or SEED for m in card["metrics"]}
        columns = {name: family[name] for name in names}
    except (ValueError, KeyError, TypeError) as error:
        raise RecordError(f"--card {path} is not a report card's card.json ({error!r})") from None
    families = list(dict.fromkeys(columns.values()))
    return families, columns, names, tau


def family_means(families: list, columns: dict, names: list, tau: np.ndarray) -> tuple:
    """(means, counts): the mean tau and the number of finite pairs for every two families."""
    index = {name: i for i, name in enumerate(names)}
    means = np.full((len(families), len(families)), np.nan)
    counts = np.zeros((len(families), len(families)), dtype=int)
    for a, b in itertools.product(range(len(families)), repeat=2):
        first = [n for n in names if columns[n] == families[a]]
        second = [n for n in names if columns[n] == families[b]]
        pairs = (itertools.combinations(first, 2) if a == b
                 else itertools.product(first, second))
        values = [tau[index[x], index[y]] for x, y in pairs]
        values = [v for v in values if np.isfinite(v)]
        counts[a, b] = len(values)
        if values:
            means[a, b] = float(np.mean(values))
    return means, counts


def column_means(families: list, columns: dict, names: list, tau: np.ndarray) -> np.ndarray:
    """(column, family) -> the column's mean tau with the family's other columns (NaN: none)."""
    means = np.full((len(names), len(families)), np.nan)
    for i, name in enumerate(names):
        for a, family in enumerate(families):
            values = [tau[i, j] for j, other in enumerate(names)
                      if other != name and columns[other] == family and np.isfinite(tau[i, j])]
            if values:
                means[i, a] = float(np.mean(values))
    return means


def table(header: list, rows: list) -> None:
    """Prints a Markdown table of labelled rows of numbers (n/a for NaN)."""
    print("| | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for label, values in rows:
        cells = ["n/a" if not np.isfinite(v) else f"{v:+.2f}" for v in values]
        print(f"| {label} | " + " | ".join(cells) + " |")


def run(config: Config) -> None:
    """Prints the family table of `config.card` in Markdown."""
    families, columns, names, tau = read_card(config.card)
    means, counts = family_means(families, columns, names, tau)
    table(families, list(zip(families, means)))
    print()
    print("pairs behind each mean: " + "; ".join(
        f"{family} {counts[a, a]}" for a, family in enumerate(families))
        + f"; columns {len(names)}")
    if config.columns:
        print()
        table(families, list(zip((f"{name} ({columns[name]})" for name in names),
                                 column_means(families, columns, names, tau))))


if __name__ == "__main__":
    run_binary(Config, run)
