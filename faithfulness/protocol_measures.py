"""The faithfulness protocols as measures (docs/architecture.md, "One metric protocol"). Each is
a `models.foundation.metric_spec.Measure` of the metrics `faithfulness.protocols.METRICS`
declares, built once per evaluation with the model and the protocol's options (so that its
traced functions are reused for every explainer and group), whose `score(group)` gives every
metric's per-image values for one explainer on one `Group` of images.
`faithfulness.evaluate.per_image`, which the binary, the report card and Beam call, reaches
every protocol through `measure(protocol, loaded, options)`; a new measure is one class and one
entry of `MEASURES`.

The values come from the protocols' computations: IDSDS (`idsds`), the curves
(`curve_computation.curve_scores`) and the single-step metrics
(`single_step_computation.single_step_scores`), which the `saliency_maps_metrics`-compatible
façades (`curves.Deletion` / `Insertion`, `single_step.IIC_AD` / `ADD`) call too.
"""
from typing import Any, Callable

from faithfulness import curve_computation, idsds, inputs, protocols, single_step_computation
from faithfulness import scorer as scoring
from faithfulness.measures import protocol as peers
from models.foundation.metric_spec import Group, Measure


def activation(options: Any, protocol: str) -> Any:
    """The output activation a protocol scores: `--output_activation`, where auto means
    logits for single deletion (IDSDS) and softmax for the others."""
    if options.output_activation == "auto":
        return None if protocol == "single_deletion" else "softmax"
    return None if options.output_activation == "none" else options.output_activation


class _ProtocolMeasure:
    """A protocol's measure: its options, the metrics it gives and its scorer, built once."""

    protocol = ""

    def __init__(self, loaded: Any, options: Any):
        self.loaded, self.options = loaded, options
        self.scorer = scoring.Scorer(loaded, self.output_activation(), options.batch_size)

    def output_activation(self) -> Any:
        """What the scorer applies to the model's output (`activation`)."""
        return activation(self.options, self.protocol)

    @property
    def metrics(self) -> tuple:
        return protocols.METRICS[self.protocol]

    def maps(self, group: Group) -> Any:
        """The explainer's maps of the group's images, transformed as the options say."""
        return inputs.attributions(group.explain(group.images, group.labels),
                                   len(group.images), self.options.attribution_transform)


class SingleDeletionMeasure(_ProtocolMeasure):
    """IDSDS single deletion: the rank correlation of each cell's attribution with the output
    drop when that cell alone is deleted (`idsds.single_deletion`)."""

    protocol = "single_deletion"

    def score(self, group: Group) -> dict:
        options = self.options
        result = idsds.single_deletion(
            self.scorer, group.images, group.labels, group.explain(group.images, group.labels),
            grid=options.grid_rows_and_cols, baseline=options.sd_baseline,
            attribution_transform=options.attribution_transform,
            output_activation=self.output_activation(),
            batch_size=options.batch_size, seed=options.seed, ids=group.ids,
            blur_kernel=options.id_baseline_gaussian_kernel,
            blur_sigma=options.id_baseline_gaussian_sigma)
        return protocols.named(self.protocol, result["rho"])


class IncrementalDeletionMeasure(_ProtocolMeasure):
    """IDSDS incremental deletion: the mean softmax output as cells are deleted in the map's
    order, re-explaining before each step with --id_update_attribution."""

    protocol = "incremental_deletion"

    def output_activation(self) -> Any:
        return "softmax"  # whatever --output_activation says (IDSDS's incremental deletion)

    def score(self, group: Group) -> dict:
        options = self.options
        update = options.id_update_attribution
        result = idsds.incremental_deletion(
            self.scorer, group.images, group.labels,
            None if update else group.explain(group.images, group.labels),
            explain_fn=group.explain, steps=options.id_steps, order=options.id_order,
            baseline=options.id_baseline, blur_kernel=options.id_baseline_gaussian_kernel,
            blur_sigma=options.id_baseline_gaussian_sigma, update_attribution=update,
            attribution_transform=options.attribution_transform,
            batch_size=options.batch_size, seed=options.seed, ids=group.ids)
        return protocols.named(self.protocol, result["curves"].mean(axis=1))


class _CurveMeasure(_ProtocolMeasure):
    """Deletion (DAUC, DC) or insertion (IAUC, IC) with --max_step_nb steps, on
    --data_replace_method where given (else the curve's own substrate: black for deletion,
    blur for insertion, as `curves.Deletion` / `Insertion`)."""

    substrate = ""

    def __init__(self, loaded: Any, options: Any):
        super().__init__(loaded, options)
        self.settings = curve_computation.CurveSettings(
            options.data_replace_method or self.substrate, self.protocol == "insertion",
            max_step_nb=int(options.max_step_nb))

    def score(self, group: Group) -> dict:
        found = curve_computation.curve_scores(self.settings, self.scorer, group.images,
                                               self.maps(group), group.labels)
        return protocols.named(self.protocol, found.auc, found.calibration)


class DeletionMeasure(_CurveMeasure):
    protocol, substrate = "deletion", "black"


class InsertionMeasure(_CurveMeasure):
    protocol, substrate = "insertion", "blur"


class _SingleStepMeasure(_ProtocolMeasure):
    """IIC / AD (the map's region kept) or ADD (removed), on --data_replace_method where given
    (else black, as `single_step.IIC_AD` / `ADD`)."""

    def __init__(self, loaded: Any, options: Any):
        super().__init__(loaded, options)
        self.settings = single_step_computation.SingleStepSettings(
            options.data_replace_method or "black", self.protocol == "add")

    def score(self, group: Group) -> dict:
        clean, masked = single_step_computation.single_step_scores(
            self.settings, self.scorer, group.images, self.maps(group), group.labels)
        return single_step_computation.VALUES[self.protocol](clean, masked)


class IicAdMeasure(_SingleStepMeasure):
    protocol = "iic_ad"


class AddMeasure(_SingleStepMeasure):
    protocol = "add"


# protocol -> its measure (its metrics: faithfulness.protocols.METRICS)
MEASURES: dict[str, Callable[[Any, Any], Measure]] = {
    measure.protocol: measure for measure in (
        SingleDeletionMeasure, IncrementalDeletionMeasure, DeletionMeasure, InsertionMeasure,
        IicAdMeasure, AddMeasure)}


def measure(protocol: str, loaded: Any, options: Any) -> Measure:
    """The measure of `protocol` for `loaded` with `options`, built once per evaluation: a
    protocol's, or one of the peers' measures (`faithfulness.measures.protocol.PeerMeasure`)."""
    if protocol in MEASURES:
        return MEASURES[protocol](loaded, options)
    return peers.PeerMeasure(protocol, loaded, options)

