"""How far two report cards' values differ, metric by metric (docs/report_card.md: the real
network's card before and after its batch norms were folded):

    python scripts/compare_cards.py --first=OLD/card.csv --second=NEW/card.csv

For every metric in both cards' `card.csv`, over the methods in both: the largest absolute
difference of the mean values, that difference relative to the metric's range over the methods
in the first card, the largest difference of an interval bound, and the methods whose rank
changed. Prints one table and the largest relative difference of all.
"""
import csv
import dataclasses
from typing import Optional

from models.foundation.cli import option, run_binary
from models.foundation.errors import MissingPathError, UserError


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options."""

    first: Optional[str] = option(None, "The first card's card.csv.")
    second: Optional[str] = option(None, "The second card's card.csv.")


def read(path: str) -> dict:
    """{(metric, method): row} of a card.csv."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except FileNotFoundError:
        raise MissingPathError(f"{path}: no such card.csv") from None
    if not rows or not {"metric", "method", "value", "ci_low", "ci_high", "rank"} <= set(rows[0]):
        raise UserError(f"{path} is not a card.csv (metric, method, value, ci_low, ci_high, "
                        "rank columns)")
    return {(row["metric"], row["method"]): row for row in rows}


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def compared(first: dict, second: dict) -> list:
    """One row per metric of both cards (see the module's note)."""
    rows = []
    for metric in dict.fromkeys(key[0] for key in first if key in second):
        keys = [key for key in first if key[0] == metric and key in second]
        values = [(_number(first[key]["value"]), _number(second[key]["value"])) for key in keys]
        pairs = [(a, b) for a, b in values if a is not None and b is not None]
        if not pairs:
            continue
        spread = max(a for a, _ in pairs) - min(a for a, _ in pairs)
        largest = max(abs(a - b) for a, b in pairs)
        bounds = [abs(a - b) for key in keys for column in ("ci_low", "ci_high")
                  for a, b in [(_number(first[key][column]), _number(second[key][column]))]
                  if a is not None and b is not None]
        moved = [key[1] for key in keys if first[key]["rank"] != second[key]["rank"]]
        rows.append({"metric": metric, "methods": len(pairs), "largest": largest,
                     "relative": largest / spread if spread > 0 else 0.0,
                     "bounds": max(bounds, default=0.0), "ranks_moved": moved})
    return rows


def run(config: Config) -> list:
    if not config.first or not config.second:
        raise UserError("give both --first and --second (card.csv files)")
    rows = compared(read(config.first), read(config.second))
    print("| metric | methods | largest difference | of the range over methods | largest bound "
          "difference | ranks moved |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['metric']} | {row['methods']} | {row['largest']:.2e} | "
              f"{row['relative']:.2e} | {row['bounds']:.2e} | "
              f"{', '.join(row['ranks_moved']) or 'none'} |")
    if rows:
        worst = max(rows, key=lambda row: row["relative"])
        print(f"largest relative difference: {worst['relative']:.2e} ({worst['metric']}); "
              f"metrics with a moved rank: {sum(bool(row['ranks_moved']) for row in rows)} of "
              f"{len(rows)}")
    return rows


if __name__ == "__main__":
    run_binary(Config, run)
