"""The report card's engine: one metric protocol, cached cells, intervals, ranks and agreement
(docs/report_card.md).

A benchmark enters the card as a `Benchmark`: its name, its `MetricSpec`s and a `score(method)`
function giving, for one method, every metric's per-unit values (per image, or per training
seed). The benchmarks themselves live in bam/, roar/ and faithfulness/, and only the card's entry
point (scripts/report_card.py) knows all three, so they stay siblings.

`run_cells` computes each (benchmark, method) cell once: a finished cell is a JSON file under
`<output_dir>/cells/` carrying its origin (the benchmark's settings and the method), reused when
the origin matches and refused with one line otherwise; so a killed card resumes and a re-run
with one more method computes only that method. `summarise` turns the cells into the card: a
mean with a 95% bootstrap interval per (metric, method), ranks from paired comparisons, and
Kendall's tau between the metrics' rankings (`models.report.uncertainty`), and how far each metric's
ranking can be trusted (`models.report.reliability`).
"""
import dataclasses
import hashlib
import json
import os
import re
import time
from typing import Callable, Optional, Sequence

import numpy as np

from models.foundation import provenance
from models.foundation.errors import UserError
from models.foundation.files import read_json, write_json
from models.report import reliability, uncertainty


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """A benchmark as the card runs it: a measure whose subject is a method (the project's one
    metric protocol, `models.foundation.metric_spec.Measure`), with what the card needs besides.

    `score(method)` returns {metric name: per-unit values} for every metric of `metrics` (NaN
    where a unit has no value); the units are the same for every method, in the same order, so
    that methods compare pairwise. `settings` is everything besides the method that changes the
    numbers (the cells' origin). `supports(method)` may leave a method out (its cells are blank).
    `cost` is the prior cost of one cell (in units of a cheap cell, a 64-step Deletion cell on
    `CHEAP_IMAGES` images costing 64) for the progress bar, until measured cells replace it;
    `explains` ((map set, images), ...) the images whose maps a cell computes, which the bar
    adds as the method's model passes (`expected_passes`).
    """

    name: str
    metrics: tuple
    score: Callable[[str], dict]
    settings: dict
    supports: Callable[[str], bool] = lambda method: True
    cost: float = 1.0
    explains: tuple = ()


# the images of a cheap cell, the unit of `Benchmark.cost`: a cell's prior scales with its images
CHEAP_IMAGES = 64


def column_name(benchmark: str, metric: str) -> str:
    """A metric's column on the card: "<benchmark> <metric>", or the metric's name alone where
    the benchmark is the measure itself (the peers' measures, "sparseness")."""
    return metric if metric == benchmark else f"{benchmark} {metric}"


def cell_path(output_dir: str, benchmark: str, method: str) -> str:
    """Where the cell (benchmark, method) is kept: a readable, collision-free file name."""
    return os.path.join(output_dir, "cells", _file_name(benchmark), f"{_file_name(method)}.json")


def _file_name(name: str) -> str:
    """`name` as one readable path component, with a digest so that names never collide."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:40] or "name"
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def expected_passes(benchmarks: Sequence[Benchmark], methods: Sequence[str],
                    evaluations: Callable[[str], int]) -> dict:
    """{benchmark name: [the model passes its cell of each method will need, None for a cell
    it leaves out]}, for the progress bar: each of its `explains` (map set, images) costs
    images x the method's `evaluations` per image, where a set named by several benchmarks (the
    card's images) is computed once, by the first that asks (a blur control's maps are its
    method's, blurred); an unnamed set ("") is the cell's own."""
    computed: set = set()
    found = {}
    for benchmark in benchmarks:
        row: list[Optional[int]] = []
        for method in methods:
            if not benchmark.supports(method):
                row.append(None)
                continue
            plain, passes = unblurred(method) or method, 0
            for name, images in benchmark.explains:
                if not name or (name, plain) not in computed:
                    passes += images * evaluations(plain)
                    computed.add((name, plain))
            row.append(passes)
        found[benchmark.name] = row
    return found


def run_cells(benchmarks: Sequence[Benchmark], methods: Sequence[str], output_dir: str,
              progress: Optional[Callable[[str, float, bool], None]] = None,
              overwrite: bool = False, method_code: Optional[dict] = None) -> dict:
    """{(benchmark, method): {metric: values} or None (unsupported)}, computing only the cells
    not already finished with the same origin. `progress(benchmark name, seconds, computed)`
    follows every cell (`computed` False for a reused or unsupported cell, which takes about
    0 s). `method_code` maps a user
    method to the digests of its code (`saliency_gen.attribution.names.Resolved.code_origin`): a
    cell of an earlier edit of the method is recomputed, with one line saying so."""
    cells: dict = {}
    for benchmark in benchmarks:
        for method in methods:
            key, started = (benchmark.name, method), time.perf_counter()
            computed = False
            if not benchmark.supports(method):
                cells[key] = None
            else:
                code = (method_code or {}).get(method, {})
                cells[key], computed = _cell(benchmark, method, output_dir, overwrite, code)
            if progress:
                progress(benchmark.name, time.perf_counter() - started, computed)
    return cells


# The control method whose map is the object's own mask (where a benchmark knows it): every
# benchmark and the card name it so.
ORACLE = "oracle"


# A cached cell: its origin, its values per metric (None where undefined) and their digest.
CELL_SCHEMA = {
    "type": "object", "required": ["origin", "values"],
    "properties": {
        "origin": provenance.ORIGIN_SCHEMA,
        "values": {"type": "object", "additionalProperties": {
            "type": "array", "items": {"type": ["number", "null"]}}},
        "digest": {"type": "string"},
    },
}


def values_digest(values: dict) -> str:
    """SHA-256 of a cell's values as canonical JSON: a cell edited by hand no longer matches."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _stored_cell(path: str) -> Optional[dict]:
    """The cell in `path`, or None (with one line) when it is damaged: cut short, not JSON, or
    JSON of another shape. Cells are this program's own outputs, so a damaged one is
    recomputed, as an edited method's is."""
    try:
        return read_json(path, "card cell", CELL_SCHEMA)
    except UserError as error:
        print(f"{str(error).split(';')[0]}; recomputing it", flush=True)
        return None


def _cell(benchmark, method, output_dir, overwrite, code) -> tuple:
    """(the cell's values, whether they were computed now rather than read back)."""
    path = cell_path(output_dir, benchmark.name, method)
    requested = provenance.origin(provenance.with_code(
        {"benchmark": benchmark.name, "method": method, **benchmark.settings}, code))
    stored = _stored_cell(path) if os.path.exists(path) else None
    if stored is not None:
        error = provenance.mismatch_error(f"card cell {path}", stored["origin"], requested)
        if error is None and stored.get("digest") == values_digest(stored["values"]):
            return stored["values"], False
        if error is None:
            print(f"card cell {path}: its values differ from what was written (or it predates "
                  "digests); recomputing it", flush=True)
        elif changed := provenance.code_changed(stored["origin"], requested, f"method {method}"):
            print(f"card cell {path}: {changed} changed since the cell was computed; "
                  "recomputing it", flush=True)
        elif not overwrite:
            raise error
    values = benchmark.score(method)
    missing = [m.name for m in benchmark.metrics if m.name not in values]
    if missing:
        raise UserError(f"benchmark {benchmark.name} gave no {missing[0]} for {method}")
    values = {name: [None if v is None or not np.isfinite(v) else float(v)
                     for v in np.asarray(values[name], np.float64).ravel()]
              for name in (m.name for m in benchmark.metrics)}
    write_json(path, {"origin": requested, "values": values, "digest": values_digest(values)},
               sort_keys=True)
    return values, True


def _array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], np.float64)


def unit_table(cells: dict, benchmark: str, metric: str,
               methods: Sequence[str]) -> Optional[np.ndarray]:
    """[units, methods] of one metric's per-unit values (NaN where undefined), or None when a
    method has no cell or the methods were scored on different numbers of units."""
    columns = []
    for method in methods:
        cell = cells.get((benchmark, method))
        if cell is None:
            return None
        columns.append(_array(cell[metric]))
    if not columns or len({len(c) for c in columns}) > 1:
        return None
    return np.stack(columns, axis=1)


@dataclasses.dataclass
class Card:
    """The summarised card: rows per (metric, method), and the agreement between metrics."""

    metrics: list  # [MetricSpec] in column order, each named "<benchmark> <metric>"
    methods: list
    rows: dict  # {(metric name, method): {"estimate": Estimate, "rank": int}} (absent: blank)
    agreement: tuple  # (metric names, Kendall tau matrix)
    settings: dict
    beats: list = dataclasses.field(default_factory=list)  # the separated pairs, as dicts
    # {metric name: {"alpha", "split_half": Estimate, "separated": share}}
    # (models.report.reliability)
    trust: dict = dataclasses.field(default_factory=dict)


def blurred(method: str) -> str:
    """The name of `method`'s blur control: its maps smoothed
    (saliency_gen.attribution.transforms.blur)."""
    return f"blur({method})"


def unblurred(method: str) -> Optional[str]:
    """The method a blur control smooths, or None for any other name."""
    if method.startswith("blur(") and method.endswith(")"):
        return method[len("blur("):-1]
    return None


def rewards_blur(oriented: dict) -> Optional[bool]:
    """Does a metric rank blur(m) above m for most methods m? `oriented` maps the metric's
    methods to their mean, higher being better; None when no method has its blur control."""
    pairs = [(oriented[blurred(m)], oriented[m]) for m in oriented
             if blurred(m) in oriented and np.isfinite(oriented[m])
             and np.isfinite(oriented[blurred(m)])]
    if not pairs:
        return None
    return sum(blur > plain for blur, plain in pairs) > len(pairs) / 2


def rewards_blur_on_units(methods: Sequence[str], plain: np.ndarray, smoothed: np.ndarray,
                          higher_is_better: bool) -> Optional[bool]:
    """`rewards_blur` from per-unit tables [units, methods] on the same units: each method's
    mean (over its finite values) with its maps as they are (`plain`) and blurred (`smoothed`)."""
    sign = 1.0 if higher_is_better else -1.0
    oriented = {}
    for index, method in enumerate(methods):
        for name, table in ((method, plain), (blurred(method), smoothed)):
            values = table[:, index][np.isfinite(table[:, index])]
            oriented[name] = sign * float(values.mean()) if len(values) else float("nan")
    return rewards_blur(oriented)


def summarise(benchmarks: Sequence[Benchmark], methods: Sequence[str], cells: dict,
              seed: int = 0, judge: bool = True) -> Card:
    """Intervals, ranks and the Kendall agreement of the computed `cells`; with `judge`, also
    how far each metric can be trusted (`Card.trust`: bootstraps, so left out of cards whose
    trust table nobody reads)."""
    metrics, rows, orderings, wins, trust = [], {}, {}, [], {}
    for benchmark in benchmarks:
        for metric in benchmark.metrics:
            column = dataclasses.replace(metric, name=column_name(benchmark.name, metric.name))
            metrics.append(column)
            values = {method: _array(cells[(benchmark.name, method)][metric.name])
                      for method in methods if cells.get((benchmark.name, method)) is not None}
            sizes = {len(v) for v in values.values()}
            if len(sizes) > 1:
                raise UserError(f"{column.name}: the methods were scored on different numbers of "
                                f"units ({sorted(sizes)}); recompute the card with --overwrite")
            if metric.unit == "call":  # one value per group of images: nothing to resample
                values = {method: v[:1] for method, v in values.items()}
            scored = {method: v for method, v in values.items() if np.isfinite(v).any()}
            separated = [] if metric.unit == "call" else uncertainty.comparisons(
                scored, metric.higher_is_better, seed)
            beaten = {method: 0 for method in scored}
            for winner, loser, difference in separated:
                beaten[loser] += 1
                wins.append({"metric": column.name, "winner": winner, "loser": loser,
                             "difference": difference.value, "ci_low": difference.low,
                             "ci_high": difference.high, "n": difference.n})
            ranking = {method: 1 + count for method, count in beaten.items()}
            judged = {m: v for m, v in scored.items() if unblurred(m) is None}  # no controls
            if judge and len(judged) >= 2 and metric.unit != "call":
                trust[column.name] = reliability.metric_reliability(
                    np.stack(list(judged.values()), axis=1), metric.higher_is_better,
                    sum(w in judged and v in judged for w, v, _ in separated), seed)
            estimates = {method: uncertainty.interval(per_unit, seed)
                         for method, per_unit in values.items()}
            for method, estimate in estimates.items():
                rows[(column.name, method)] = {
                    "estimate": estimate, "rank": ranking.get(method)}  # None: no value to rank
            sign = 1.0 if metric.higher_is_better else -1.0
            orderings[column.name] = {method: sign * estimates[method].value
                                      for method in scored}
            if column.name in trust:
                trust[column.name]["rewards_blur"] = rewards_blur(orderings[column.name])
    return Card(metrics, list(methods), rows, uncertainty.kendall_matrix(orderings),
                {b.name: b.settings for b in benchmarks}, wins, trust)


def oriented_means(card: Card, metric_name: str) -> dict:
    """{method: mean} of one column of `card`, signed so that higher is better (finite only)."""
    metric = next(m for m in card.metrics if m.name == metric_name)
    sign = 1.0 if metric.higher_is_better else -1.0
    return {method: sign * row["estimate"].value for (name, method), row in card.rows.items()
            if name == metric_name and np.isfinite(row["estimate"].value)}


def ranking_agreement(first: dict, second: dict) -> float:
    """Kendall's tau-b between two {method: oriented score} rankings over the methods both
    hold (NaN when fewer than two or one ranking is constant)."""
    shared = [method for method in first if method in second]
    _, matrix = uncertainty.kendall_matrix({"first": {m: first[m] for m in shared},
                                            "second": {m: second[m] for m in shared}})
    return float(matrix[0, 1])


def as_records(card: Card) -> list:
    """One flat dict per (metric, method) cell: the CSV / JSON rows of the card."""
    records = []
    for metric in card.metrics:
        for method in card.methods:
            row = card.rows.get((metric.name, method))
            if row is None:
                continue
            estimate = row["estimate"]
            records.append({"metric": metric.name, "method": method, "value": estimate.value,
                            "ci_low": estimate.low, "ci_high": estimate.high,
                            "rank": row["rank"], "n": estimate.n,
                            "n_excluded": estimate.n_excluded,
                            "higher_is_better": metric.higher_is_better, "unit": metric.unit})
    return records
