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
from typing import Optional, Sequence

import numpy as np

from models import results
from models.card import Card, as_records
from models.files import write_json
from models.results import markdown_table, text_table


@dataclasses.dataclass(frozen=True)
class Section:
    """A titled part of the card beyond the main table."""

    title: str
    text: str = ""
    header: tuple = ()
    rows: tuple = ()
    png: Optional[bytes] = None


def cell_text(card: Card, metric: str, method: str) -> str:
    """"value [low, high] #rank", or "-" for a blank cell."""
    row = card.rows.get((metric, method))
    if row is None:
        return "-"
    estimate = row["estimate"]
    if math.isnan(estimate.value):
        return "n/a"
    return (f"{estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}] "
            f"#{row['rank']}")


def _header(card: Card) -> list:
    return ["method", *(f"{m.name} {'↑' if m.higher_is_better else '↓'}"
                        for m in card.metrics)]


def _body(card: Card) -> list:
    return [[method, *(cell_text(card, m.name, method) for m in card.metrics)]
            for method in card.methods]


def card_table(card: Card) -> str:
    """The methods x metrics table for stdout."""
    return text_table(_header(card), _body(card))


def agreement_rows(card: Card) -> tuple:
    """(header, rows) of the Kendall tau matrix, two decimals."""
    names, matrix = card.agreement
    rows = [[name, *("n/a" if math.isnan(v) else f"{v:+.2f}" for v in matrix[i])]
            for i, name in enumerate(names)]
    return ["tau", *names], rows


def heat_map_png(card: Card) -> bytes:
    """The Kendall tau matrix as a heat map (red: agree, blue: disagree)."""
    pyplot = results.pyplot()
    names, matrix = card.agreement
    size = max(4.0, 0.55 * len(names) + 2.0)
    figure, axes = pyplot.subplots(figsize=(size + 1.0, size))
    image = axes.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
    axes.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(range(len(names)), names, fontsize=8)
    for i in range(len(names)):
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


def gallery_png(pixels, maps: dict, captions=None) -> bytes:
    """The inputs (pixels [K, H, W, 3] in [0, 1]) in the first column and each method's maps
    beside them (|map| summed over channels, scaled to each map's 99th percentile)."""
    pyplot = results.pyplot()
    rows, columns = len(pixels), 1 + len(maps)
    figure, axes = pyplot.subplots(rows, columns, figsize=(1.6 * columns, 1.6 * rows),
                                   squeeze=False)
    for row in range(rows):
        axes[row, 0].imshow(np.clip(pixels[row], 0, 1), interpolation="nearest")
        for column, (method, found) in enumerate(maps.items(), 1):
            heat = np.abs(np.asarray(found[row], np.float64)).sum(axis=-1)
            top = np.percentile(heat, 99) or 1.0
            axes[row, column].imshow(np.clip(heat / top, 0, 1), cmap="inferno", vmin=0, vmax=1,
                                     interpolation="nearest")
            if row == 0:
                axes[row, column].set_title(method, fontsize=7)
        if row == 0:
            axes[row, 0].set_title("input", fontsize=7)
        if captions:
            axes[row, 0].set_ylabel(captions[row], fontsize=6)
    for axis in axes.ravel():
        axis.set_xticks([])
        axis.set_yticks([])
    figure.tight_layout()
    return results.figure_png(figure, dpi=80)


def _html_table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _image(png: bytes, alt: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:80em}"
          "table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}"
          "td:first-child,th:first-child{text-align:left}img{max-width:100%}")


def html_page(card: Card, sections: Sequence[Section], title: str, intro: str) -> str:
    """One HTML document, no external resource: the table, the agreement and the sections."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>{html.escape(intro)}</p>", "<h2>Methods and metrics</h2>",
             _html_table(_header(card), _body(card)), "<h2>Agreement between benchmarks</h2>",
             _html_table(*agreement_rows(card)), _image(heat_map_png(card), "agreement heat map")]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<p>{html.escape(section.text)}</p>")
        if section.header:
            parts.append(_html_table(section.header, section.rows))
        if section.png:
            parts.append(_image(section.png, section.title))
    parts.append("</body></html>")
    return "\n".join(parts)


def markdown_page(card: Card, sections: Sequence[Section], title: str, intro: str,
                  pictures: dict) -> str:
    """The card in Markdown; `pictures` maps section titles (and "agreement") to PNG file
    names beside it."""
    parts = [f"# {title}\n", intro + "\n", "## Methods and metrics\n",
             markdown_table(_header(card), _body(card)), "## Agreement between benchmarks\n",
             markdown_table(*agreement_rows(card))]
    if "agreement" in pictures:
        parts.append(f"![agreement]({pictures['agreement']})\n")
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
               title: str = "Report card", intro: str = "", extra: Optional[dict] = None) -> dict:
    """Writes card.html, card.md, card.csv, card.json and the PNGs into `output_dir`; returns
    {kind: path}."""
    paths = {kind: os.path.join(output_dir, f"card.{kind}")
             for kind in ("html", "md", "csv", "json")}
    pictures = {"agreement": "card_agreement.png"}
    results.write_bytes(os.path.join(output_dir, pictures["agreement"]), heat_map_png(card))
    for number, section in enumerate(sections, 1):
        if section.png:
            pictures[section.title] = f"card_section{number}.png"
            results.write_bytes(os.path.join(output_dir, pictures[section.title]), section.png)
    results.write_text(paths["html"], html_page(card, sections, title, intro))
    results.write_text(paths["md"], markdown_page(card, sections, title, intro, pictures))
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
        "settings": card.settings, **(extra or {})}, default=repr)), indent=1)
    return paths
