"""Where the report card's time goes: per phase and per cell, the wall time, the model passes
it asked for and the time those passes need at the model's own measured rate.

    python scripts/profile_card.py                                  # the default synthetic card
    python scripts/profile_card.py --pretrained=efficientnet_lite0  # the real network's card
    python scripts/profile_card.py --nr_images=16 --nometa_evaluation --output=profile

Runs `scripts/report_card.py`'s `run` in this process, from no card cell (a fresh temporary
--output_dir; the synthetic world and the shipped or converted models come from the project
cache as usual), and follows every cell: its wall time and the forward and gradient passes it
ran (counted by `models.foundation.workload`: images x model evaluations). Before the card, it
measures the card's classifier at the card's batch size: the forward rate (a bare traced call
on a batch) and the gradient rate (a bare traced input gradient of the target logits), each the
best of --repeats. A cell's unavoidable time is forwards / forward rate + gradients / gradient
rate, and its efficiency is that over its wall time; the card's efficiency is the sum over
everything over the card's wall time (docs/report_card.md, "Where the card's time goes").
Counts every model evaluation of a method as a gradient pass (RISE's forwards too, an
overestimate of the work it needs). Prints the phase table and the costliest cells, the CPU,
and writes <output>.json and <output>.csv.
"""
import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
import dataclasses
import os
import shutil
import tempfile
import time
from typing import Optional

import numpy as np
import tensorflow as tf

from models.formats import pretrained as pretrained_models
from models.formats.adapter import adapt
from models.foundation import provenance, results, workload
from models.foundation.cli import option, run_binary, script_module
from models.foundation.files import write_json
from models.foundation.rules import at_least
from saliency_gen import units

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def card_module():
    """scripts/report_card.py as a module."""
    return script_module(os.path.join(REPO, "scripts", "report_card.py"))


@dataclasses.dataclass(frozen=True)
class Config:
    """The script's options (one flag each); the card's others keep their defaults."""

    pretrained: Optional[str] = option(None, "Profile the real network's card (as "
                                       "report_card.py --pretrained).",
                                       choices=tuple(pretrained_models.PRETRAINED))
    nr_images: Optional[int] = option(None, "The card's --nr_images (default: the card's).",
                                      rule=at_least(1))
    meta_evaluation: bool = option(True, "The card's --meta_evaluation.")
    methods: Optional[tuple] = option(None, "The card's --methods (default: the card's).")
    benchmarks: Optional[tuple] = option(None, "The card's --benchmarks (default: the card's).")
    sanity: bool = option(True, "The card's --sanity.")
    repeats: int = option(3, "Timings of each ceiling (the best counts).", rule=at_least(1))
    output: str = option("card_profile", "Output stem: <output>.json and .csv.")


def rates(model, images: np.ndarray, batch_size: int, repeats: int) -> dict:
    """{"forward", "gradient"}: images per second of a bare traced forward pass and a bare
    traced input gradient of the target logits, on batches of `batch_size`, best of `repeats`."""
    batch = tf.constant(np.resize(images, (batch_size, *images.shape[1:])).astype(np.float32))
    targets = tf.zeros([batch_size], tf.int32)
    call = adapt(model).logits

    @tf.function
    def forward(x):
        return call(x)

    @tf.function
    def gradient(x, t):
        return units.gradient_of(call, x, t)  # the input gradient every gradient method takes

    found = {}
    for kind, run in (("forward", lambda: forward(batch)),
                      ("gradient", lambda: gradient(batch, targets))):
        run().numpy()  # trace and warm up
        calls = max(1, int(2.0 / max(_seconds(run), 1e-4)))  # about 2 s a timing
        best = min(_seconds(run, calls) for _ in range(repeats))
        found[kind] = batch_size * calls / best
    return found


def _seconds(run, calls: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        value = run()
    np.asarray(value)
    return time.perf_counter() - started


class Recorder:
    """Times and counts every cell the card computes, and the card's phases."""

    def __init__(self):
        self.cells: list = []
        self.group = "benchmarks"

    def wrap_run_cells(self, run_cells):
        groups = iter(("benchmarks", "sanity check", "variants", "meta-evaluation"))

        def recorded(benchmarks, **options):
            group = next(groups, "other")
            followed = [dataclasses.replace(b, score=self._scored(group, b)) for b in benchmarks]
            return run_cells(followed, **options)

        return recorded

    def _scored(self, group, benchmark):
        def score(method):
            before, started = workload.snapshot(), time.perf_counter()
            values = benchmark.score(method)
            self.cells.append({"phase": group, "benchmark": benchmark.name, "method": method,
                               "seconds": time.perf_counter() - started,
                               **workload.since(before)})
            return values
        return score


def run(config: Config) -> dict:
    card = card_module()
    output_dir = tempfile.mkdtemp(prefix="card-profile-")
    options = {"pretrained": config.pretrained, "meta_evaluation": config.meta_evaluation,
               "sanity": config.sanity, "output_dir": os.path.join(output_dir, "card")}
    options.update({name: getattr(config, name) for name in ("nr_images", "methods", "benchmarks")
                    if getattr(config, name)})
    requested = card.Config(**options)
    card_config = card.resolved(requested)
    recorder = Recorder()
    card.engine.run_cells = recorder.wrap_run_cells(card.engine.run_cells)
    try:
        inputs = card.load_inputs(card_config, card.resolved_methods(card_config))
        ceiling = rates(inputs.loaded, np.asarray(inputs.images), card_config.batch_size,
                        config.repeats)
        print(f"ceiling at batch {card_config.batch_size}: forward {ceiling['forward']:.0f} "
              f"images/s, gradient {ceiling['gradient']:.0f} images/s", flush=True)
        before, started = workload.snapshot(), time.perf_counter()
        card.run(requested)
        wall, passes = time.perf_counter() - started, workload.since(before)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    report = summarise(recorder.cells, wall, passes, ceiling, card_config, config)
    print_report(report)
    write_json(config.output + ".json", report, indent=1)
    results.write_csv(config.output + ".csv", report["cells"],
                      ["phase", "benchmark", "method", "seconds", "forward", "gradient",
                       "needed", "efficiency"])
    print(f"wrote {config.output}.json and .csv")
    return report


def _needed(row: dict, ceiling: dict) -> float:
    return row["forward"] / ceiling["forward"] + row["gradient"] / ceiling["gradient"]


def summarise(cells: list, wall: float, passes: dict, ceiling: dict, card_config,
              config: Config) -> dict:
    """Phases (the cell groups, and what is outside the cells), cells, the card's totals."""
    for cell in cells:
        cell["needed"] = _needed(cell, ceiling)
        cell["efficiency"] = cell["needed"] / cell["seconds"] if cell["seconds"] > 0 else 1.0
    phases = []
    for phase in dict.fromkeys(cell["phase"] for cell in cells):
        rows = [cell for cell in cells if cell["phase"] == phase]
        totals = {key: sum(cell[key] for cell in rows)
                  for key in ("seconds", "forward", "gradient")}
        phases.append({"phase": phase, "cells": len(rows), **totals,
                       "needed": _needed(totals, ceiling)})
    inside = {key: sum(cell[key] for cell in cells) for key in ("seconds", "forward", "gradient")}
    outside = {"forward": passes["forward"] - inside["forward"],
               "gradient": passes["gradient"] - inside["gradient"]}
    phases.append({"phase": "outside the cells (inputs, models, summary, pages)", "cells": 0,
                   "seconds": wall - inside["seconds"], **outside,
                   "needed": _needed(outside, ceiling)})
    needed = _needed(passes, ceiling)
    return {"date": time.strftime("%Y-%m-%d"), "machine": provenance.machine(),
            "card": {"pretrained": card_config.pretrained, "nr_images": card_config.nr_images,
                     "methods": list(card_config.methods),
                     "meta_evaluation": card_config.meta_evaluation,
                     "batch_size": card_config.batch_size},
            "ceiling": ceiling, "seconds": wall, "passes": passes, "needed": needed,
            "efficiency": needed / wall, "phases": phases, "cells": cells}


def print_report(report: dict) -> None:
    rows = [[phase["phase"], phase["cells"], f"{phase['seconds']:.1f}", phase["forward"],
             phase["gradient"], f"{phase['needed']:.1f}",
             f"{phase['needed'] / phase['seconds']:.2f}" if phase["seconds"] > 0 else "-"]
            for phase in report["phases"]]
    rows.append(["card", len(report["cells"]), f"{report['seconds']:.1f}",
                 report["passes"]["forward"], report["passes"]["gradient"],
                 f"{report['needed']:.1f}", f"{report['efficiency']:.2f}"])
    print(results.text_table(["phase", "cells", "wall s", "forwards", "gradients",
                              "needed s", "efficiency"], rows))
    costly = sorted(report["cells"], key=lambda cell: -cell["seconds"])[:12]
    print("\nthe costliest cells\n" + results.text_table(
        ["phase", "benchmark", "method", "wall s", "forwards", "gradients", "efficiency"],
        [[c["phase"], c["benchmark"], c["method"], f"{c['seconds']:.1f}", c["forward"],
          c["gradient"], f"{c['efficiency']:.2f}"] for c in costly]))
    print(f"\n{report['date']}, {report['machine']}")


if __name__ == "__main__":
    run_binary(Config, run)
