"""The report card on paper: a text table, Markdown, CSV, JSON, the agreement heat map (PNG)
and one self-contained HTML page with every picture embedded (docs/report_card.md, "Reading
the card").

Extra sections (the gallery, the randomisation check) arrive as `Section`s: a title, a short
text, an optional table (header and rows) and optional PNG bytes, so this module needs to know
nothing about how they were made.
"""
import base64
import dataclasses
import html
import json
import math
import os
import re
from typing import Any, Optional, Sequence

import numpy as np

from models.foundation import results
from models.foundation.files import write_json
from models.foundation.results import markdown_table, text_table
from models.report.card_engine import Card, as_records


@dataclasses.dataclass(frozen=True)
class Section:
    """A titled part of the card beyond the main table."""

    title: str
    text: str = ""
    header: tuple = ()
    rows: tuple = ()
    png: Optional[bytes] = None


def _cell(card: Card, metric: str, method: str):
    """(estimate, rank) of a cell, or its text when it has no value: "-" (the benchmark does
    not run the method) or "n/a"."""
    row = card.rows.get((metric, method))
    if row is None:
        return "-"
    if math.isnan(row["estimate"].value):
        return "n/a"
    return row["estimate"], row["rank"]


def _half_width(estimate) -> float:
    """The larger side of the 95% interval."""
    return max(estimate.value - estimate.low, estimate.high - estimate.value)


def cell_text(card: Card, metric: str, method: str) -> str:
    """"value [low, high] #rank", or "-" / "n/a" for a blank cell."""
    found = _cell(card, metric, method)
    if isinstance(found, str):
        return found
    estimate, rank = found
    return (f"{number_text(estimate.value)} [{number_text(estimate.low)}, "
            f"{number_text(estimate.high)}] #{rank}")


def number_text(value: float) -> str:
    """A card's number: three decimals, or four significant digits from 10,000 on (a measure
    such as infidelity reaches millions, whose decimals would widen the column)."""
    return f"{value:.3f}" if abs(value) < 10_000 else f"{value:.4g}"


def _header(card: Card, metrics: Optional[Sequence] = None) -> list:
    return ["method", *(f"{m.name} {m.arrow}"
                        for m in (card.metrics if metrics is None else metrics))]


def _body(card: Card, metrics: Optional[Sequence] = None) -> list:
    return [[method, *(cell_text(card, m.name, method)
                       for m in (card.metrics if metrics is None else metrics))]
            for method in card.methods]


GROUP_COLUMNS = 7  # the most columns of one table on the page (readable at 1280 px)
ONE_TABLE_COLUMNS = 10  # a card with at most this many columns keeps them in one table


def _by_group(card: Card) -> dict:
    """{group title: its metrics}, in the card's order (the peers' measures by family, the
    seed benchmarks as "benchmarks")."""
    groups: dict[str, list] = {}
    for metric in card.metrics:
        groups.setdefault(metric.group or "benchmarks", []).append(metric)
    return groups


def column_groups(card: Card) -> list:
    """[(title, metrics)]: the card's columns in one table when they fit (at most
    `ONE_TABLE_COLUMNS`), else by group (the peers' measures by family, the seed benchmarks as
    "benchmarks"), in their order, each group cut into equal tables of at most
    `GROUP_COLUMNS` columns."""
    if len(card.metrics) <= ONE_TABLE_COLUMNS:
        return [("", list(card.metrics))]
    found = []
    for title, metrics in _by_group(card).items():
        count = -(-len(metrics) // GROUP_COLUMNS)
        size = -(-len(metrics) // count)
        for number in range(count):
            part = metrics[number * size:(number + 1) * size]
            found.append((title if count == 1 else f"{title} ({number + 1} of {count})", part))
    return found


def card_table(card: Card) -> str:
    """The methods x metrics table for stdout."""
    return text_table(_header(card), _body(card))


def agreement_rows(card: Card) -> tuple:
    """(header, rows) of the Kendall tau matrix, two decimals."""
    names, matrix = card.agreement
    rows = [[name, *("n/a" if math.isnan(v) else f"{v:+.2f}" for v in matrix[i])]
            for i, name in enumerate(names)]
    return ["tau", *names], rows


TRUST_CAVEAT = ("How far each metric's ranking of the methods can be trusted (Tomsett et al. "
                "2020): alpha is Krippendorff's ordinal alpha with the images as raters of the "
                "methods' ranking (1: every image ranks them alike, 0: no more than chance); "
                "split-half is the Spearman-Brown reliability of the ranking from two random "
                "halves of the images; separated is the share of method pairs the paired "
                "bootstrap tells apart (all three over your methods, not the blur controls); "
                "rewards blur: blur(m) ranks above m for most methods m (on the meta-evaluation's "
                "images, or on all with --blur_controls). "
                "Resilience, reactivity and MC (Hedström et al. 2023, MetaQuantus; image-level "
                "metrics, your methods without the controls): resilience is how little the "
                "scores and the images' rankings move under small input and weight noise, "
                "reactivity how much the scores drop when the maps are a randomised model's or "
                "random, MC their mean (all in [0, 1], higher is better; docs/report_card.md). "
                "Brackets: 95% bootstrap intervals over images.")


def _estimate_text(estimate) -> str:
    if math.isnan(estimate.value):
        return "n/a"
    return f"{estimate.value:.2f} [{estimate.low:.2f}, {estimate.high:.2f}]"


def _share_text(value) -> str:
    return "-" if value is None else "n/a" if math.isnan(value) else f"{value:.2f}"


def trust_rows(card: Card) -> tuple:
    """(header, rows) of the reliability table: one row per metric that ranks methods."""
    verdicts = {True: "yes", False: "no", None: "-"}
    rows = []
    for name, found in card.trust.items():
        meta = found.get("meta") or {}
        scores = (meta.get("resilience", {}).get("score"), meta.get("reactivity", {}).get("score"),
                  meta.get("mc"))
        rows.append([name, _estimate_text(found["alpha"]), _estimate_text(found["split_half"]),
                     "n/a" if math.isnan(found["separated"]) else f"{found['separated']:.0%}",
                     verdicts[found.get("rewards_blur")], *map(_share_text, scores)])
    return ["metric", "alpha", "split-half", "separated pairs", "rewards blur", "resilience",
            "reactivity", "MC"], rows


def trust_groups(card: Card) -> list:
    """[(title, rows)]: the reliability table's rows by their metric's column group (as
    `column_groups`, not cut; one block where the columns fit one table), in the card's
    order."""
    if len(card.metrics) <= ONE_TABLE_COLUMNS:
        return [("", trust_rows(card)[1])]
    group_of = {metric.name: title for title, metrics in _by_group(card).items()
                for metric in metrics}
    groups: dict[str, list] = {}
    for row in trust_rows(card)[1]:
        groups.setdefault(group_of.get(row[0], "benchmarks"), []).append(row)
    return list(groups.items())


def trust_records(card: Card) -> dict:
    """The reliability table for JSON: {metric: {"alpha", "split_half": {value, low, high, n},
    "separated": share, "rewards_blur", "meta": {"resilience": {iac, iec, score},
    "reactivity": {...}, "mc"} or null}} (NaN is written as null)."""
    return {name: {**{key: dataclasses.asdict(found[key])
                      for key in ("alpha", "split_half")}, "separated": found["separated"],
                   "rewards_blur": found.get("rewards_blur"), "meta": found.get("meta")}
            for name, found in card.trust.items()}


def trust_png(card: Card) -> Optional[bytes]:
    """Each metric's resilience (x) against its reactivity (y), or None without a
    meta-evaluation: the metrics worth trusting sit top right."""
    points = [(name, found["meta"]["resilience"]["score"], found["meta"]["reactivity"]["score"])
              for name, found in card.trust.items() if found.get("meta")]
    points = [p for p in points if math.isfinite(p[1]) and math.isfinite(p[2])]
    if not points:
        return None
    pyplot = results.pyplot()
    figure, axes = pyplot.subplots(figsize=(8.5, 5.0))
    colours = pyplot.get_cmap("tab20")
    for index, (name, x, y) in enumerate(points):  # one colour and marker each, named aside
        axes.scatter([x], [y], color=colours(index % 20), marker="osD^v"[index % 5], s=40,
                     label=name)
    axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    axes.set_xlim(-0.02, 1.05)
    axes.set_ylim(-0.02, 1.05)
    axes.set_xlabel("resilience to input and weight noise (higher: steadier)")
    axes.set_ylabel("reactivity to randomised-model and random maps (higher: reacts)")
    axes.set_title("How far to trust each metric")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return results.figure_png(figure)


HEAT_MAP_NUMBERS = 20  # the most metrics whose heat map prints its values in the cells


def heat_map_png(card: Card) -> bytes:
    """The Kendall tau matrix as a heat map (red: agree, blue: disagree)."""
    pyplot = results.pyplot()
    names, matrix = card.agreement
    numbered = len(names) <= HEAT_MAP_NUMBERS  # more: the values are in the tables
    size = max(4.0, (0.55 if numbered else 0.2) * len(names) + 2.0)
    figure, axes = pyplot.subplots(figsize=(size + 1.0, size))
    image = axes.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
    axes.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(range(len(names)), names, fontsize=8)
    for i in range(len(names) if numbered else 0):
        for j in range(len(names)):
            if not math.isnan(matrix[i, j]):
                axes.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7,
                          color="white" if abs(matrix[i, j]) > 0.6 else "black")
    figure.colorbar(image, ax=axes, label="Kendall's tau between method rankings")
    axes.set_title("Agreement between benchmarks")
    figure.tight_layout()
    return results.figure_png(figure, dpi=110)


def section_of(card: Card, title: str, text: str) -> Section:
    """A card summarised on its own (e.g. the randomisation check) as a table section: one
    row per method, one column per metric, the same cell format as the main table."""
    return Section(title, text, tuple(_header(card)), tuple(tuple(r) for r in _body(card)))


# A gallery column's title: at most this many characters a line (a 1.25-inch column at 10 pt)
# and this many lines; a longer method name is shortened in its middle.
TITLE_WIDTH, TITLE_LINES = 15, 3


def _title_tokens(name: str, width: int) -> list:
    """`name` cut after `:` `.` `(` `,`, and a piece still wider than `width` after `_` `-`
    (then anywhere)."""
    tokens = []
    for major in re.findall(r"[^:.(,]+[:.(,]?|[:.(,]", name):
        minors = [major] if len(major) <= width else re.findall(r"[^_\-]+[_\-]?|[_\-]", major)
        for minor in minors:
            tokens += [minor[i:i + width] for i in range(0, len(minor), width)]
    return tokens


def column_title(name: str, width: int = TITLE_WIDTH, lines: int = TITLE_LINES) -> str:
    """`name` in lines of at most `width` characters, broken after the separators of method
    names (`:` `.` `(` first, `_` where a part is still too wide); a name of more than `lines`
    lines keeps its first lines and the end of its last part after an ellipsis."""
    tokens = _title_tokens(name, width)
    found, line = [], ""
    for token in tokens:
        if line and len(line) + len(token) > width:
            found.append(line)
            line = ""
        line += token
    found += [line] if line else []
    if len(found) <= lines:
        return "\n".join(found)
    tail = ""
    for token in reversed(tokens):
        if len(tail) + len(token) > width - 1:
            break
        tail = token + tail
    return "\n".join(found[:lines - 1] + ["…" + (tail or tokens[-1][-(width - 1):])])


def gallery_png(pixels: np.ndarray, maps: dict, captions: Optional[Sequence[str]] = None) -> bytes:
    """The picture of `gallery_figure`."""
    return results.figure_png(gallery_figure(pixels, maps, captions), dpi=100)


def gallery_figure(pixels: np.ndarray, maps: dict,
                   captions: Optional[Sequence[str]] = None) -> Any:
    """The inputs (pixels [K, H, W, 3] in [0, 1]) in the first column and each method's maps
    beside them (|map| summed over channels, scaled to each map's 99th percentile); titles at
    10 pt, wrapped to their column (`column_title`), readable when the page shrinks the picture
    to its width."""
    pyplot = results.pyplot()
    rows, columns = len(pixels), 1 + len(maps)
    figure, axes = pyplot.subplots(rows, columns, figsize=(1.25 * columns, 1.3 * rows + 0.3),
                                   squeeze=False)
    for row in range(rows):
        axes[row, 0].imshow(np.clip(pixels[row], 0, 1), interpolation="nearest")
        for column, (method, found) in enumerate(maps.items(), 1):
            heat = np.abs(np.asarray(found[row], np.float64)).sum(axis=-1)
            top = np.percentile(heat, 99) or 1.0
            axes[row, column].imshow(np.clip(heat / top, 0, 1), cmap="inferno", vmin=0, vmax=1,
                                     interpolation="nearest")
            if row == 0:
                axes[row, column].set_title(column_title(method), fontsize=10)
        if row == 0:
            axes[row, 0].set_title("input", fontsize=10)
        if captions:
            axes[row, 0].set_ylabel(column_title(captions[row].replace("_", " "), width=20,
                                                 lines=2), fontsize=10)
    for axis in axes.ravel():
        axis.set_xticks([])
        axis.set_yticks([])
    figure.tight_layout()
    return figure


def _html_table(header, rows, groups: Sequence[tuple] = ()) -> str:
    """A table of `rows`, or of `groups` ([(title, rows)]: a heading row before each)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in header)
    body = "".join(
        (f"<tr class=group><td colspan={len(header)}>{html.escape(title)}</td></tr>"
         if title else "")
        + "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                  for row in block)
        for title, block in (groups or [("", rows)]))
    return (f"<div class=frame><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            "</table></div>")


def _image(png: bytes, alt: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def best_methods(card: Card) -> dict:
    """{metric name: the methods with the best mean (ties: all of them)}."""
    best = {}
    for metric in card.metrics:
        values = {method: card.rows[(metric.name, method)]["estimate"].value
                  for method in card.methods if (metric.name, method) in card.rows}
        values = {method: v for method, v in values.items() if not math.isnan(v)}
        if values:
            top = (max if metric.higher_is_better else min)(values.values())
            best[metric.name] = {method for method, v in values.items() if v == top}
    return best


def notes(card: Card) -> list:
    """What a reader should know to read this card: each metric's known behaviour, the
    columns where methods tie, and how coarse Kendall's tau is over this many methods."""
    found = []
    for metric in card.metrics:
        if metric.note and metric.note not in found:
            found.append(f"{metric.name}: {metric.note}")
    for metric in card.metrics:
        means: dict[float, list[str]] = {}
        for method in card.methods:
            row = card.rows.get((metric.name, method))
            if row is not None and not math.isnan(row["estimate"].value):
                means.setdefault(round(row["estimate"].value, 12), []).append(method)
        tied = [methods for methods in means.values() if len(methods) > 1]
        for methods in tied:
            found.append(f"{metric.name}: {', '.join(methods)} have the same value; a tie, "
                         "not an ordering.")
    count = len(card.methods)
    if count >= 2:
        pairs = count * (count - 1) // 2
        found.append(f"Agreement: Kendall's tau over {count} methods can take only "
                     f"{pairs + 1} values (steps of {2 / pairs:.2f}); read the heat map as "
                     "coarse, and a single swap of two close methods moves it a whole step.")
    return found


_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1220px;"
          "padding:0 1em;color:#222}"
          "h1{margin-bottom:.2em}h2{margin-top:1.6em}"
          ".frame{max-width:100%;overflow-x:auto}"
          "table{border-collapse:collapse;margin:.6em 0;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right;white-space:nowrap}"
          "th{background:#f4f4f4;vertical-align:bottom}"
          "td:first-child,th:first-child{text-align:left}"
          "td.best{font-weight:bold;background:#e8f4e8}"
          "tr.group td{text-align:left;font-weight:bold;background:#eef2f7}"
          ".ci{color:#666;font-size:11px}.rank{color:#357;font-size:11px}"
          "table.about td{text-align:left;white-space:normal}"
          "table.about td:first-child{font-weight:bold;width:9em}"
          "dl{font-size:13px}dt{font-weight:bold;float:left;clear:left;width:13em}"
          "dd{margin:0 0 .2em 14em}"
          "img{max-width:100%}.small{font-size:13px;color:#444}")


def _main_table(card: Card) -> str:
    """The methods x metrics tables, one per column group (`column_groups`; a heading each
    where there are several): one line per cell, the best of each column marked."""
    groups = column_groups(card)
    if len(groups) == 1:
        return _group_table(card, groups[0][1])
    return "".join(f"<h3>{html.escape(title)}</h3>{_group_table(card, metrics)}"
                   for title, metrics in groups)


def _title_html(name: str) -> str:
    """A column's title in lines: "<benchmark>" over "<metric>", or a peer measure's name
    broken at its underscores (`column_title`)."""
    lines = name.rsplit(" ", 1) if " " in name else column_title(name).split("\n")
    return "<br>".join(html.escape(line) for line in lines)


def _group_table(card: Card, metrics: Sequence) -> str:
    best = best_methods(card)
    head = "".join(f"<th>{_title_html(m.name)} {m.arrow}</th>" for m in metrics)
    rows = []
    for method in card.methods:
        cells = [f"<td>{html.escape(method)}</td>"]
        for metric in metrics:
            found = _cell(card, metric.name, method)
            if isinstance(found, str):
                cells.append(f"<td>{found}</td>")
                continue
            estimate, rank = found
            marked = " class=best" if method in best.get(metric.name, ()) else ""
            cells.append(
                f"<td{marked} title='95% interval [{number_text(estimate.low)}, "
                f"{number_text(estimate.high)}], n = {estimate.n}'>"
                f"{number_text(estimate.value)} <span class=ci>"
                f"±{number_text(_half_width(estimate))}</span> <span class=rank>#{rank}"
                "</span></td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class=frame><table class=card><thead><tr><th>method</th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _legend(card: Card) -> str:
    """Every metric of the table: what it measures, its direction and its unit."""
    items = []
    for metric in card.metrics:
        better = "higher" if metric.higher_is_better else "lower"
        items.append(f"<dt>{html.escape(metric.name)} {metric.arrow}"
                     f"</dt><dd>{html.escape(metric.about or metric.name)} ({better} is better;"
                     f" one value per {metric.unit})</dd>")
    return f"<dl>{''.join(items)}</dl>"


AGREEMENT_CAVEAT = ("Kendall's tau between the method rankings of every two metrics (red: they "
                    "order the methods alike, blue: in reverse). With few methods tau is coarse "
                    "(see the notes), and agreement is not correctness: two metrics can share a "
                    "bias.")


def html_page(card: Card, sections: Sequence[Section], title: str, intro: str,
              agreement_png: bytes, about: Sequence[tuple] = (),
              trust_plot: Optional[bytes] = None) -> str:
    """One HTML document, no external resource: what was evaluated, the table with its legend
    and notes, the agreement heat map (`agreement_png`, `heat_map_png`), the trust table with
    its plot (`trust_plot`, `trust_png`) and the sections."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    if about:
        parts.append("<table class=about><tbody>" + "".join(
            f"<tr><td>{html.escape(str(label))}</td><td>{html.escape(str(value))}</td></tr>"
            for label, value in about) + "</tbody></table>")
    parts += ["<h2>Methods and metrics</h2>", f"<p class=small>{html.escape(intro)}</p>",
              _main_table(card), "<h3>Legend</h3>", _legend(card)]
    found = notes(card)
    if found:
        parts.append("<h3>Notes</h3><ul class=small>" + "".join(
            f"<li>{html.escape(note)}</li>" for note in found) + "</ul>")
    parts += ["<h2>Agreement between benchmarks</h2>",
              f"<p class=small>{html.escape(AGREEMENT_CAVEAT)}</p>",
              _image(agreement_png, "agreement heat map")]
    if card.trust:
        parts += ["<h2>How far to trust each metric</h2>",
                  f"<p class=small>{html.escape(TRUST_CAVEAT)}</p>",
                  _html_table(trust_rows(card)[0], (), trust_groups(card))]
        if trust_plot:
            parts.append(_image(trust_plot, "resilience against reactivity"))
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<p class=small>{html.escape(section.text)}</p>")
        if section.header:
            parts.append(_html_table(section.header, section.rows))
        if section.png:
            parts.append(_image(section.png, section.title))
    parts.append("</body></html>")
    return "\n".join(parts)


def markdown_page(card: Card, sections: Sequence[Section], title: str, intro: str,
                  pictures: dict, about: Sequence[tuple] = ()) -> str:
    """The card in Markdown; `pictures` maps section titles (and "agreement") to PNG file
    names beside it."""
    parts = [f"# {title}\n"]
    if about:
        parts.append(markdown_table(["", ""], [list(row) for row in about]))
    parts += [intro + "\n", "## Methods and metrics\n"]
    groups = column_groups(card)
    for title, metrics in groups:
        if len(groups) > 1:
            parts.append(f"### {title}\n")
        parts.append(markdown_table(_header(card, metrics), _body(card, metrics)))
    parts += [f"- {note}" for note in notes(card)]
    parts += ["", "## Agreement between benchmarks\n", AGREEMENT_CAVEAT + "\n",
              markdown_table(*agreement_rows(card))]
    if "agreement" in pictures:
        parts.append(f"![agreement]({pictures['agreement']})\n")
    if card.trust:
        parts += ["## How far to trust each metric\n", TRUST_CAVEAT + "\n"]
        groups, header = trust_groups(card), trust_rows(card)[0]
        for title, rows in groups:
            if len(groups) > 1:
                parts.append(f"### {title}\n")
            parts.append(markdown_table(header, rows))
        if "trust" in pictures:
            parts.append(f"![resilience against reactivity]({pictures['trust']})\n")
    for section in sections:
        parts.append(f"## {section.title}\n")
        if section.text:
            parts.append(section.text + "\n")
        if section.header:
            parts.append(markdown_table(section.header, section.rows))
        if section.title in pictures:
            parts.append(f"![{section.title}]({pictures[section.title]})\n")
    return "\n".join(parts)


def write_card(card: Card, output_dir: str, sections: Sequence[Section] = (),
               title: str = "Report card", intro: str = "", extra: Optional[dict] = None,
               about: Sequence[tuple] = ()) -> dict:
    """Writes card.html, card.md, card.csv, card.json and the PNGs into `output_dir`; returns
    {kind: path}."""
    paths = {kind: os.path.join(output_dir, f"card.{kind}")
             for kind in ("html", "md", "csv", "json")}
    pictures = {"agreement": "card_agreement.png"}
    agreement = heat_map_png(card)  # each picture rendered once: files and the HTML share it
    results.write_bytes(os.path.join(output_dir, pictures["agreement"]), agreement)
    trust = trust_png(card)
    if trust:
        pictures["trust"] = "card_trust.png"
        results.write_bytes(os.path.join(output_dir, pictures["trust"]), trust)
    for number, section in enumerate(sections, 1):
        if section.png:
            pictures[section.title] = f"card_section{number}.png"
            results.write_bytes(os.path.join(output_dir, pictures[section.title]), section.png)
    results.write_text(paths["html"], html_page(card, sections, title, intro, agreement, about,
                                                trust))
    results.write_text(paths["md"], markdown_page(card, sections, title, intro, pictures, about))
    records = as_records(card)
    results.write_csv(paths["csv"], records, None if records else ["metric", "method"])
    names, matrix = card.agreement
    write_json(paths["json"], json.loads(json.dumps({
        "cells": records, "metrics": [dataclasses.asdict(m) for m in card.metrics],
        "methods": card.methods, "beats": card.beats,
        "agreement": {"metrics": names, "kendall_tau": [[None if math.isnan(v) else float(v)
                                                         for v in row] for row in matrix]},
        "sections": [{"title": s.title, "text": s.text, "header": list(s.header),
                      "rows": [list(r) for r in s.rows]} for s in sections],
        "about": dict(about), "notes": notes(card), "trust": trust_records(card),
        "settings": card.settings, **(extra or {})}, default=repr)), indent=1)
    return paths
