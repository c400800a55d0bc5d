"""The peers' measures in the project's one metric protocol (docs/measures.md, "In the
binaries and on the card"): `PeerMeasure` is a `models.foundation.metric_spec.Measure` of one
measure of `faithfulness.measures`, built once per evaluation with the model and the settings
the options give (Quantus's names; None keeps the measure's default), whose `score(group)`
gives the measure's per-image values on a `Group`. A measure that returns a curve per image
gives its area (`return_auc_per_sample`); the robustness measures explain the perturbed
inputs with the group's explainer; a measure of the group as a whole (`PER_CALL`) gives each
image the group's value, and focus scores mosaics of the group's images (`mosaics`).
"""
import dataclasses
import importlib
import inspect
from typing import Any

import numpy as np

from faithfulness import measures
from faithfulness.measures import explaining, mosaics
from faithfulness.measures.settings import MeasureSettings
from models.foundation.errors import UserError
from models.foundation.metric_spec import Group, MetricSpec

# explain with a changed model (randomised, shifted): they get the explainer itself, not its
# maps; the other measures that take an `explain_func` get the group's explain
OTHER_MODEL = ("mprt", "smooth_mprt", "efficient_mprt", "input_invariance", "mege", "reco")
# one value per call (a curve of correlations across its images): each image of a group gets
# the curve's mean
PER_CALL = ("sensitivity_n", "mege", "reco")
# the measures that retrain the model on folds of the group's images (Xplique's MeGe, ReCo)
FOLDS = ("mege", "reco")
NOT_SETTINGS = ("model", "x_batch", "y_batch", "a_batch", "s_batch", "explain_func",
                "explain_func_kwargs", "ids", "return_auc_per_sample", "batch_size", "seed",
                "return_average_correlation", "custom_batch", "learning_algorithm")


def function_of(name: str) -> Any:
    """The library call of the measure `name`."""
    return getattr(importlib.import_module(measures.module_of(name)), name)


def spec_of(name: str) -> MetricSpec:
    """The declaration of the measure `name` (its module's `SPECS`), grouped by its family."""
    spec = next(spec for spec in importlib.import_module(measures.module_of(name)).SPECS
                if spec.name == name)
    return dataclasses.replace(spec, group=measures.family_of(name))


def settings_of(name: str) -> tuple:
    """The names of the measure's settings (its keyword arguments, as Quantus names them)."""
    return tuple(parameter for parameter in inspect.signature(function_of(name)).parameters
                 if parameter not in NOT_SETTINGS)


def given_settings(name: str, options: Any) -> dict:
    """{setting: value} of the measure's settings that `options` sets (not None); a setting
    `options` sets that the measure does not take is one line."""
    own = settings_of(name)
    found = {}
    for setting in SETTING_FLAGS:
        value = getattr(options, setting, None)
        if value is None:
            continue
        if setting not in own:
            raise UserError(f"--{setting} does not apply to {name} (its settings: "
                            f"{', '.join(own) or 'none'})")
        found[setting] = value
    return found


# every setting any measure takes, as the binaries' flags name them
SETTING_FLAGS = tuple(field.name for field in dataclasses.fields(MeasureSettings))


class PeerMeasure:
    """The measure `name` of `faithfulness.measures` for `loaded` with `options`' settings."""

    def __init__(self, name: str, loaded: Any, options: Any):
        self.name, self.loaded = name, loaded
        self.function = function_of(name)
        self.parameters = inspect.signature(self.function).parameters
        self.settings = given_settings(name, options)
        # what a measure takes says what it is handed (its signature, read once)
        given = {"batch_size": getattr(options, "batch_size", 64),
                 "seed": getattr(options, "seed", 0)}
        self.settings.update({key: value for key, value in given.items()
                              if key in self.parameters})
        if "return_auc_per_sample" in self.parameters:  # a curve: its area per image
            self.settings["return_auc_per_sample"] = True
        if ("return_average_correlation" in self.parameters  # mprt: its mean over the layers
                and not self.settings.get("return_last_correlation")):
            self.settings["return_average_correlation"] = True
        self.localising = name in measures.MASKED
        self.settings_seed = given["seed"]

    @property
    def metrics(self) -> tuple:
        return (spec_of(self.name),)

    def score(self, group: Group) -> dict:
        settings = dict(self.settings)
        if "ids" in self.parameters:
            settings["ids"] = group.ids
        if self.name in OTHER_MODEL:
            if group.explainer is None:
                raise UserError(f"{self.name} explains with a changed model: it needs the "
                                "explainer's name, not only its maps")
            settings["explain_func"] = group.explainer
        elif "explain_func" in self.parameters:
            settings["explain_func"] = explaining.KeyedExplain(group.explain)
        if self.name in PER_CALL:  # one value of the group's images
            return {self.name: self._per_call(group, settings)}
        if self.name == "focus":  # the mosaics of the group's images are its ground truth
            values = mosaics.focus_of_group(self.function, group, settings,
                                            self.settings_seed)
            return {self.name: values.astype("float64")}
        values = self.function(group.loaded, group.images, group.labels,
                               group.explain(group.images, group.labels),
                               group.masks if self.localising else None, **settings)
        return {self.name: values.astype("float64")}

    def _per_call(self, group: Group, settings: dict) -> np.ndarray:
        """[n]: a per-call measure's value of the group given to each of its images (the mean
        of a curve; MeGe and ReCo on the largest multiple of the folds, their models retrained
        on the other folds); NaN for a group too small."""
        count = len(group.images)
        if self.name in FOLDS:
            folds = settings.get("k_splits", 4)
            count -= count % folds
            settings["learning_algorithm"] = "retrain"
        if count < 2:
            return np.full(len(group.images), np.nan)
        whole = count == len(group.images)  # (the group's own arrays: its shared maps serve)
        images = group.images if whole else group.images[:count]
        labels = group.labels if whole else group.labels[:count]
        maps = None if self.name in FOLDS else group.explain(images, labels)
        values = self.function(group.loaded, images, labels, maps, None, **settings)
        finite = values[np.isfinite(values)]  # a constant step has no correlation
        return np.full(len(group.images), finite.mean() if len(finite) else np.nan)
