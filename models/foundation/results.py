"""The one results writer: tables on stdout and in Markdown, CSV rows, text and PNG files, each
written under a temporary name and renamed when complete (docs/architecture.md, "Outputs and
provenance").

Every binary and the report card print and save their results through these functions, so a
table looks the same everywhere and no output is ever half written.
"""
import csv
import io
from typing import Any, Optional, Sequence

from models.foundation.files import atomic_output

# A ROAR or fine-tuning run's metrics.json (top-1 and top-5 on the test images), as the
# training loop writes it and roar.report and the runs' reuse read it.
METRICS_SCHEMA = {"type": "object", "required": ["top1", "top5", "n_eval"], "properties": {
    "top1": {"type": "number"}, "top5": {"type": "number"},
    "n_eval": {"type": "integer"}, "flags": {"type": "object"}}}


def text_table(header: Sequence, rows: Sequence[Sequence], align: str = "left") -> str:
    """Columns padded to their widest cell, a rule under the header; `align="right"` right-aligns
    every column but the first (numbers)."""
    table = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]

    def line(row):
        cells = [cell.ljust(width) if i == 0 or align == "left" else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    return "\n".join([line(table[0]), "  ".join("-" * w for w in widths),
                      *(line(row) for row in table[1:])])


def markdown_table(header: Sequence, rows: Sequence[Sequence]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: str, records: Sequence[dict], fields: Optional[Sequence[str]] = None) -> str:
    """Writes dict `records` as CSV (columns: `fields`, else every key in first-seen order)."""
    if fields is None:
        fields = list(dict.fromkeys(key for record in records for key in record))
    with atomic_output(path) as temporary, \
            open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(records)
    return path


def write_text(path: str, text: str) -> str:
    with atomic_output(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def write_bytes(path: str, data: bytes) -> str:
    with atomic_output(path) as temporary, open(temporary, "wb") as handle:
        handle.write(data)
    return path


def figure_png(figure: Any, dpi: int = 110) -> bytes:
    """A matplotlib figure as PNG bytes; the figure is closed."""
    from matplotlib import pyplot

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    pyplot.close(figure)
    return buffer.getvalue()


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as module

    return module

