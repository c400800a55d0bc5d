"""The faithfulness protocols as measures (docs/architecture.md, "One metric shape"). Each is a
`models.foundation.metric_spec.Measure` of the metrics `faithfulness.protocols.METRICS`
declares: the scorer it builds once per evaluation (so that its traced functions are reused for
every explainer and group), and `score(group, options, scorer)`: every metric's per-image values
for one explainer on one group of images. `faithfulness.evaluate.per_image`, which the binary,
the report card and Beam call, reaches every protocol through `MEASURES`; a new measure is one
class and one entry.
The `saliency_maps_metrics`-compatible classes (`curves.Deletion` / `Insertion`,
`single_step.IIC_AD` / `ADD`) and the IDSDS functions (`idsds`) compute the values.
"""
import dataclasses
from typing import Any

from faithfulness import curves, idsds, inputs, protocols, single_step
from faithfulness import scorer as scoring
from models.foundation.metric_spec import Group, Measure


def activation(options: Any, protocol: str) -> Any:
    """The output activation a protocol scores: `--output_activation`, where auto means
    logits for single deletion (IDSDS) and softmax for the others."""
    if options.output_activation == "auto":
        return None if protocol == "single_deletion" else "softmax"
    return None if options.output_activation == "none" else options.output_activation


class SingleDeletion:
    """IDSDS single deletion: the rank correlation of each cell's attribution with the output
    drop when that cell alone is deleted (`idsds.single_deletion`)."""

    def scorer(self, loaded: Any, options: Any) -> Any:
        return scoring.Scorer(loaded, activation(options, "single_deletion"), options.batch_size)

    def score(self, group: Group, options: Any, scorer: Any) -> dict:
        result = idsds.single_deletion(
            scorer, group.images, group.labels, group.explain(group.images, group.labels),
            grid=options.grid_rows_and_cols, baseline=options.sd_baseline,
            attribution_transform=options.attribution_transform,
            output_activation=activation(options, "single_deletion"),
            batch_size=options.batch_size, seed=options.seed, ids=group.ids,
            blur_kernel=options.id_baseline_gaussian_kernel,
            blur_sigma=options.id_baseline_gaussian_sigma)
        return protocols.named("single_deletion", result["rho"])


class IncrementalDeletion:
    """IDSDS incremental deletion: the mean softmax output as cells are deleted in the map's
    order, re-explaining before each step with --id_update_attribution."""

    def scorer(self, loaded: Any, options: Any) -> Any:
        return scoring.Scorer(loaded, "softmax", options.batch_size)

    def score(self, group: Group, options: Any, scorer: Any) -> dict:
        update = options.id_update_attribution
        result = idsds.incremental_deletion(
            scorer, group.images, group.labels,
            None if update else group.explain(group.images, group.labels),
            explain_fn=group.explain, steps=options.id_steps, order=options.id_order,
            baseline=options.id_baseline, blur_kernel=options.id_baseline_gaussian_kernel,
            blur_sigma=options.id_baseline_gaussian_sigma, update_attribution=update,
            attribution_transform=options.attribution_transform,
            batch_size=options.batch_size, seed=options.seed, ids=group.ids)
        return protocols.named("incremental_deletion", result["curves"].mean(axis=1))


@dataclasses.dataclass(frozen=True)
class MaskingMeasure:
    """Deletion / insertion (DAUC, DC, IAUC, IC) or IIC / AD, ADD: the
    `saliency_maps_metrics`-compatible metric of `protocol`, with --data_replace_method where
    given (else the metric's own substrate)."""

    protocol: str

    def scorer(self, loaded: Any, options: Any) -> Any:
        common: dict = dict(batch_size=options.batch_size,
                            output_activation=activation(options, self.protocol))
        if options.data_replace_method:
            common["data_replace_method"] = options.data_replace_method
        if self.protocol in ("deletion", "insertion"):
            curve = curves.Deletion if self.protocol == "deletion" else curves.Insertion
            return curve(max_step_nb=options.max_step_nb, **common)
        return (single_step.IIC_AD if self.protocol == "iic_ad" else single_step.ADD)(**common)

    def score(self, group: Group, options: Any, scorer: Any) -> dict:
        maps = inputs.attributions(group.explain(group.images, group.labels), len(group.images),
                                   options.attribution_transform)
        found = scorer.compute_scores(group.loaded, group.images, maps, group.labels)
        if self.protocol in ("deletion", "insertion"):
            return dict(zip(scorer.keys, (found.auc, found.calibration)))
        return scorer.per_image(*found)


# protocol -> its measure (its metrics: faithfulness.protocols.METRICS)
MEASURES: dict[str, Measure] = {
    "single_deletion": SingleDeletion(), "incremental_deletion": IncrementalDeletion(),
    **{protocol: MaskingMeasure(protocol) for protocol in ("deletion", "insertion", "iic_ad",
                                                           "add")},
}
