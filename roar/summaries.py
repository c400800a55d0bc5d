"""Tables and plots for ROAR sweeps and ROAD curves: CSV, Markdown and PNG from result rows.

A row is a dict; `summarise` groups rows by some keys and gives the mean, standard deviation,
count and 95% t-interval of the mean (Student's t with n - 1 degrees of freedom: the seeds of a
ROAR cell are few, and a bootstrap of three values has no meaningful percentiles) of a value;
`write_outputs` writes `<stem>.csv`, `<stem>.md` and `<stem>.png` (the value
against the fraction removed, one line per group, in the style of the ROAR paper's figure).
"""
import itertools

import numpy as np
from scipy import stats

from models import results


def summarise(rows, keys, value):
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


def summary_rows(summary, columns) -> list:
    """The cells of `summary` rows under `columns`, "mean ± sd" and "95% interval"
    formatted."""
    def cell(row, column):
        if column == "mean ± sd":
            return f"{row['mean']:.4f} ± {row['std']:.4f}"
        if column == "95% interval":
            return f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}]"
        return str(row[column])

    return [[cell(row, column) for column in columns] for row in summary]


def markdown_table(summary, columns):
    """A Markdown table of `summary` rows with `columns`, mean ± sd formatted."""
    return results.markdown_table(columns, summary_rows(summary, columns))


def write_outputs(stem, rows, summary, columns, x_key, line_keys, y_label, title):
    """Writes `<stem>.csv` (all rows), `<stem>.md` (the summary) and `<stem>.png`."""
    results.write_csv(stem + ".csv", rows, sorted({key for row in rows for key in row}))
    results.write_text(stem + ".md", f"# {title}\n\n" + markdown_table(summary, columns))
    plot(stem + ".png", summary, x_key, line_keys, y_label, title)


def plot(path, summary, x_key, line_keys, y_label, title):
    """The mean against `x_key`, one line per combination of `line_keys`, shaded over its 95%
    interval (or ± sd for rows without one)."""
    figure, axes = results.pyplot().subplots(figsize=(6, 4))
    ordered = sorted(summary, key=lambda row: tuple(str(row[k]) for k in line_keys))
    for group, members in itertools.groupby(ordered, key=lambda r: tuple(r[k] for k in line_keys)):
        members = sorted(members, key=lambda row: float(row[x_key]))
        x = [float(row[x_key]) for row in members]
        y = np.array([row["mean"] for row in members])
        low = np.array([row.get("ci_low", row["mean"] - row["std"]) for row in members])
        high = np.array([row.get("ci_high", row["mean"] + row["std"]) for row in members])
        label = " ".join(str(part) for part in group)
        style = "--" if "random" in label else "-"
        axes.plot(x, y, style, marker="o", label=label)
        axes.fill_between(x, low, high, alpha=0.15)
    axes.set_xlabel(x_key.replace("_", " "))
    axes.set_ylabel(y_label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    results.write_bytes(path, results.figure_png(figure, dpi=120))
