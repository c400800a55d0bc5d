"""Tables and plots for ROAR sweeps and ROAD curves: CSV, Markdown and PNG from result rows.

A row is a dict; `summarise` groups rows by some keys and gives the mean, standard deviation,
count and 95% t-interval of the mean (Student's t with n - 1 degrees of freedom: the seeds of a
ROAR cell are few, and a bootstrap of three values has no meaningful percentiles) of a value;
`write_outputs` writes `<stem>.csv`, `<stem>.md` and `<stem>.png` (the value
against the fraction removed, one line per group, in the style of the ROAR paper's figure).
"""
import itertools
from typing import Iterable, Optional, Sequence

import numpy as np

from models.foundation import results
from models.foundation.lazy import lazy_module

stats = lazy_module("scipy.stats")  # 1.3 s to import: not before a binary's --help


def summarise(rows: Iterable[dict], keys: Sequence[str], value: str) -> list:
    """[{**group keys, "mean", "std", "n", "ci_low", "ci_high"}] per distinct combination of
    `keys`, sorted; the interval is the mean's 95% t-interval (the mean itself for n = 1)."""
    ordered = sorted(rows, key=lambda row: tuple(str(row[k]) for k in keys))
    summary = []
    for group, members in itertools.groupby(ordered, key=lambda row: tuple(row[k] for k in keys)):
        values = np.array([float(member[value]) for member in members])
        mean = float(values.mean())
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        half = (float(stats.t.ppf(0.975, len(values) - 1)) * std / np.sqrt(len(values))
                if len(values) > 1 else 0.0)
        summary.append(dict(zip(keys, group), mean=mean, std=std, n=len(values),
                            ci_low=mean - half, ci_high=mean + half))
    return summary


def summary_rows(summary: Sequence[dict], columns: Sequence[str]) -> list:
    """The cells of `summary` rows under `columns`, "mean ± sd" and "95% interval"
    formatted."""
    def cell(row, column):
        if column == "mean ± sd":
            return f"{row['mean']:.4f} ± {row['std']:.4f}"
        if column == "95% interval":
            return f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}]"
        return str(row[column])

    return [[cell(row, column) for column in columns] for row in summary]


def markdown_table(summary: Sequence[dict], columns: Sequence[str]) -> str:
    """A Markdown table of `summary` rows with `columns`, mean ± sd formatted."""
    return results.markdown_table(columns, summary_rows(summary, columns))


def write_outputs(stem: str, rows: Sequence[dict], summary: Sequence[dict],
                  columns: Sequence[str], x_key: str, line_keys: Sequence[str], y_label: str,
                  title: str, panel_key: Optional[str] = None) -> None:
    """Writes `<stem>.csv` (all rows), `<stem>.md` (the summary) and `<stem>.png` (one panel per
    value of `panel_key`, if given)."""
    results.write_csv(stem + ".csv", rows, sorted({key for row in rows for key in row}))
    results.write_text(stem + ".md", f"# {title}\n\n" + markdown_table(summary, columns))
    plot(stem + ".png", summary, x_key, line_keys, y_label, title, panel_key)


def plot(path: str, summary: Sequence[dict], x_key: str, line_keys: Sequence[str], y_label: str,
         title: str, panel_key: Optional[str] = None) -> None:
    """The mean against `x_key`, one line per combination of `line_keys` (one colour per
    combination across panels; the random baseline dashed), shaded over its 95% interval (or
    ± sd for rows without one); one panel per value of `panel_key`, sharing the y axis."""
    panels = sorted({row[panel_key] for row in summary}, key=str) if panel_key else [None]
    figure, axes = results.pyplot().subplots(1, len(panels), figsize=(6 * len(panels), 4),
                                             sharey=True, squeeze=False)
    keys = [key for key in line_keys if key != panel_key]
    groups = sorted({tuple(row[k] for k in keys) for row in summary}, key=str)
    colours = {group: f"C{index % 10}" for index, group in enumerate(groups)}
    for axis, panel in zip(axes[0], panels):
        members = [row for row in summary if panel_key is None or row[panel_key] == panel]
        for group in groups:
            line = sorted((row for row in members if tuple(row[k] for k in keys) == group),
                          key=lambda row: float(row[x_key]))
            if not line:
                continue
            x = [float(row[x_key]) for row in line]
            y = np.array([row["mean"] for row in line])
            low = np.array([row.get("ci_low", row["mean"] - row["std"]) for row in line])
            high = np.array([row.get("ci_high", row["mean"] + row["std"]) for row in line])
            label = " ".join(str(part) for part in group)
            style = "--" if "random" in label else "-"
            axis.plot(x, y, style, marker="o", color=colours[group], label=label)
            axis.fill_between(x, low, high, color=colours[group], alpha=0.15)
        axis.set_xlabel(x_key.replace("_", " "))
        axis.set_title(title if panel is None else f"{panel}: {title}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    axes[0][0].set_ylabel(y_label)
    figure.tight_layout()
    results.write_bytes(path, results.figure_png(figure, dpi=120))
