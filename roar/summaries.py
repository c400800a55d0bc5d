"""Tables and plots for ROAR sweeps and ROAD curves: CSV, Markdown and PNG from result rows.

A row is a dict; `summarise` groups rows by some keys and gives the mean, standard deviation and
count of a value; `write_outputs` writes `<stem>.csv`, `<stem>.md` and `<stem>.png` (the value
against the fraction removed, one line per group, in the style of the ROAR paper's figure).
"""
import itertools

import numpy as np

from models import results


def summarise(rows, keys, value):
    """[{**group keys, "mean", "std", "n"}] per distinct combination of `keys`, sorted."""
    ordered = sorted(rows, key=lambda row: tuple(str(row[k]) for k in keys))
    summary = []
    for group, members in itertools.groupby(ordered, key=lambda row: tuple(row[k] for k in keys)):
        values = np.array([float(member[value]) for member in members])
        summary.append(dict(zip(keys, group), mean=float(values.mean()),
                            std=float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                            n=len(values)))
    return summary


def summary_rows(summary, columns) -> list:
    """The cells of `summary` rows under `columns`, "mean ± sd" formatted."""
    return [[f"{row['mean']:.4f} ± {row['std']:.4f}" if column == "mean ± sd" else str(row[column])
             for column in columns] for row in summary]


def markdown_table(summary, columns):
    """A Markdown table of `summary` rows with `columns`, mean ± sd formatted."""
    return results.markdown_table(columns, summary_rows(summary, columns))


def write_outputs(stem, rows, summary, columns, x_key, line_keys, y_label, title):
    """Writes `<stem>.csv` (all rows), `<stem>.md` (the summary) and `<stem>.png`."""
    results.write_csv(stem + ".csv", rows, sorted({key for row in rows for key in row}))
    results.write_text(stem + ".md", f"# {title}\n\n" + markdown_table(summary, columns))
    plot(stem + ".png", summary, x_key, line_keys, y_label, title)


def plot(path, summary, x_key, line_keys, y_label, title):
    """Mean ± sd against `x_key`, one line per combination of `line_keys`."""
    figure, axes = results.pyplot().subplots(figsize=(6, 4))
    ordered = sorted(summary, key=lambda row: tuple(str(row[k]) for k in line_keys))
    for group, members in itertools.groupby(ordered, key=lambda r: tuple(r[k] for k in line_keys)):
        members = sorted(members, key=lambda row: float(row[x_key]))
        x = [float(row[x_key]) for row in members]
        y = np.array([row["mean"] for row in members])
        error = np.array([row["std"] for row in members])
        label = " ".join(str(part) for part in group)
        style = "--" if "random" in label else "-"
        axes.plot(x, y, style, marker="o", label=label)
        axes.fill_between(x, y - error, y + error, alpha=0.15)
    axes.set_xlabel(x_key.replace("_", " "))
    axes.set_ylabel(y_label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    results.write_bytes(path, results.figure_png(figure, dpi=120))
