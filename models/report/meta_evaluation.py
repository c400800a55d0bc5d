"""A metric judged by how it reacts to perturbations (Hedström et al. 2023, MetaQuantus; docs/
report_card.md, "Resilience and reactivity").

A metric scores every method on the same units (images): `values` [units, methods]. It is run
again after minor perturbations that should not change what the maps show (small input noise, a
tiny multiplicative noise on the weights: `minor` {name: [units, methods]}) and after disruptive
ones that should (the maps of a fully randomised model; the random control's maps in place of
every method's). Four numbers in [0, 1], higher is better:
- IAC resilience: per method, the p-value of the Wilcoxon signed-rank test (two-sided, zero
  differences split) between the unperturbed and the minor-perturbed scores, averaged over the
  methods (high: the scores did not move);
- IAC reactivity: the same with the disruptive perturbation, 1 - p (high: they moved);
- IEC resilience: the share of (image, rank position) at which the same method sits before and
  after the minor perturbation (the images' rankings of the methods survive);
- IEC reactivity: the share of (image, method) whose unperturbed score beats its disruptive one
  (the metric prefers the real maps to the randomised model's).
With several minor (or disruptive) perturbations each resilience (reactivity) number is their
mean. Resilience is the mean of the two resilience numbers, reactivity the mean of the two
reactivity numbers, and the meta-consistency score MC the mean of all four. Units with a
non-finite value in any table are left out.
"""
import numpy as np

from models.foundation.lazy import lazy_module

scipy_stats = lazy_module("scipy.stats")  # 1.3 s to import: not before a binary's --help


def _finite_rows(*given: np.ndarray) -> list:
    tables = [np.asarray(t, np.float64) for t in given]
    shapes = {t.shape for t in tables}
    if len(shapes) != 1 or tables[0].ndim != 2:
        raise ValueError(f"the tables must share one [units, methods] shape, got {shapes}")
    keep = np.logical_and.reduce([np.isfinite(t).all(axis=1) for t in tables])
    return [t[keep] for t in tables]


def wilcoxon_p(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired scores (zero differences split between
    the signs); 1 when nothing moved, NaN with no pair."""
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    if before.size == 0:
        return float("nan")
    if np.array_equal(before, after):
        return 1.0
    return float(scipy_stats.wilcoxon(before, after, zero_method="zsplit",
                                      alternative="two-sided").pvalue)


def rank_positions(values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """[units, methods] -> per unit, the method at each rank position (best first; ties by
    method order)."""
    oriented = -values if higher_is_better else values
    return np.argsort(oriented, axis=1, kind="stable")


def _mean_wilcoxon_p(values: np.ndarray, perturbed: np.ndarray) -> float:
    """The methods' (columns') Wilcoxon p-values, averaged."""
    return float(np.mean([wilcoxon_p(values[:, m], perturbed[:, m])
                          for m in range(values.shape[1])]))


def _parts(iac: float, iec: float) -> dict:
    return {"iac": iac, "iec": iec, "score": (iac + iec) / 2}


def resilience(values: np.ndarray, minor: np.ndarray, higher_is_better: bool) -> dict:
    """{"iac", "iec", "score"} of one metric under a minor perturbation."""
    values, minor = _finite_rows(values, minor)
    if not len(values):
        return _parts(float("nan"), float("nan"))
    return _parts(_mean_wilcoxon_p(values, minor),
                  float(np.mean(rank_positions(values, higher_is_better)
                                == rank_positions(minor, higher_is_better))))


def reactivity(values: np.ndarray, disruptive: np.ndarray, higher_is_better: bool) -> dict:
    """{"iac", "iec", "score"} of one metric under a disruptive perturbation."""
    values, disruptive = _finite_rows(values, disruptive)
    if not len(values):
        return _parts(float("nan"), float("nan"))
    better = values > disruptive if higher_is_better else values < disruptive
    return _parts(1.0 - _mean_wilcoxon_p(values, disruptive), float(np.mean(better)))


def _averaged(judge, values, perturbed: dict, higher_is_better: bool) -> dict:
    """{iac, iec, score, "tests": {name: {iac, iec, score}}}: `judge` (resilience or reactivity)
    under each perturbation, IAC and IEC averaged over them."""
    tests = {name: judge(values, table, higher_is_better) for name, table in perturbed.items()}
    mean = _parts(*(float(np.mean([test[key] for test in tests.values()]))
                    for key in ("iac", "iec")))
    return {**mean, "tests": tests}


def meta_consistency(values: np.ndarray, minor: dict, disruptive: dict,
                     higher_is_better: bool) -> dict:
    """{"resilience": {iac, iec, score, "tests"}, "reactivity": {iac, iec, score, "tests"},
    "mc"} of one metric's [units, methods] `values`, `minor` {name: values under that minor
    perturbation} and `disruptive` {name: values under that disruptive perturbation} (the same
    units and methods); each side's IAC and IEC are the means over its perturbations ("tests"
    keeps each one's)."""
    values, *tables = _finite_rows(values, *minor.values(), *disruptive.values())
    found: dict = {"resilience": _averaged(resilience, values, dict(zip(minor, tables)),
                                     higher_is_better),
             "reactivity": _averaged(reactivity, values,
                                     dict(zip(disruptive, tables[len(minor):])),
                                     higher_is_better)}
    parts = [found[side][key] for side in ("resilience", "reactivity") for key in ("iac", "iec")]
    found["mc"] = float(np.mean(parts)) if np.isfinite(parts).all() else float("nan")
    return found
