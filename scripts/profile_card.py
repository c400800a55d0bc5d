"""Where the report card's time goes: per phase and per cell, the wall time, the model passes
it asked for and the time those passes need at the model's own measured rate.

    python scripts/profile_card.py                                  # the default synthetic card
    python scripts/profile_card.py --pretrained=efficientnet_lite0  # the real network's card
    python scripts/profile_card.py --nr_images=16 --nometa_evaluation --output=profile

Runs `scripts/report_card.py`'s `run` in this process, from no card cell (a fresh temporary
--output_dir; the synthetic world and the shipped or converted models come from the project cache
as usual), and follows every cell: its wall time, the forward and gradient passes it ran (counted
by `models.foundation.workload`: images x model evaluations) and the work of ROAD's imputation
solver (part of ROAD's definition, no model pass: a set-up per image imputed, and images x solver
iterations), and the Python traces TensorFlow made in it (their count and seconds, `Traces`: work a
card of any size repeats, not a pass it needs). Before and after the card, it measures at the
card's batch size the forward rate (a bare traced call of the card's classifier), the gradient rate
(a bare traced input gradient of the target logits) and, for a card with ROAD, the solver's two
rates (the compiled solve alone: images set up per second, and image iterations per second beyond
the set-up; its compilation alone takes seconds), each the best of --repeats timings of about
--timing_seconds (2 s), and takes the better of the two measurements of each (a shared machine's
speed drifts: one measurement before the card alone once read a gradient ceiling 18% below the next
run's, for the same card time). A cell's unavoidable time is the sum of its counts over those
rates, and its efficiency is that over its wall time; the card's efficiency is the sum over
everything over the card's wall time, and "passes only" leaves the solver's work out
(docs/report_card.md, "Where the card's time goes"). Counts every model evaluation of a method as a
gradient pass (RISE's forwards too, an overestimate of the work it needs). Prints the phase table
and the costliest cells, what the card's progress bar estimated was left as the card went against
what truly was, the CPU, and writes <output>.json and <output>.csv.
"""
import dataclasses
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

import models  # noqa: F401, I001  (first: TensorFlow loads quietly)
from models.foundation import progress, provenance, results, workload
from models.foundation.cli import option, run_binary, script_module
from models.foundation.errors import UserError
from models.foundation.files import write_json
from models.foundation.lazy import lazy_module
from models.foundation.rules import POSITIVE, at_least

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf

    from models.formats import adapter
    from models.formats import pretrained as pretrained_models
    from saliency_gen.attribution import units
    from saliency_gen.data import imputation
else:
    tf = lazy_module("tensorflow")
    pretrained_models = lazy_module("models.formats.pretrained")
    adapter = lazy_module("models.formats.adapter")
    imputation = lazy_module("saliency_gen.data.imputation")
    units = lazy_module("saliency_gen.attribution.units")

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
    meta_images: Optional[int] = option(None, "The card's --meta_images (default: the card's).",
                                        rule=at_least(1))
    methods: Optional[tuple] = option(None, "The card's --methods (default: the card's).")
    benchmarks: Optional[tuple] = option(None, "The card's --benchmarks (default: the card's).")
    sanity: bool = option(True, "The card's --sanity.")
    batch_size: Optional[int] = option(None, "The card's --batch_size (default: the card's).",
                                       rule=at_least(1))
    card_dir: Optional[str] = option(None, "Write the card and its cells here and keep them: "
                                     "a new or empty folder (default: a temporary folder, "
                                     "removed at the end).")
    repeats: int = option(3, "Timings of each ceiling (the best counts).", rule=at_least(1))
    timing_seconds: float = option(2.0, "About how long each timing of a ceiling runs (its calls "
                                   "repeated to fill it).", rule=POSITIVE)
    output: str = option("card_profile", "Output stem: <output>.json and .csv.")


def rates(model, images: np.ndarray, batch_size: int, repeats: int, kinds: tuple,
          timing_seconds: float = 2.0) -> dict:
    """{kind: rate} for each of `kinds` (both of the solver's when either is asked for): images
    per second of a bare traced forward pass ("forward") and a bare traced input gradient of the
    target logits ("gradient"); for ROAD's compiled imputation solver, images per second of its
    set-up ("setup": the solve stopped before its first iteration, which builds the multigrid
    operators, the right-hand side and the first preconditioned residual) and image iterations
    per second of its iterations ("solve": the time of 10 iterations beyond the set-up's); on
    batches of `batch_size`, each the best of `repeats` timings of about `timing_seconds`."""
    batch = tf.constant(np.resize(images, (batch_size, *images.shape[1:])).astype(np.float32))
    targets = tf.zeros([batch_size], tf.int32)
    call = adapter.adapt(model).logits

    @tf.function
    def forward(x):
        return call(x)

    @tf.function
    def gradient(x, t):
        return units.gradient_of(call, x, t)  # the input gradient every gradient method takes

    # ROAD's solver on a chunk of the card's images (half the pixels removed; its cost per
    # iteration does not depend on the holes), a fixed number of iterations (tolerance 0)
    pixels = tf.clip_by_value(batch, 0.0, 1.0)
    every_other = np.arange(np.prod(batch.shape[1:3])).reshape(batch.shape[1:3]) % 2 == 0
    removed = tf.constant(np.broadcast_to(every_other, batch.shape[:3]))
    solve_iterations = 10

    def solve(iterations):
        return lambda: imputation.solve(pixels, removed, tf.constant(0.0),
                                        tf.constant(iterations))[0]

    def best_seconds(run):  # a call's best time
        run().numpy()  # trace and warm up
        calls = max(1, int(timing_seconds / max(_seconds(run), 1e-4)))
        return min(_seconds(run, calls) for _ in range(repeats)) / calls

    found = {}
    for kind, run in (("forward", lambda: forward(batch)),
                      ("gradient", lambda: gradient(batch, targets))):
        if kind in kinds:
            found[kind] = batch_size / best_seconds(run)
    if "setup" in kinds or "solve" in kinds:
        set_up = best_seconds(solve(0))
        found["setup"] = batch_size / set_up
        found["solve"] = batch_size * solve_iterations / max(
            best_seconds(solve(solve_iterations)) - set_up, 1e-9)
    return found


def _seconds(run, calls: int = 1) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        value = run()
    np.asarray(value)
    return time.perf_counter() - started


class Traces:
    """TensorFlow's Python traces while installed (each a `tf.function`'s graph built from its
    Python code, a trace inside another's counted too) and the seconds of the outermost ones,
    through TensorFlow's internal `tracing_compilation._create_concrete_function`: where the
    installed TensorFlow has none, nothing is counted (`installed` False) and the profile says
    so. The graph's optimisation at a trace's first run is not in these seconds."""

    def __init__(self):
        self.count, self.seconds, self.installed = 0, 0.0, False
        self._depth = 0
        self._original: Optional[tuple] = None

    def install(self) -> "Traces":
        try:
            from tensorflow.python.eager.polymorphic_function import tracing_compilation
        except ImportError:
            return self
        original = getattr(tracing_compilation, "_create_concrete_function", None)
        if original is None:
            return self

        def counted(*args, **kwargs):
            started = time.perf_counter()
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                self.count += 1
                if not self._depth:
                    self.seconds += time.perf_counter() - started

        tracing_compilation._create_concrete_function = counted
        self.installed = True
        self._original = (tracing_compilation, original)
        return self

    def uninstall(self) -> None:
        """TensorFlow's own function back (the counts stay)."""
        if self.installed and self._original is not None:
            module, original = self._original
            module._create_concrete_function = original
            self.installed = False

    def snapshot(self) -> tuple:
        return self.count, self.seconds

    def since(self, before: tuple) -> dict:
        return {"traces": self.count - before[0], "tracing_s": self.seconds - before[1]}


class Recorder:
    """Times and counts every cell the card computes, and the card's phases; and what the
    card's progress bar estimated was left each time a cell finished."""

    def __init__(self, traces: Traces):
        self.traces = traces
        self.cells: list = []
        self.group = "benchmarks"
        self.estimates: list = []  # (seconds since the bar opened, estimated seconds left)

    def follow_bar(self) -> type:
        """`progress.CostBar`, recording its estimate after every item."""
        estimates = self.estimates

        class Followed(progress.CostBar):
            def __init__(self, *args, **options):
                self.opened = time.perf_counter()
                super().__init__(*args, **options)

            def finished(self, kind, seconds, passes=None, reused=False):
                super().finished(kind, seconds, passes, reused)
                estimates.append((time.perf_counter() - self.opened,
                                  self.progress.total - self.progress.n))

        return Followed

    def wrap_run_cells(self, run_cells):
        groups = iter(("benchmarks", "sanity check", "variants", "meta-evaluation"))

        def recorded(benchmarks, **options):
            group = next(groups, "other")
            followed = [dataclasses.replace(b, score=self._scored(group, b)) for b in benchmarks]
            return run_cells(followed, **options)

        return recorded

    def _scored(self, group, benchmark):
        def score(method):
            before, traced = workload.snapshot(), self.traces.snapshot()
            started = time.perf_counter()
            values = benchmark.score(method)
            self.cells.append({"phase": group, "benchmark": benchmark.name, "method": method,
                               "seconds": time.perf_counter() - started,
                               **workload.since(before), **self.traces.since(traced)})
            return values
        return score


def run(config: Config) -> dict:
    if config.card_dir and os.path.isdir(config.card_dir) and os.listdir(config.card_dir):
        raise UserError(f"--card_dir {config.card_dir} is not empty: the profile runs the card "
                        "from no cell; name a new or empty folder")
    card = card_module()
    output_dir = tempfile.mkdtemp(prefix="card-profile-")
    options = {"pretrained": config.pretrained, "meta_evaluation": config.meta_evaluation,
               "sanity": config.sanity,
               "output_dir": config.card_dir or os.path.join(output_dir, "card")}
    options.update({name: getattr(config, name) for name in ("nr_images", "meta_images",
                                                             "methods", "benchmarks",
                                                             "batch_size")
                    if getattr(config, name)})
    requested = card.Config(**options)
    card_config = card.resolved(requested)
    traces = Traces().install()
    recorder = Recorder(traces)
    card.card_engine.run_cells = recorder.wrap_run_cells(card.card_engine.run_cells)
    card.progress.CostBar = recorder.follow_bar()
    try:
        inputs = card.load_inputs(card_config, card.resolved_methods(card_config))
        # the solver's rates only for a card that solves (its compilation costs seconds)
        kinds = KINDS if "ROAD" in card_config.benchmarks else PASSES
        measured = [ceiling_of(inputs, card_config, config, "before the card", kinds)]
        before, traced, started = workload.snapshot(), traces.snapshot(), time.perf_counter()
        card.run(requested)
        wall, passes = time.perf_counter() - started, workload.since(before)
        passes.update(traces.since(traced))
        measured.append(ceiling_of(inputs, card_config, config, "after the card", kinds))
        ceiling = {kind: max(found[kind] for found in measured) for kind in measured[0]}
    finally:
        counted = traces.installed  # TensorFlow's own function back, even after an error
        traces.uninstall()
        shutil.rmtree(output_dir, ignore_errors=True)
    report = summarise(recorder.cells, wall, passes, ceiling, card_config, config)
    report["traces_counted"] = counted
    report["eta"] = eta_honesty(recorder.estimates)
    print_report(report)
    write_json(config.output + ".json", report, indent=1)
    results.write_csv(config.output + ".csv", report["cells"],
                      ["phase", "benchmark", "method", "seconds", *KINDS, *TRACING,
                       "needed", "efficiency"])
    print(f"wrote {config.output}.json and .csv")
    return report


def ceiling_of(inputs, card_config, config: Config, when: str, kinds: tuple) -> dict:
    """`rates` of `kinds` of the card's classifier on its images at the card's batch size,
    printed as measured `when`."""
    batch_size = card_config.batch_size
    ceiling = rates(inputs.loaded, np.asarray(inputs.images), batch_size, config.repeats,
                    kinds, config.timing_seconds)
    solver = (f"ROAD's solver: set-up {ceiling['setup']:.0f} images/s, iterations "
              f"{ceiling['solve']:.0f} image iterations/s" if "solve" in ceiling
              else "ROAD's solver not timed (no ROAD cell)")
    print(f"ceiling {when}, at batch {batch_size}: forward {ceiling['forward']:.0f} images/s, "
          f"gradient {ceiling['gradient']:.0f} images/s, {solver}", flush=True)
    return ceiling


KINDS = ("forward", "gradient", "setup", "solve")
PASSES = ("forward", "gradient")  # the model's passes alone
TRACING = ("traces", "tracing_s")  # Python traces (`Traces`), not work


def _needed(row: dict, ceiling: dict, kinds=KINDS) -> float:
    """Seconds the counted work of `kinds` needs at the ceiling's rates (a kind without work
    needs none, and its rate may not have been timed)."""
    return sum(row[kind] / ceiling[kind] for kind in kinds if row[kind])


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
                  for key in ("seconds", *KINDS, *TRACING)}
        phases.append({"phase": phase, "cells": len(rows), **totals,
                       "needed": _needed(totals, ceiling)})
    inside = {key: sum(cell[key] for cell in cells) for key in ("seconds", *KINDS, *TRACING)}
    outside = {kind: passes[kind] - inside[kind] for kind in (*KINDS, *TRACING)}
    phases.append({"phase": "outside the cells (inputs, models, summary, pages)", "cells": 0,
                   "seconds": wall - inside["seconds"], **outside,
                   "needed": _needed(outside, ceiling)})
    needed = _needed(passes, ceiling)
    for phase in phases:
        phase["passes_needed"] = _needed(phase, ceiling, PASSES)
    return {"date": time.strftime("%Y-%m-%d"), "machine": provenance.machine(),
            "card": {"pretrained": card_config.pretrained, "nr_images": card_config.nr_images,
                     "methods": list(card_config.methods),
                     "meta_evaluation": card_config.meta_evaluation,
                     "batch_size": card_config.batch_size},
            "ceiling": ceiling, "seconds": wall, "passes": passes, "needed": needed,
            "efficiency": needed / wall,
            "passes_efficiency": _needed(passes, ceiling, PASSES) / wall,
            "phases": phases, "cells": cells}


ETA_POINTS = (0.1, 0.25, 0.5, 0.75, 0.9)  # shares of the cells' time


def eta_honesty(estimates: list) -> list:
    """At each share of `ETA_POINTS` of the time from the progress bar's opening to its last
    cell: the seconds left it estimated at the last cell finished by then (NaN before the first
    cell finished: no estimate yet), and the seconds that were truly left from that moment."""
    if not estimates:
        return []
    end = estimates[-1][0]
    rows = []
    for share in ETA_POINTS:
        said = [(at, left) for at, left in estimates if at <= share * end]
        at, left = said[-1] if said else (0.0, float("nan"))
        rows.append({"share": share, "at": at, "estimated_left": left, "true_left": end - at})
    return rows


def _ratio(needed: float, seconds: float) -> str:
    return f"{needed / seconds:.2f}" if seconds > 0 and np.isfinite(needed) else "-"


def _seconds_text(seconds: float) -> str:
    return f"{seconds:.1f}" if np.isfinite(seconds) else "-"  # (NaN: no estimate yet)


def print_report(report: dict) -> None:
    counted = report.get("traces_counted", False)

    def tracing(row):  # (not counted: this TensorFlow lacks the function `Traces` wraps)
        return [row["traces"], f"{row['tracing_s']:.1f}"] if counted else ["-", "-"]

    rows = [[phase["phase"], phase["cells"], f"{phase['seconds']:.1f}", phase["forward"],
             phase["gradient"], phase["setup"], phase["solve"], *tracing(phase),
             f"{phase['needed']:.1f}", _ratio(phase["needed"], phase["seconds"]),
             _ratio(phase["passes_needed"], phase["seconds"])]
            for phase in report["phases"]]
    passes = report["passes"]
    rows.append(["card", len(report["cells"]), f"{report['seconds']:.1f}", passes["forward"],
                 passes["gradient"], passes["setup"], passes["solve"], *tracing(passes),
                 f"{report['needed']:.1f}",
                 f"{report['efficiency']:.2f}", f"{report['passes_efficiency']:.2f}"])
    print(results.text_table(["phase", "cells", "wall s", "forwards", "gradients",
                              "solver set-ups", "solver image-iterations", "traces",
                              "tracing s", "needed s", "efficiency", "passes only"], rows))
    costly = sorted(report["cells"], key=lambda cell: -cell["seconds"])[:12]
    print("\nthe costliest cells\n" + results.text_table(
        ["phase", "benchmark", "method", "wall s", "forwards", "gradients", "set-ups", "solves",
         "traces", "efficiency"],
        [[c["phase"], c["benchmark"], c["method"], f"{c['seconds']:.1f}", c["forward"],
          c["gradient"], c["setup"], c["solve"], c["traces"] if counted else "-",
          f"{c['efficiency']:.2f}"] for c in costly]))
    if report.get("eta"):
        print("\nthe progress bar's estimate of the seconds left, at the last cell finished "
              "by each share of the cells' time\n" + results.text_table(
                  ["share", "at s", "estimated left s", "truly left s", "estimated / true"],
                  [[f"{row['share']:.0%}", f"{row['at']:.1f}",
                    _seconds_text(row["estimated_left"]), f"{row['true_left']:.1f}",
                    _ratio(row["estimated_left"], row["true_left"])]
                   for row in report["eta"]]))
    print(f"\n{report['date']}, {report['machine']}")


if __name__ == "__main__":
    run_binary(Config, run)
